"""Where events wait for the sender: per-thread buffers, and the interned methods and threads.

More in docs/architecture.md, "tracer/_core/recorder.py".
"""

from __future__ import annotations

import _thread
import contextlib
import itertools
from _weakref import ref as _weak_ref
from time import monotonic as _monotonic

from tracer._core import accel as _accel
from tracer._core import budget, context, forking
from tracer._core.log import log

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # threading loads with the first event (register_thread)
    import threading
    import weakref
    from collections.abc import Callable
    from types import CodeType
    from typing import Any, Final, TypeAlias

    import msgspec

    from tracer._core._speedups import EncodedEvents, EventBuffer


#: An event as the hot path records it; the layouts are those of invoseq.wire's event structs.
EventTuple: TypeAlias = "tuple[Any, ...]"
#: A method's interned metadata, laid out as invoseq.wire.MethodInfo.
MethodTuple: TypeAlias = "tuple[int, str, str, str, int]"
#: A thread's interned metadata, laid out as invoseq.wire.ThreadInfo.
ThreadTuple: TypeAlias = "tuple[int, int, str]"
#: A sampled code location, laid out as invoseq.wire.FrameInfo.
FrameTuple: TypeAlias = "tuple[int, str, str, int]"


#: The top of an empty stack: a strand no ContextVar value is (so nothing nests in it).
NO_TOP: Final[tuple[Any, ...]] = (object(), 0, b"")


class EventList(list[EventTuple]):
    """A thread's events on the pure-Python path, with its allowance (``tracer._core.budget``)
    and the top of its invocation stack (``tracer._core.stack``): (strand, iid, seq, ...) of the
    innermost open sync call, or ``NO_TOP``. A wrapped call keeps the one below in its frame;
    an instrumented call's entry carries it (``tracer._core.hooks``)."""

    __slots__ = ("ident", "limit", "top")
    ident: int  # the thread's threading.get_ident(): where a strand's value was set
    limit: int
    top: tuple[Any, ...]


def _new_event_list() -> EventList:
    events = EventList()
    events.limit = 0  # the first Start reserves
    events.top = NO_TOP
    events.ident = _thread.get_ident()
    return events


#: Where a thread records: a list of event tuples, or the C accelerator's record buffer.
EventSink: TypeAlias = "EventList | EventBuffer"
#: A thread's drained events, for the sender: tuples, or the C accelerator's encoded events.
Events: TypeAlias = "list[EventTuple] | EncodedEvents"

tls: Final = _thread._local()  # threading.local
#: The process's invocation counter: one, whichever implementation records (the C one is C's).
next_iid: Callable[[], int]
_new_sink: Callable[[], EventSink]
#: ``untracked(make, arg)``: ``make(arg)``, bytes the tracer keeps (a batch's body). With the C
#: accelerator tracemalloc forgets them at once, as it never sees the C buffers: a program that
#: measures its own allocations does not count the tracer's. Pure Python cannot, and its events
#: are Python objects anyway.
untracked: Callable[[Callable[[Any], bytes], Any], bytes]
#: ``untracked_into(encode_into, obj, buffer)``: ``encode_into(obj, buffer)``, into a bytearray
#: the tracer keeps and reuses (``tracer._shipping.bodies``), forgotten by tracemalloc likewise.
untracked_into: Callable[[Callable[[Any, bytearray], None], Any, bytearray], None]
#: The C accelerator keeps the blocks its takes encode into for the next takes (its
#: _speedups_pool.h); an idle drain gives them back.
_release_pool: Callable[[], None]
if _accel.speedups is None:
    next_iid = itertools.count(1).__next__
    _new_sink = _new_event_list

    def untracked(make: Callable[[Any], bytes], arg: Any) -> bytes:
        return make(arg)

    def untracked_into(
        encode_into: Callable[[Any, bytearray], None], obj: Any, buffer: bytearray
    ) -> None:
        encode_into(obj, buffer)

    def _release_pool() -> None:
        pass
else:
    from tracer._core import _speedups

    next_iid = _speedups.next_iid
    _new_sink = _speedups.EventBuffer
    untracked = _speedups.untracked
    untracked_into = _speedups.untracked_into
    _release_pool = _speedups.release_pool
