"""A sync gRPC client call read to its end ends its invocation in the reading thread
(``ending_on_read``), not only in gRPC's done callback, which runs in the channel's polling thread
*after* gRPC has woken the reader: a program that reads a stream's last message (or a future's
result) and exits at once would otherwise exit before its call's end is recorded, and the call
would be stored as never ended. Used by ``grpc_client``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from tracer._core import recorder
from tracer._patching.integrations import _grpc

#: The attribute of a sync call object that holds its invocation (``ending_on_read``).
_ENDS: Final = "_invoseq_ends"
#: ``_EndsOnRead`` mixed into each class of sync call object gRPC returns, by that class.
_ENDING_CLASSES: dict[type, type] = {}


def _end_if_done(rpc: Any) -> None:
    try:
        if _ENDS not in rpc.__dict__ or not rpc.done():
            return
        # Taken once (atomically): reading the status reads the call again (``exception()``).
        ends = rpc.__dict__.pop(_ENDS, None)
        if ends is not None:
            call, status_of = ends
            call.finish(*status_of(rpc))
    except Exception as exc:
        recorder.internal_error(exc)


class _EndsOnRead:
    """Mixed into the class of a sync call object whose done callback has not run
    (``ending_on_read``): a read that finds the call done ends its invocation in the program's
    thread, before the read returns: ``next()`` that raises (past the last message, or the call's
    error), ``result()``, ``exception()``. gRPC runs done callbacks in its polling thread after it
    has woken the reader, so a program that reads a stream's last message and exits could
    otherwise exit before the callback recorded the call's end. A read that returns a message
    costs nothing more."""

    __slots__ = ()

    def __next__(self) -> Any:
        try:
            return super().__next__()  # type: ignore[misc]
        except BaseException:
            _end_if_done(self)
            raise

    def next(self) -> Any:
        return self.__next__()

    def result(self, timeout: float | None = None) -> Any:
        try:
            return super().result(timeout)  # type: ignore[misc]
        finally:
            _end_if_done(self)

    def exception(self, timeout: float | None = None) -> Any:
        try:
            return super().exception(timeout)  # type: ignore[misc]
        finally:
            _end_if_done(self)


def ending_on_read(
    rpc: Any, call: _grpc.Call, status_of: Callable[[Any], tuple[int | None, str | None]]
) -> None:
    """Let the program's own reads of ``rpc`` end ``call`` too (``_EndsOnRead``): ``rpc`` stays
    the object gRPC made, of a subclass of its class (same name, same layout). A call already
    ended (a unary call's outcome), or an object whose class cannot be swapped, is left as is."""
    if call.done:
        return
    try:
        kind = type(rpc)
        ending = _ENDING_CLASSES.get(kind)
        if ending is None:
            namespace = {"__slots__": (), "__module__": kind.__module__}
            ending = _ENDING_CLASSES.setdefault(
                kind, type(kind.__name__, (_EndsOnRead, kind), namespace)
            )
        rpc.__dict__[_ENDS] = (call, status_of)
        rpc.__class__ = ending
    except Exception as exc:
        recorder.internal_error(exc)
