"""Log records name their sequence: the record factory the tracer chains in while instrumented.

More in docs/architecture.md, "tracer/_patching/logs.py".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from tracer._core import budget, context, decorator, forking, measured, recorder, stack

#: The value of ``invoseq_seq`` and ``invoseq_iid`` when there is none.
PLACEHOLDER: Final = "-"
#: Records at WARNING or above recorded per invocation, and characters kept of each message.
MAX_RECORDS: Final = 8
MAX_MESSAGE: Final = 512
#: Characters kept of a logger's name.
MAX_LOGGER: Final = 256
#: Invocations whose record counts are remembered (the oldest is forgotten first).
MAX_TRACKED: Final = 4096
#: Attribute keys: ``log.0`` … ``log.7``, and the count of the records past the bound.
KEY_PREFIX: Final = "log."
KEY_DROPPED: Final = "log.dropped"

Factory = Callable[..., logging.LogRecord]

_capture = stack.capture  # the exact current invocation
# Reentrant: a signal handler on a thread inside ``_count`` may log a warning too.
_lock = threading.RLock()
_counts: dict[int, int] = {}  # iid -> records at WARNING or above seen, oldest first
_busy = threading.local()  # set while a record is recorded: its own logging is not
_ours: _Factory | None = None


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()


forking.on_fork("logs", in_child=_after_fork_in_child)


class _Factory:
    """Our factory: it calls the one it wraps (``previous``), then annotates the record unless
    it was uninstalled while another factory sat on top of it (``active`` False)."""

    __slots__ = ("active", "previous")

    def __init__(self, previous: Factory) -> None:
        self.previous = previous
        self.active = True

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        if self.active:
            _annotate(record)
        return record


def install() -> None:
    """Chain the log record factory (idempotent)."""
    global _ours
    try:
        with _lock:
            if _ours is not None and _ours.active:
                return
            ours = _Factory(logging.getLogRecordFactory())
            logging.setLogRecordFactory(ours)
            _ours = ours
    except Exception as exc:
        recorder.internal_error(exc)


def uninstall() -> None:
    """Restore the factory that was there, if ours is still in place; else make ours a
    pass-through, so a factory chained on top of it goes on working."""
    global _ours
    try:
        with _lock:
            ours, _ours = _ours, None
            if ours is None:
                return
            ours.active = False
            if logging.getLogRecordFactory() is ours:
                logging.setLogRecordFactory(ours.previous)
    except Exception as exc:
        recorder.internal_error(exc)


def _annotate(record: logging.LogRecord) -> None:
    """Name the record's sequence and invocation; record it on the invocation at WARNING+."""
    seq = iid = PLACEHOLDER
    current = None
    try:
        value = _capture()
        if value is not None and value[0]:  # an empty seq: a call past the memory bound
            seq = value[0].hex()
            if value[1] and not value[2]:  # no hand-off pending: the invocation is this side's
                iid = f"{value[1]:016x}"
                current = value
    except Exception as exc:
        recorder.internal_error(exc)
    try:
        # As logging.makeLogRecord sets attributes: a record type of the program's may declare
        # no such attribute.
        record.__dict__.update(invoseq_seq=seq, invoseq_iid=iid)
        level = record.levelno
        if (
            current is not None
            and isinstance(level, int)
            and level >= logging.WARNING
            and decorator.recording()
            and not getattr(_busy, "on", False)
        ):
            _busy.on = True
            try:
                _record(current, record)
            finally:
                _busy.on = False
    except Exception as exc:
        recorder.internal_error(exc)


def _count(iid: int) -> int:
    """How many records invocation ``iid`` had before this one (and count this one)."""
    with _lock:
        seen = _counts.get(iid, 0)
        _counts[iid] = seen + 1
        while len(_counts) > MAX_TRACKED:
            del _counts[next(iter(_counts))]  # the oldest: iids grow, insertion order is age
        return seen


def _record(current: context.Current, record: logging.LogRecord) -> None:
    """``log.<n>`` within the bound, else the new ``log.dropped``; within the memory bound."""
    iid = current[1]
    seen = _count(iid)
    events = recorder.thread_events()
    if seen < MAX_RECORDS:
        # As a traced call's Start: past the allowance, reserve more or count it as lost (as
        # an overflowing call: its sequence is then lossy).
        if len(events) >= events.limit and not budget.refill(events, current):
            return
        measured.add_attributes(iid, {f"{KEY_PREFIX}{seen}": describe(record)})
    elif len(events) < events.limit:  # a later count says it all: never worth a reservation
        measured.add_attributes(iid, {KEY_DROPPED: seen + 1 - MAX_RECORDS})


def describe(record: logging.LogRecord) -> str:
    """``"WARNING app.pricing: stock low for apple"``, the message cut to ``MAX_MESSAGE``
    characters; a message whose arguments do not format is shown unformatted."""
    try:
        message = record.getMessage()
    except Exception as exc:
        try:
            message = f"{record.msg} (arguments did not format: {type(exc).__name__})"
        except Exception:
            message = "<message did not format>"
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    text = f"{record.levelname} {str(record.name)[:MAX_LOGGER]}: {message}"
    exc_info = record.exc_info
    if isinstance(exc_info, tuple) and isinstance(exc_info[0], type):
        text += f" [{exc_info[0].__name__}]"
    return text
