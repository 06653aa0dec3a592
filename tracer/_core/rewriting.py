"""The instrumentation backend of Python 3.11, which has no ``sys.monitoring``: a traced
function's ``__code__`` is replaced by an instrumented copy (``tracer._core.inject``) that calls
the handlers where 3.12's local events would fire, so the function stays the same object and
runs in its own frame.

More in docs/architecture.md, "tracer/_core/rewriting.py".
"""

from __future__ import annotations

from types import CodeType, FunctionType, SimpleNamespace
from typing import Any

from tracer._core import inject
from tracer._core.log import log


class Rewriting:
    """The tracer's instrumented copies of code, and the handlers they call."""

    def __init__(self, handlers: Any) -> None:
        self.handlers = handlers
        #: id(code) -> (code, its copy), the code kept so its id stays its own. By identity, not
        #: by value: two modules defining the same function from the same text (a vendored copy)
        #: have equal code objects, and the second was given the first's copy, which reports
        #: under the first's method.
        self._copies: dict[int, tuple[CodeType, CodeType]] = {}

    def attach(self, function: FunctionType, method: int, kind: int) -> CodeType | None:
        code = function.__code__
        known = self._copies.get(id(code))
        copy = None if known is None else known[1]
        if copy is None:
            mark = getattr(self.handlers, "mark", None)  # the C handlers read the code's slot
            if mark is not None:
                mark(code, method, kind)
            try:
                copy = inject.instrument(code, code, self._hooks_for(method, kind))
            except (ValueError, TypeError, RuntimeError) as exc:  # code it cannot take
                log.debug("invoseq: cannot trace %s: %s", code.co_qualname, exc)
                return None
            self._copies[id(code)] = (code, copy)
        function.__code__ = copy
        return copy

    def _hooks_for(self, method: int, kind: int) -> Any:
        """The handlers one code's copy calls: the pure-Python ones give sync code a start
        handler of its own, which knows its method (``hooks.start_for``)."""
        start_for = getattr(self.handlers, "start_for", None)
        if start_for is None:
            return self.handlers
        handlers = self.handlers
        return SimpleNamespace(
            start=start_for(method, kind),
            resume=handlers.resume,
            yield_=handlers.yield_,
            return_=handlers.return_,
            throw=handlers.throw,
            unwind=handlers.unwind,
        )

    def untraced_code(self, running: CodeType) -> CodeType:
        return inject.uninstrument(running) if inject.is_instrumented(running) else running

    def detach(self, function: FunctionType) -> None:
        code = function.__code__
        if inject.is_instrumented(code):
            function.__code__ = inject.uninstrument(code)


__all__ = ["Rewriting"]
