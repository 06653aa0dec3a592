"""One memory bound per process: ``max_buffered_bytes`` for every event the tracer holds.

More in docs/architecture.md, "One memory bound per process".
"""

from __future__ import annotations

import _thread

from tracer._core import accel as _accel
from tracer._core import clock as _clock
from tracer._core import forking

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, Final, TypeAlias

    from tracer._core._speedups import EventBuffer
    from tracer._core.recorder import EventList

    Sink: TypeAlias = "EventList | EventBuffer"

#: What one buffered event costs, in bytes. C accelerator: a 72-byte record (its array's unused
#: tail takes no memory once the array is mapped), and the about 40 bytes of its encoding that
#: exist beside it while the sender takes it. Pure Python: a tuple with its ints, its sequence id
#: shared or not, in a list (137 bytes nested, 169 for roots; measured: docs/architecture.md).
EVENT_BYTES: Final = 176 if _accel.speedups is None else 112
#: Events a thread reserves at a time (fewer when the pool runs low), so the lock is taken about
#: once per 2,000 calls of a busy thread; a smaller bound reserves in smaller chunks.
MAX_CHUNK_EVENTS: Final = 4096

# Reentrant, so that a signal handler running traced code on a thread that holds it finds it
# busy (``_busy``) and counts an overflow instead of deadlocking; held for a few steps only.
_lock = _thread.RLock()
_busy = False
#: ``Config().max_buffered_bytes`` (a test keeps them equal), until the runtime configures it:
#: the settings load with the sender, not with ``import tracer``.
DEFAULT_BOUND: Final = 32 * 1024 * 1024
_total = DEFAULT_BOUND
_free = _total  # neither reserved by a thread nor held by the sender; may go negative
_held = 0  # held by the sender: drained events, then encoded batches
_chunk = MAX_CHUNK_EVENTS


def _no_op() -> None:
    pass


#: Tells the C accelerator that memory came back (``_speedups.budget_changed``): the refusals it
#: remembers (``refill``'s False) are asked again. Called wherever ``_free`` grows.
_changed: Callable[[], None] = _no_op if _accel.speedups is None else _accel.speedups.budget_changed
#: The calls the C accelerator counted past the bound, since the process started.
_c_overflowed: Callable[[], int] = (
    (lambda: 0) if _accel.speedups is None else _accel.speedups.overflowed
)


#: Called (outside the lock) when a thread reserved and the threads now hold more than a quarter
#: of the bound: the sender sets it to wake its worker, so a busy program is drained early.
on_threads_full: Callable[[], None] = _no_op
#: Called (outside the lock) after every reservation: the sender sets it to wake itself and the
#: sampler when they wait for work (docs/architecture.md, "Idle"). An idle thread holds no
#: allowance after a drain, so its next Start comes here: the hot path pays nothing for it.
on_reserved: Callable[[], None] = _no_op


