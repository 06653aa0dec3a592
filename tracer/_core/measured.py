"""Invocations that an integration measures: a request a server handles, a request a client sends.
Their name is known only part of the way in (a route, once matched), so an invocation is begun,
opened once named, and finished, in three steps.

More in docs/architecture.md, "tracer/_core/measured.py".
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Mapping
from typing import Final

from invoseq.events import (
    MAX_ATTRIBUTE_VALUE,
    MAX_ATTRIBUTES,
    TAG_ATTRS,
    TAG_END,
    TAG_ERROR,
    TAG_START,
)
from tracer._core import adoption, budget, context, decorator, forking, recorder, stack

MAX_NAMES: Final = 4096
_I64: Final = 2**63
OTHER_NAMES: Final = "<other names>"

AttributeValue = str | int | float | bool

_lock = threading.RLock()  # reentrant: a finalizer may intern too (recorder._lock)
_methods: dict[tuple[str, str], int] = {}
_counts: dict[str, int] = {}  # names interned per module

#: One item per invocation ``begin`` began and ``finish`` has not ended, service ones aside: a
#: request in flight, which an event loop's wait serves (``tracer._sampling.active``: worth sampling
#: while any is open). A deque's append and pop are atomic: no lock. Bounded: one never
#: finished cannot grow it past ``MAX_OPEN`` (it then says "open" for as long as it is full).
MAX_OPEN: Final = 65536
OPEN: Final[deque[None]] = deque(maxlen=MAX_OPEN)


_tls = recorder.tls  # recorder.thread_events(), inline: a registered thread's buffer
_capture = stack.capture


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()
    OPEN.clear()  # the parent's requests are not the child's to finish


forking.on_fork("measured", in_child=_after_fork_in_child)


def method(module: str, name: str) -> int:
    """The interned method id of ``module``'s ``name`` (``"flask"``, ``"GET /price/<item>"``);
    past ``MAX_NAMES`` names of one module, its ``OTHER_NAMES``."""
    key = (module, name)
    found = _methods.get(key)
    if found is not None:
        return found
    with _lock:
        found = _methods.get(key)
        if found is None:
            if _counts.get(module, 0) >= MAX_NAMES:
                key = (module, OTHER_NAMES)
                found = _methods.get(key)
                if found is not None:
                    return found
            _counts[module] = _counts.get(module, 0) + 1
            found = _methods[key] = recorder.register_method(module, key[1], "", 0)
    return found


def interned(module: str, name: str) -> bool:
    """Whether ``name`` has a method of its own (else it was named ``OTHER_NAMES``)."""
    return (module, name) in _methods


class Measured:
    """One measured invocation between ``begin`` and ``finish`` (module docstring)."""

    __slots__ = ("counted", "hid", "iid", "opened", "parent", "seq", "started_ns", "value")

    def __init__(self, seq: bytes, parent: int, hid: int, iid: int, started_ns: int) -> None:
        self.seq = seq
        self.parent = parent
        self.hid = hid
        self.iid = iid
        self.started_ns = started_ns
        self.opened = False
        self.counted = False  # in ``OPEN``
        #: The context value the code inside the invocation runs with.
        self.value: context.Current = (seq, iid, 0)

    def open(self, method_id: int) -> None:
        """Write the Start (with the time ``begin`` read), named by ``method_id``; once."""
        if self.opened:
            return
        self.opened = True
        try:
            try:
                events = _tls.events
            except AttributeError:
                events = recorder.register_thread()
            events.append(
                (TAG_START, self.iid, self.parent, self.hid, method_id, self.started_ns, self.seq)
            )
        except Exception as exc:
            recorder.internal_error(exc)

    def finish(
        self,
        fallback_method: int,
        attributes: Mapping[str, AttributeValue] | None = None,
        *,
        error: str | None = None,
        clipped: bool = False,
    ) -> None:
        """Write the attributes and the End (or the Error named ``error``); open it first,
        named ``fallback_method``, if it never was. ``clipped``: the attributes are within the
        wire's limits already (``clip``), as a server request's own are."""
        if self.counted:  # uncount(), inline: every request ends here
            self.counted = False
            with contextlib.suppress(IndexError):  # emptied by a fork since
                OPEN.pop()
        if not self.opened:
            self.open(fallback_method)
        try:
            try:
                events = _tls.events
            except AttributeError:
                events = recorder.register_thread()
            if attributes:
                events.append((TAG_ATTRS, self.iid, attributes if clipped else clip(attributes)))
            now = decorator._clock()  # decorator.now(), inline (a test's clock too)
            if error is None:
                events.append((TAG_END, self.iid, now))
            else:
                events.append((TAG_ERROR, self.iid, now, error[:1024]))
        except Exception as exc:
            recorder.internal_error(exc)

    def uncount(self) -> None:
        """No longer among the ``OPEN`` invocations (it ended, or it is a service's)."""
        if self.counted:
            self.counted = False
            try:
                OPEN.pop()
            except IndexError:  # emptied by a fork since
                return


def begin(start_from: context.Current | None = None) -> Measured | None:
    """Begin an invocation under ``start_from`` (a remote caller's context value), else under the
    current invocation, else as a root (joining a current OpenTelemetry span, or a new sequence).
    None when the tracer is not recording or the memory bound is reached (counted)."""
    # Every request a server measures begins here: decorator.recording(), next_iid() and now()
    # and recorder.thread_events() are read inline (the same sources, a test's too).
    if decorator._disabled:
        return None
    try:
        try:
            events = _tls.events
        except AttributeError:
            events = recorder.register_thread()
        current = start_from if start_from is not None else _capture()
        if len(events) >= events.limit and not budget.refill(events, current):
            return None
        if current is None and adoption.loaded:
            current = adoption.adopt()
        seq, parent, hid = (decorator.new_seq(), 0, 0) if current is None else current
        if not seq:  # the untraced marker of a call past the memory bound
            return None
        call = Measured(seq, parent, hid, decorator._next_iid(), decorator._clock())
        OPEN.append(None)
        call.counted = True
        return call
    except Exception as exc:
        recorder.internal_error(exc)
        return None


def clip(attributes: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    """Attributes within the wire's limits (``wire.Attrs``): at most ``MAX_ATTRIBUTES``, text cut
    to ``MAX_ATTRIBUTE_VALUE`` characters."""
    clipped: dict[str, AttributeValue] = {}
    for key, value in attributes.items():
        if len(clipped) >= MAX_ATTRIBUTES:
            break
        if isinstance(value, str) and len(value) > MAX_ATTRIBUTE_VALUE:
            clipped[key[:1024]] = value[:MAX_ATTRIBUTE_VALUE]
        elif isinstance(value, int) and not -_I64 <= value < _I64:
            clipped[key[:1024]] = str(value)  # the wire's integers are signed 64-bit
        else:
            clipped[key[:1024]] = value
    return clipped


def add_attributes(iid: int, attributes: Mapping[str, AttributeValue]) -> None:
    """Record attributes of invocation ``iid`` (a later value of a key wins: ``wire.Attrs``)."""
    try:
        recorder.thread_events().append((TAG_ATTRS, iid, clip(attributes)))
    except Exception as exc:
        recorder.internal_error(exc)
