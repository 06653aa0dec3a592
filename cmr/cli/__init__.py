"""The ``cmr`` command: ``main`` parses and dispatches; one module per command beside it, and
``common`` for what they share (the parser class, options, the one stdout writer)."""

from cmr.cli.main import main

__all__ = ["main"]