_next_tid: Final[Callable[[], int]] = itertools.count(1).__next__
#: Batches are numbered per process, not per sender: the repository discards a (puid, batch_no)
#: it has seen, so a sender replaced by configure() must never start the numbers again.
next_batch_no: Final[Callable[[], int]] = itertools.count(1).__next__


class ThreadBuffer:
    """A thread's events, and who it is (compared by identity)."""

    __slots__ = ("events", "ident", "info", "taken_at", "thread", "tid", "trimmed")

    def __init__(
        self,
        tid: int,
        ident: int,
        info: ThreadTuple,
        thread: weakref.ref[threading.Thread],
        events: EventSink | None = None,
    ) -> None:
        self.tid = tid
        self.ident = ident
        self.info = info
        self.thread = thread
        self.events: EventSink = _new_sink() if events is None else events
        self.taken_at = 0.0  # when a drain last took its events (time.monotonic)
        self.trimmed = True  # its arrays gave their memory back since (a list has none to give)

    def __repr__(self) -> str:
        return f"ThreadBuffer(tid={self.tid}, ident={self.ident}, info={self.info!r})"

    def alive(self) -> bool:
        thread = self.thread()
        return thread is not None and thread.is_alive()


#: Reentrant, and nothing under it allocates what could start a garbage collection where it can
#: be helped: a collection runs finalizers on whichever thread allocated, and a finalizer may run
#: traced code (a traced generator closed by the collector records its End), which registers its
#: thread or interns a method here. With a plain lock that thread waited for itself, and the
#: sender, draining, waited for it: the process's events stopped going out.
_lock = _thread.RLock()
_buffers: list[ThreadBuffer] = []
_sampled: dict[int, tuple[int, int]] = {}  # thread ident -> (tid, native id), for the sampler
_frames: list[FrameTuple] = []
#: A sampled code's frame id by the code's ``id``: hashing a code object hashes its bytecode,
#: names and constants (0.3-1.5 µs a frame, every frame of every tick), and codes that compare
#: equal in different files would share one id. ``_frame_codes`` keeps each code alive, so that
#: its ``id`` is never another's. 0: the tracer's own code (``mark_own_code``), never sampled.
_frame_ids: dict[int, int] = {}
_frame_codes: list[CodeType] = []
_methods: list[MethodTuple] = []


#: Called (outside any lock) after a thread's first event is registered: the runtime starts the
#: sender from here, so importing and decorating never starts a thread.
def _no_op() -> None:
    pass


on_new_thread: Callable[[], None] = _no_op


def register_thread() -> EventSink:
    """The slow path of a thread's first event: returns the buffer its events go to."""
    import threading  # at the process's first event, if the program has not loaded it

    thread = threading.current_thread()
    tid = _next_tid()
    native_id = threading.get_native_id()
    info = (tid, native_id, thread.name[:1024])
    buffer = ThreadBuffer(tid, threading.get_ident(), info, _weak_ref(thread))
    sampled = (tid, native_id)
    # Building the buffer may have run a finalizer with traced code, which registered this
    # thread itself: keep that buffer (its events are in it) and let this one go.
    registered: EventSink | None = getattr(tls, "events", None)
    if registered is not None:
        return registered
    with _lock:
        _buffers.append(buffer)
        _sampled[buffer.ident] = sampled
    tls.events = buffer.events
    try:
        on_new_thread()
    except Exception as exc:
        internal_error(exc)
    return buffer.events


def thread_events() -> EventSink:
    """The current thread's buffer, registering the thread on its first event."""
    try:
        events: EventSink = tls.events
    except AttributeError:
        return register_thread()
    return events


def register_method(module: str, qualname: str, file: str, line: int) -> int:
    """Intern a method's metadata (at decoration time) and return its id."""
    if module == "__mp_main__":  # a spawned child imports the main script under this name
        module = "__main__"
    module, qualname, file = module[:1024], qualname[:1024], file[:4096]
    with _lock:
        while True:  # the tuple's allocation may run a finalizer that interns a method first
            method = (len(_methods) + 1, module, qualname, file, line)
            if method[0] == len(_methods) + 1:
                _methods.append(method)
                return method[0]


def methods_since(count: int) -> list[MethodTuple]:
    return _methods[count:]


