"""The HTML report of one sequence: ``build_model`` lays it out as data, ``render_page`` turns
that into one self-contained page (``cmr report``, and ``cmr ui`` serves both)."""

from __future__ import annotations

from cmr.report.model import build_model
from cmr.report.page import render_page

__all__ = ["build_model", "render_page"]
