"""Synthetic batches, laid out exactly as a traced process's sender encodes them.

Events are the tuples of ``tracer._core.recorder`` and a batch is the tuple the sender encodes (see
``tracer._shipping.batching.Batching._send_batch``), so the repository decodes them with its typed
decoder as it would real traffic. Two shapes:

- ``requests``: many sequences of 111 invocations each (a root calling 10 children calling 10
  leaves), spread over a few threads: the traffic of a busy service (ingest).
- ``one_sequence``: one sequence of N invocations, fan-out 10, depth-first: the biggest tree a
  user asks ``cmr show`` for (views).
- ``short_requests``: many sequences of one or ten calls from a few worker processes, each batch
  holding hundreds of them: a web service's traffic, a sequence per request (ingest, serve).
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from invoseq import wire

BATCH_EVENTS: Final = 4096  # the sender's default batch size
METHODS: Final = 50
#: Stored times are event times plus this: close to now, so nothing reads as ancient.
CLOCK_OFFSET_NS: Final = time.time_ns() - 10**12
STEP_NS: Final = 1_000  # every event is 1 µs after the previous one of its thread

Event = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Encoded:
    frames: list[list[bytes]]  # [header, body] per batch
    events: int
    invocations: int
    seqs: list[bytes]
    end_ns: int = 0  # the last event's time (short_requests: traffic sent after starts later)


#: ``tracer._core.ids``: a sequence id's first ``SECOND_BITS`` bits are the second it started in.
SECOND_BITS: Final = 16
NONZERO_BIT: Final = 1 << 56


def sequence_id(clock_ns: int) -> bytes:
    """A sequence id as the tracer draws one for a root starting at ``clock_ns`` (an event
    time: stored as ``CLOCK_OFFSET_NS`` after it): that second modulo 65,536, then random."""
    second = ((CLOCK_OFFSET_NS + clock_ns) // 1_000_000_000) & 0xFFFF
    random_part = int.from_bytes(os.urandom(14), "big") | NONZERO_BIT
    return ((second << (128 - SECOND_BITS)) | random_part).to_bytes(16, "big")


def process() -> tuple[Any, ...]:
    """The ``ProcessInfo`` every synthetic batch carries."""
    return (
        os.getpid(),
        "benchmark-host",
        "benchmark-platform",
        CLOCK_OFFSET_NS,
        CLOCK_OFFSET_NS,
        ["benchmark.py"],
        0,
    )


def methods() -> list[tuple[int, str, str, str, int]]:
    """The ``MethodInfo``s of a synthetic process: ``handler_1`` … ``handler_50``."""
    return [(m, "app.module", f"handler_{m}", "/srv/app/module.py", 10 * m) for m in range(1, 51)]


def encode(puid: int, threads: dict[int, list[Event]], first_batch: int = 1) -> list[list[bytes]]:
    """Pack per-thread event lists into batches of at most BATCH_EVENTS events, in each thread's
    order; the first batch carries the method and thread infos."""
    encoder = msgspec.msgpack.Encoder()
    frames: list[list[bytes]] = []
    pending: list[tuple[int, list[Event]]] = []
    size = 0
    batch_no = first_batch

    def flush() -> None:
        nonlocal pending, size, batch_no
        first = batch_no == first_batch
        body = wire.batch_layout(
            puid=puid,
            batch_no=batch_no,
            process=process(),
            methods=methods() if first else [],
            threads=[(tid, 1000 + tid, f"worker-{tid}") for tid in threads] if first else [],
            chunks=pending,
        )
        frames.append([wire.BATCH_HEADER, encoder.encode(body)])
        pending, size, batch_no = [], 0, batch_no + 1

    for tid, events in threads.items():
        start = 0
        while start < len(events):
            part = events[start : start + BATCH_EVENTS - size]
            pending.append((tid, part))
            size += len(part)
            start += len(part)
            if size >= BATCH_EVENTS:
                flush()
    if pending:
        flush()
    return frames


def _tree_events(
    seq: bytes, invocations: int, fanout: int, first_iid: int, clock: int, *, step_ns: int = STEP_NS
) -> Iterator[Event]:
    """Start/End tuples of one tree of ``invocations`` calls, depth-first, fan-out ``fanout``,
    as shallow as that allows (the first subtrees are full, the last ones cut short), an event
    every ``step_ns``."""
    levels, capacity = 1, 1
    while capacity < invocations:
        levels += 1
        capacity = capacity * fanout + 1
    iid = first_iid
    t = clock
    made = 1
    yield (wire.TAG_START, iid, 0, 0, 1, t, seq)
    stack = [[iid, fanout]]  # [iid, children still to make]
    while stack:
        top = stack[-1]
        t += step_ns
        if top[1] > 0 and made < invocations and len(stack) < levels:
            top[1] -= 1
            iid += 1
            made += 1
            yield (wire.TAG_START, iid, top[0], 0, 1 + iid % METHODS, t, seq)
            stack.append([iid, fanout])
        else:
            stack.pop()
            yield (wire.TAG_END, top[0], t)


def requests(puid: int, events: int, threads: int = 4) -> Encoded:
    """Sequences of 111 invocations (1 → 10 → 100) round-robin over ``threads`` threads."""
    per_thread: dict[int, list[Event]] = {tid: [] for tid in range(1, threads + 1)}
    clocks = dict.fromkeys(per_thread, 0)
    seqs: list[bytes] = []
    iid = 1
    total = 0
    while total < events:
        tid = len(seqs) % threads + 1
        seq = sequence_id(clocks[tid])
        tree = list(_tree_events(seq, 111, 10, iid, clocks[tid]))
        per_thread[tid].extend(tree)
        clocks[tid] = tree[-1][2] + STEP_NS
        seqs.append(seq)
        iid += 111
        total += len(tree)
    return Encoded(encode(puid, per_thread), total, total // 2, seqs)


def short_requests(
    sequences: int,
    calls: int,
    *,
    processes: int = 4,
    first_puid: int = 1,
    durations: random.Random | None = None,
    first_ns: int = 0,
) -> Encoded:
    """``sequences`` sequences of ``calls`` calls each (a root and ``calls - 1`` children), dealt
    round-robin to ``processes`` worker processes of one thread each (gunicorn's sync workers),
    each process's batches of ``BATCH_EVENTS`` events; the processes' batches interleaved, as
    they reach one repository. With ``durations``, each request takes its own time (the step
    between its events drawn log-normally around 100 µs: requests of tens of µs to tens of ms),
    as a repository indexes them; without, every event is ``STEP_NS`` after the last. Every
    process's clock starts at ``first_ns``: traffic sent after other traffic starts after it,
    as time goes on in a real repository (chunks that all started at 0 each landed amid all
    the earlier ones in every index by time)."""
    per_process: list[list[Event]] = [[] for _ in range(processes)]
    seqs: list[bytes] = []
    iids = [1] * processes
    clocks = [first_ns] * processes
    for n in range(sequences):
        at = n % processes
        seq = sequence_id(clocks[at])
        step = STEP_NS if durations is None else 1 + int(durations.lognormvariate(11.5, 1.2))
        tree = list(_tree_events(seq, calls, max(calls - 1, 1), iids[at], clocks[at], step_ns=step))
        per_process[at].extend(tree)
        clocks[at] = tree[-1][2] + STEP_NS
        iids[at] += calls
        seqs.append(seq)
    streams = [encode(first_puid + at, {1: events}) for at, events in enumerate(per_process)]
    frames = [frame for row in itertools.zip_longest(*streams) for frame in row if frame]
    total = sum(len(events) for events in per_process)
    return Encoded(frames, total, total // 2, seqs, max(clocks))


def one_sequence(puid: int, invocations: int) -> Encoded:
    """One sequence of ``invocations`` calls on one thread, fan-out 10 (a deep, wide tree)."""
    seq = sequence_id(0)
    events = list(_tree_events(seq, invocations, 10, 1, 0))
    return Encoded(encode(puid, {1: events}), len(events), invocations, [seq])


def decoded(encoded: Encoded) -> Iterator[wire.Batch]:
    """The batches as the repository decodes them, one at a time (a 1 M tree is large)."""
    decoder = msgspec.msgpack.Decoder(wire.Batch)
    for frame in encoded.frames:
        yield decoder.decode(frame[1])