def frame_id(code: CodeType) -> int:
    """The interned id of a sampled code object (interned once per process)."""
    found = _frame_ids.get(id(code))
    if found is not None:
        return found
    file, qualname = code.co_filename[:4096], code.co_qualname[:1024]
    with _lock:
        while (found := _frame_ids.get(id(code))) is None:  # as in register_method
            frame = (len(_frames) + 1, file, qualname, code.co_firstlineno)
            if frame[0] == len(_frames) + 1:
                _frames.append(frame)
                _frame_codes.append(code)
                found = _frame_ids[id(code)] = frame[0]
        return found


def frame_ids_by_code_id() -> dict[int, int]:
    """The interned frame ids by their code's ``id`` (0: the tracer's own code, never sampled),
    for a sampler to read inline: entries are only ever added, under ``_lock``."""
    return _frame_ids


def mark_own_code(code: CodeType) -> int:
    """Remember ``code`` as the tracer's own (its frames are left out of samples): 0."""
    with _lock:
        if id(code) not in _frame_ids:
            _frame_codes.append(code)
            _frame_ids[id(code)] = 0
    return 0


def frames_since(count: int) -> list[FrameTuple]:
    return _frames[count:]


def sampled_threads() -> dict[int, tuple[int, int]]:
    """The threads that have recorded events: ident -> (tid, native id). A snapshot."""
    return dict(_sampled)


def sampled_thread(ident: int) -> tuple[int, int] | None:
    """One thread's entry of ``sampled_threads``: (tid, native id), or None."""
    return _sampled.get(ident)


def all_spent() -> bool:
    """Whether every thread has used its allowance (an idle one holds none after a drain): the
    next Start of any thread then takes the slow path (``budget.refill``), which wakes a sampler
    and a sender that wait for work (docs/architecture.md, "Idle")."""
    with _lock:
        buffers = list(_buffers)
    return all(len(buffer.events) >= buffer.events.limit for buffer in buffers)


def _in_c_call(events: EventSink | None) -> bool:
    """Whether the thread of these events is inside a call of the C wrapper, which leaves no
    Python frame on its stack for the sampler to recognise."""
    return events is not None and not isinstance(events, list) and bool(events.active)


def in_c_call() -> bool:
    """Whether the calling thread is inside a call of the C wrapper (``threads_in_c_calls``)."""
    return _in_c_call(getattr(tls, "events", None))


def threads_in_c_calls() -> set[int]:
    """Idents of the threads inside a call of the C wrapper, which leaves no Python frame on
    their stacks for the sampler to recognise."""
    return {buffer.ident for buffer in list(_buffers) if _in_c_call(buffer.events)}


class Drained:
    """What a drain took: ``chunks`` per thread, in the thread's order; the threads that ended
    (``finished``: they will record nothing more); ``events``, how many were taken (the sender
    holds their charge, budget.EVENT_BYTES each, until it lets them go)."""

    __slots__ = ("chunks", "events", "finished")

    def __init__(
        self,
        chunks: list[tuple[ThreadBuffer, Events]],
        finished: list[ThreadBuffer],
        events: int = 0,
    ) -> None:
        self.chunks = chunks
        self.finished = finished
        self.events = events


#: A thread's buffer whose events no drain took for this long gives its arrays' memory back
#: (``EventBuffer.trim``), and so do the blocks the takes encode into once no drain took any
#: events for as long: a burst of calls a few flush intervals after the last one records and
#: encodes into memory that is there already (each new page is a page fault: docs/architecture.md,
#: "Blocks the sender reuses"), and an idle process holds it a second at most.
IDLE_TRIM_S = 1.0
_pool_taken_at = 0.0
_pool_released = True

#: Called before each drain: they may append the last events of what ended unseen
#: (``tracer._core.hooks.sweep``).
before_drain: list[Callable[[], None]] = []


def drain() -> Drained:
    """Take every buffered event, per thread in order; forget threads that have ended."""
    for sweep in before_drain:
        try:
            sweep()
        except Exception as exc:
            internal_error(exc)
    with _lock:
        buffers = list(_buffers)
    chunks: list[tuple[ThreadBuffer, Events]] = []
    finished: list[ThreadBuffer] = []
    taken = 0
    now = _monotonic()
    for buffer in buffers:
        ended = not buffer.alive()  # checked before draining: an ended thread appends no more
        count = budget.hand_over(buffer.events)  # then taken at once: the thread sees its room
        if count:
            try:
                chunks.append((buffer, _take(buffer.events, count)))
            except BaseException:  # no memory: what this drain took is let go, its charge too
                budget.take_back(buffer.events, count)
                budget.hold(-taken * budget.EVENT_BYTES)
                raise
            taken += count
            buffer.taken_at, buffer.trimmed = now, isinstance(buffer.events, list)
        elif not buffer.trimmed:
            _trim_if_idle(buffer, now)
        if ended:
            budget.forget(buffer.events)
            finished.append(buffer)
    if finished:
        with _lock:
            for buffer in finished:
                _buffers.remove(buffer)
                if _sampled.get(buffer.ident, (0,))[0] == buffer.tid:
                    del _sampled[buffer.ident]
    _release_pool_if_idle(taken, now)
    return Drained(chunks, finished, taken)


