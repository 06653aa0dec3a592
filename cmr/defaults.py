"""Defaults of the repository side, kept apart from the tracer so neither package imports the other.

The tracer defines the same endpoint independently: a traced process and ``cmr serve`` meet there
when nobody configured anything.
"""

from __future__ import annotations

from typing import Final

#: Where ``cmr serve`` listens unless ``--bind`` says otherwise (loopback only).
DEFAULT_ENDPOINT: Final = "tcp://127.0.0.1:7311"
