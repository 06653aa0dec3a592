"""The tracer's logger, ``logging.getLogger("tracer")``, as ``log``: the logging package loads
at the first message, not at ``import tracer`` (it is no part of the hot path)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from logging import Logger
    from typing import Any


class _Log:
    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        import logging

        return getattr(logging.getLogger("tracer"), name)


log: Logger = _Log()  # type: ignore[assignment]