def _trim_if_idle(buffer: ThreadBuffer, now: float) -> None:
    """A thread's C buffer that no drain took events from for a while gives its arrays back."""
    events = buffer.events
    if not isinstance(events, list) and now - buffer.taken_at >= IDLE_TRIM_S:
        events.trim()
        buffer.trimmed = True


def _release_pool_if_idle(taken: int, now: float) -> None:
    """The blocks the takes encode into go back once no drain took events for a while."""
    global _pool_taken_at, _pool_released
    if taken:
        _pool_taken_at, _pool_released = now, _accel.speedups is None
    elif not _pool_released and now - _pool_taken_at >= IDLE_TRIM_S:
        _release_pool()
        _pool_released = True


def holds_idle_memory() -> bool:
    """Whether a drain would still give memory back: the sender keeps draining every flush
    interval until none does, and only then waits for work."""
    return not _pool_released or not all(buffer.trimmed for buffer in list(_buffers))


def _take(events: EventSink, count: int) -> Events:
    """The oldest ``count`` events (what was appended since stays, for the next round)."""
    if not isinstance(events, list):
        encoded = events.take(count)
        return [] if encoded is None else encoded
    taken = events[:count]
    del events[:count]
    return taken


def encodable(events: Events) -> list[EventTuple] | msgspec.Raw:
    """Drained events as the batch encoder takes them: C-encoded ones are spliced in as they are
    (the same bytes msgspec gives for the tuples; tests/tracer/core/test_speedups.py checks it),
    read through the buffer protocol from memory the next take reuses, not a new bytes object."""
    import msgspec  # loaded with the sender, which calls this

    return events if isinstance(events, list) else msgspec.Raw(events)


def buffered() -> int:
    """Events waiting in the per-thread lists (approximate while threads run)."""
    return sum(len(buffer.events) for buffer in list(_buffers))


# -- the tracer's own failures: counted, logged once, never raised into user code -------------

_errors = 0


def internal_error(exc: BaseException) -> None:
    global _errors
    _errors += 1
    if _errors == 1:
        log.error("invoseq: internal tracer error (reported once; tracing goes on)", exc_info=exc)


def internal_errors() -> int:
    return _errors


def _after_fork_in_child() -> None:
    """The child starts with no buffered events: the parent sends its own. Only the forking thread
    exists in the child, so its thread-local list is the only one to forget."""
    global _lock, _pool_released
    _lock = _thread.RLock()
    _pool_released = True  # _speedups.after_fork() unmaps them
    _buffers.clear()
    _sampled.clear()
    with contextlib.suppress(AttributeError):
        del tls.events
    if _accel.speedups is not None:
        _speedups.after_fork()  # new sequence-id seed; no thread keeps its parent's buffer


forking.on_fork("recorder", in_child=_after_fork_in_child)


_codec: list[Callable[[Any], Any]] = []  # msgspec's msgpack encode and decode, once loaded


def _load_codec() -> list[Callable[[Any], Any]]:
    if not _codec:
        import msgspec

        _codec[:] = [msgspec.msgpack.Encoder().encode, msgspec.msgpack.Decoder().decode]
    return _codec


def _encode(event: object) -> bytes:
    """msgspec's msgpack encode, for the rare event no record layout fits (msgspec loads then)."""
    encoded: bytes = (_codec or _load_codec())[0](event)
    return encoded


def _decode(data: bytes) -> object:
    """msgspec's msgpack decode, for an event ``_encode`` wrote."""
    return (_codec or _load_codec())[1](data)


if _accel.speedups is not None:
    _speedups.configure(
        context.current,
        internal_error,
        thread_events,
        _encode,
        _decode,
    )
    _speedups.set_refill(budget.refill)
