"""The instrumentation backend of Python 3.12+: ``sys.monitoring`` (PEP 669).

More in docs/architecture.md, "tracer/_core/monitoring.py".
"""

from __future__ import annotations

import sys
from types import CodeType, FunctionType, ModuleType
from typing import Any, Final

from tracer._core.log import log

#: The ids the tracer may take, in order: those PEP 669 reserves for no kind of tool.
CANDIDATE_IDS: Final = (4, 3)
TOOL_NAME: Final = "invoseq"

_monitoring: ModuleType | None = getattr(sys, "monitoring", None)


class Monitoring:
    """The tracer's tool: its id, its handlers, its traced code."""

    def __init__(self, tool: int, handlers: Any) -> None:
        assert _monitoring is not None
        events = _monitoring.events
        self.tool = tool
        self.handlers = handlers
        self.local = events.PY_START | events.PY_RESUME | events.PY_YIELD | events.PY_RETURN
        self.callbacks = (
            (events.PY_START, handlers.start),
            (events.PY_RESUME, handlers.resume),
            (events.PY_YIELD, handlers.yield_),
            (events.PY_RETURN, handlers.return_),
            (events.PY_UNWIND, handlers.unwind),
            (events.PY_THROW, handlers.throw),
        )
        for event, handler in self.callbacks:
            _monitoring.register_callback(tool, event, handler)
        _monitoring.set_events(tool, events.PY_UNWIND | events.PY_THROW)

    def attach(self, function: FunctionType, method: int, kind: int) -> CodeType | None:
        assert _monitoring is not None
        code = function.__code__
        mark = getattr(self.handlers, "mark", None)  # the C handlers read the code's own slot
        if mark is not None:
            mark(code, method, kind)
        try:
            _monitoring.set_local_events(self.tool, code, self.local)
        except ValueError as exc:  # not a code object sys.monitoring can instrument
            log.debug("invoseq: cannot trace %s: %s", code.co_qualname, exc)
            return None
        return code

    def detach(self, function: FunctionType) -> None:
        assert _monitoring is not None
        _monitoring.set_local_events(self.tool, function.__code__, 0)

    def untraced_code(self, running: CodeType) -> CodeType:
        return running.replace()  # another code object: no local events

    def close(self) -> None:
        """Give the tool id back (nothing is traced through it any more)."""
        assert _monitoring is not None
        _monitoring.set_events(self.tool, 0)
        for event, _ in self.callbacks:
            _monitoring.register_callback(self.tool, event, None)
        _monitoring.free_tool_id(self.tool)


def supported() -> bool:
    """Whether this Python has ``sys.monitoring`` (3.12+)."""
    return _monitoring is not None


def claim(handlers: Any) -> Monitoring | None:
    """Take a free tool id for the tracer with these handlers; None on a Python without
    ``sys.monitoring`` or when other tools hold every id we may take."""
    if _monitoring is None:
        return None
    for tool in CANDIDATE_IDS:
        if _monitoring.get_tool(tool) is None:
            try:
                _monitoring.use_tool_id(tool, TOOL_NAME)
            except ValueError:  # taken since
                continue
            return Monitoring(tool, handlers)
    log.warning(
        "invoseq: every sys.monitoring tool id it may use (%s) is taken by other tools; "
        "traced functions are wrapped instead",
        ", ".join(map(str, CANDIDATE_IDS)),
    )
    return None


__all__ = ["CANDIDATE_IDS", "TOOL_NAME", "Monitoring", "claim", "supported"]
