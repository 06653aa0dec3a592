"""One big sequence with stack samples, laid out as a traced process's sender encodes it.

``sampled_sequence`` makes 1 + outer * (1 + inner) calls on one thread, in one of two shapes:

- ``wide``: the root calls ``outer`` functions, each of which calls ``inner`` leaves;
- ``deep``: the root calls ``outer`` functions, each of which recurses ``inner`` calls deep.

Every event is ``synthetic.STEP_NS`` after the previous one. The sampler's ticks come every
``interval_ns`` of that time, as the sampler sends them (``tracer/_sampling/sampler.py``): one
``Sample`` per tick of weight 1, its span up to the next tick, mostly on the CPU, its stack the
thread's at that instant from the outermost frame (``runpy``, the script's ``<module>``) through a
frame per traced call on the stack (each method's file and first line, as ``MethodInfo`` names it)
down to one or two untraced helpers, the innermost ``MAX_DEPTH`` frames of it; the frames are
interned (``FrameInfo``) in the first batch. Samples travel in the batch whose events they fell
among."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Final, Literal

import msgspec

from benchmarks import synthetic
from cmr.store import open_store
from invoseq import wire

Shape = Literal["wide", "deep"]
#: The sampler's default interval (``tracer.config``'s ``sample_interval_ms``).
INTERVAL_NS: Final = 10_000_000
#: Frames a sampled stack keeps, from the innermost (``tracer/_sampling/active.py``'s
#: ``MAX_DEPTH``).
MAX_DEPTH: Final = 512
_OUTER_FRAMES: Final = (
    (1, "/usr/lib/python3.11/runpy.py", "_run_module_as_main", 198, 198),
    (2, "/usr/lib/python3.11/runpy.py", "_run_code", 86, 88),
    (3, "/srv/app/main.py", "<module>", 1, 40),
)
#: Untraced helpers below the innermost traced call: (frame, file, function, first line).
_HELPERS: Final = (
    (4, "/srv/app/util.py", "compute", 5),
    (5, "/srv/app/util.py", "normalise", 30),
    (6, "/usr/lib/python3.11/json/encoder.py", "JSONEncoder.encode", 183),
)
_METHOD_FRAME: Final = 100  # a method's frame id: this plus its method id


def _frames() -> list[tuple[int, str, str, int]]:
    methods = [
        (_METHOD_FRAME + method, file, qualname, line)
        for method, _module, qualname, file, line in synthetic.methods()
    ]
    outer = [(frame, file, function, line) for frame, file, function, line, _at in _OUTER_FRAMES]
    return outer + list(_HELPERS) + methods


def _method(shape: Shape, outer: int, depth: int) -> int:
    """The method of a call: the root 1; an outer call one of five; below it one of forty
    leaves (wide) or, recursing, one of three functions by depth (deep)."""
    if depth == 0:
        return 1
    if depth == 1:
        return 2 + outer % 5
    if shape == "wide":
        return 10 + outer * 7 % 40
    return 10 + depth % 3


def _calls(shape: Shape, outer: int, inner: int) -> Iterator[tuple[bool, int]]:
    """(True, method) where a call starts, (False, 0) where the innermost open one ends."""
    yield True, _method(shape, 0, 0)
    for k in range(outer):
        yield True, _method(shape, k, 1)
        for j in range(inner):
            if shape == "wide":
                yield True, _method(shape, k + j, 2)
                yield False, 0
            else:
                yield True, _method(shape, k, 2 + j)
        if shape == "deep":
            for _ in range(inner):
                yield False, 0
        yield False, 0
    yield False, 0


def _sample(tick: int, t_ns: int, interval_ns: int, stack: list[int]) -> tuple[object, ...]:
    """The sample of the tick at ``t_ns`` seeing ``stack`` (the open calls' methods)."""
    helpers = _HELPERS[: 1 + tick % 2] if tick % 3 else _HELPERS[2:]
    frames = [frame for frame, *_ in _OUTER_FRAMES] + [_METHOD_FRAME + m for m in stack]
    lines = [at for *_, at in _OUTER_FRAMES] + [10 * m + 2 for m in stack]
    frames += [frame for frame, *_ in helpers]
    lines += [line + 3 for *_, line in helpers]
    cpu = interval_ns * (9 if tick % 4 else 5) // 10
    return (1, t_ns, 1, interval_ns, cpu, frames[-MAX_DEPTH:], lines[-MAX_DEPTH:])


def sampled_sequence(
    puid: int, shape: Shape, outer: int = 1000, inner: int = 999, interval_ns: int = INTERVAL_NS
) -> synthetic.Encoded:
    """One sequence of ``1 + outer * (1 + inner)`` calls with its samples (module docstring)."""
    seq = os.urandom(16)
    encoder = msgspec.msgpack.Encoder()
    frames: list[list[bytes]] = []
    events: list[tuple[object, ...]] = []
    samples: list[tuple[object, ...]] = []
    stack: list[int] = []  # the open calls' methods
    iids: list[int] = []  # and their iids
    iid = 0
    t = 0
    next_tick = interval_ns // 2 + synthetic.STEP_NS // 2  # between two events, as a tick is
    ticks = 0
    count = 0

    def flush() -> None:
        first = not frames
        body = wire.batch_layout(
            puid=puid,
            batch_no=len(frames) + 1,
            process=synthetic.process(),
            methods=synthetic.methods() if first else [],
            threads=[(1, 1001, "MainThread")] if first else [],
            chunks=[(1, list(events))],
            frames=_frames() if first else [],
            samples=list(samples),
        )
        frames.append([wire.BATCH_HEADER, encoder.encode(body)])
        events.clear()
        samples.clear()

    for starts, method in _calls(shape, outer, inner):
        t += synthetic.STEP_NS
        while t >= next_tick and stack:
            samples.append(_sample(ticks, next_tick, interval_ns, stack))
            ticks += 1
            next_tick += interval_ns
        if starts:
            iid += 1
            parent = iids[-1] if iids else 0
            events.append((wire.TAG_START, iid, parent, 0, method, t, seq))
            stack.append(method)
            iids.append(iid)
        else:
            stack.pop()
            events.append((wire.TAG_END, iids.pop(), t))
        count += 1
        if len(events) >= synthetic.BATCH_EVENTS:
            flush()
    if events or samples:
        flush()
    return synthetic.Encoded(frames, count, iid, [seq])


def build(path: str, shape: Shape, outer: int, inner: int) -> bytes:
    """A SQLite repository at ``path`` holding one ``sampled_sequence``: its id."""
    encoded = sampled_sequence(7, shape, outer, inner)
    store = open_store(path)
    try:
        for batch in synthetic.decoded(encoded):
            store.ingest(batch, time.time_ns())
    finally:
        store.close()
    return encoded.seqs[0]


if __name__ == "__main__":  # python -m benchmarks.sampled DB wide|deep OUTER INNER
    db, kind, outer_calls, inner_calls = sys.argv[1:]
    assert kind in ("wide", "deep")
    print(build(db, "wide" if kind == "wide" else "deep", int(outer_calls), int(inner_calls)).hex())
