"""The invocation stack: where a new invocation finds its parent (docs/architecture.md, "The
invocation stack").

More in docs/architecture.md, "The invocation stack".
"""

from __future__ import annotations

import _thread

from tracer._core import accel as _accel
from tracer._core import context, recorder

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Any, Final

#: The 4th item of a synchronous root's context value.
ORIGIN_SYNC_ROOT: Final = -1
#: The attribute an approximate parent is marked with, and its value.
APPROXIMATE: Final = {"invoseq.parent": "approximate"}

_tls = recorder.tls
_get = context.current.get
_get_ident = _thread.get_ident  # threading.get_ident


def _capture() -> context.Current | None:
    """The exact current context: (seq, the innermost open invocation, 0) when the top of this
    thread's stack began under the ContextVar's value, else that value's first three items;
    None outside any sequence."""
    current = _get()
    if current is None:
        return None  # entries never hold None: no stack entry can match
    top = getattr(getattr(_tls, "events", None), "top", None)
    if top is not None and top[0] is current:
        return (current[0], top[1], 0)
    return (current[0], current[1], current[2])


def _nested() -> context.Current | None:
    """(seq, the innermost open invocation, 0) when the top of this thread's stack began under
    the ContextVar's value, else None: what a context copied now should carry."""
    current = _get()
    top = getattr(getattr(_tls, "events", None), "top", None)
    if current is not None and top is not None and top[0] is current:
        return (current[0], top[1], 0)
    return None


capture: Any
nested: Any
if _accel.speedups is not None:
    capture = _accel.speedups.capture
    nested = _accel.speedups.nested
else:
    capture = _capture
    nested = _nested


def live(value: Any) -> Any:
    """A value read from the ContextVar (or a given Context) as a sequence: None for none, which
    a root's value the root has closed also means (the C accelerator leaves a closed value in
    place for the next root of its context to open again)."""
    if value is None or getattr(value, "closed", False):
        return None
    return value


def active() -> bool:
    """Whether a sequence is current (cheaper than ``capture() is not None``)."""
    return live(_get()) is not None


def new_value(seq: bytes, parent: int, hid: int) -> tuple[bytes, int, int, int]:
    """A context value set on this thread for a strand (a hand-off's runner): exact here,
    approximate where a context copied from it by code we do not patch is found."""
    return (seq, parent, hid, _get_ident())


__all__ = ["APPROXIMATE", "ORIGIN_SYNC_ROOT", "active", "capture", "live", "nested", "new_value"]
