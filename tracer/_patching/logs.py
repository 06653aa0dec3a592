"""Log records name their sequence (to be written: install/uninstall the record factory)."""

from __future__ import annotations


def install() -> None:
    """Chain the log record factory (idempotent)."""


def uninstall() -> None:
    """Restore the factory that was there, if ours is still in place."""