def configure(max_bytes: int) -> None:
    """Set the bound (the runtime does, from the configuration); what is held already stays."""
    global _total, _free, _chunk, _busy
    with _lock:
        _busy = True  # a signal handler's traced call meanwhile counts an overflow
        _free += max_bytes - _total
        _total = max_bytes
        _chunk = max(1, min(MAX_CHUNK_EVENTS, max_bytes // EVENT_BYTES // 64))
        _busy = False
    _changed()


def refill(sink: Sink, current: Sequence[Any] | None) -> bool | None:
    """The slow path of a Start whose thread reached its allowance: reserve another chunk and
    return True, or count the call as overflow (it runs untraced) and return False or None.
    False: the bound is spent and the call's sequence is named lossy (or it has none), so the
    next calls of that sequence would be refused and counted alike until memory comes back
    (``_changed``): the C accelerator counts them itself meanwhile. None: ask again next time
    (another thread held the lock, or the sequence is past the names kept: each call moves the
    unnamed window's end)."""
    global _busy
    granted = full = busy = False
    if _free >= EVENT_BYTES:
        with _lock:
            if _busy:
                busy = True
            else:
                _busy = True
                try:
                    granted = _grant(sink, len(sink))
                    full = granted and 4 * (_total - _free - _held) > _total
                finally:
                    _busy = False
    if granted:
        if full:
            on_threads_full()
        on_reserved()
        return True
    overflow(current)
    if busy or (current is not None and current[0] not in _overflow_seqs):
        return None
    return False


def _grant(sink: Sink, length: int) -> bool:
    """Reserve the next chunk of a sink holding ``length`` events (the lock held): what it owes
    (the ends of calls in flight past its allowance), and a chunk, or an eighth of what is free
    when less is left."""
    global _free
    owed = max(0, length - sink.limit)
    free = _free // EVENT_BYTES
    grant = min(owed + min(_chunk, max(1, free // 8)), free)
    if grant <= owed:
        return False
    sink.limit += grant
    _free -= grant * EVENT_BYTES
    return True


def hand_over(sink: Sink) -> int:
    """The sender is about to take the sink's oldest ``n`` events (returned; it takes them at
    once): their charge becomes the sender's. The thread's unused allowance returns to the pool,
    so an idle thread holds nothing after a drain; a thread that recorded since the last one is
    given its next chunk now, so a steady one never takes the slow path for it."""
    global _free, _held
    with _lock:
        count = len(sink)
        unused = sink.limit - count
        if unused > 0:
            _free += unused * EVENT_BYTES
            sink.limit = count
        sink.limit -= count  # below 0: it passed its allowance by that much, repaid later
        _held += count * EVENT_BYTES
        if count and _free >= EVENT_BYTES:
            _grant(sink, len(sink) - count)  # as it will hold once the sender took them
    if unused > 0:
        _changed()
    return count


def take_back(sink: Sink, count: int) -> None:
    """The sender could not take the ``count`` events it was handed (no memory): they stay with
    their thread, and so does their charge."""
    global _held
    with _lock:
        sink.limit += count
        _held -= count * EVENT_BYTES


def forget(sink: Sink) -> None:
    """A thread ended and its buffer was drained: the pool takes back its allowance (or pays
    what it owed)."""
    global _free
    with _lock:
        _free += (sink.limit - len(sink)) * EVENT_BYTES
        sink.limit = len(sink)
    _changed()


def hold(size: int) -> None:
    """The sender holds ``size`` more bytes (an encoded batch), or fewer when negative (drained
    events released, a batch acknowledged, spooled or dropped). Never refused: the threads see
    less room until it is given back."""
    global _free, _held
    with _lock:
        _free -= size
        _held += size
    if size < 0:
        _changed()


def in_use() -> int:
    """Bytes counted against the bound now: reserved by threads or held by the sender."""
    return _total - _free


def limit() -> int:
    return _total


def held() -> int:
    return _held


# -- calls left untraced past the bound -------------------------------------------------------

_overflow_calls = 0
#: ``_c_overflowed()`` at the last take: the C accelerator's count goes on from there.
_c_taken = 0
#: Every call ``overflow`` counted since the process started (``overflowed``).
_overflow_total = 0
_overflow_seqs: set[bytes] = set()
_MAX_OVERFLOW_SEQS: Final = 1024
#: When the first and the last call past ``_MAX_OVERFLOW_SEQS`` named sequences ran (the
#: tracer's clock; 0: none since the last take): their sequences are known by this time window.
_unnamed_first = _unnamed_last = 0


def overflow(current: Sequence[Any] | None) -> None:
    """A traced call ran untraced because the process's bound was reached (the sender cannot
    keep up): count its two events, and remember its sequence (when it had one) as lossy; past
    the names kept, the time of the call (only then is the clock read)."""
    global _overflow_calls, _overflow_total, _unnamed_first, _unnamed_last
    _overflow_calls += 1
    _overflow_total += 1
    if current is not None:
        if len(_overflow_seqs) < _MAX_OVERFLOW_SEQS:
            _overflow_seqs.add(current[0])
        elif current[0] not in _overflow_seqs:
            _unnamed_last = _clock.now()
            if not _unnamed_first:
                _unnamed_first = _unnamed_last


def overflow_inside_untraced() -> None:
    """A call that would root a sequence ran untraced because a root it runs inside did (past
    the bound): counted as that root was (``overflow``), with no sequence. Read through the
    module, so a test that replaces ``overflow`` counts these too."""
    overflow(None)


def overflowed() -> int:
    """Every call run untraced past the bound since the process started (``overflow``'s and
    the C accelerator's own count)."""
    return _overflow_total + _c_overflowed()


def take_overflow() -> tuple[int, set[bytes], tuple[int, int] | None]:
    """The events of the calls left untraced since the last take, their sequences, and the
    time window of those whose sequences were past the names kept (None: there were none)."""
    global _overflow_calls, _c_taken, _unnamed_first, _unnamed_last
    counted = _c_overflowed()
    calls, _overflow_calls = _overflow_calls + counted - _c_taken, 0
    _c_taken = counted
    seqs = set(_overflow_seqs)
    _overflow_seqs.difference_update(seqs)
    _changed()  # the sequences the C accelerator counts alone are named again for the next take
    first, last = _unnamed_first, _unnamed_last
    _unnamed_first = _unnamed_last = 0
    return 2 * calls, seqs, ((first, last) if first else None)


def _after_fork_in_child() -> None:
    """The child holds none of its parent's events: the whole bound is free again."""
    global _lock, _busy, _free, _held, _overflow_calls, _c_taken
    _lock = _thread.RLock()
    _busy = False
    _free, _held = _total, 0
    _overflow_calls, _c_taken = 0, _c_overflowed()  # the parent's are the parent's to report
    _changed()


forking.on_fork("budget", in_child=_after_fork_in_child)
