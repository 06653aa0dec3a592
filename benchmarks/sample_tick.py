"""What a sampler tick spends turning a stack into frame ids (issue 33 goal 2: the main thread's
own ticks interrupt a busy server 100 times a second).

``python -m benchmarks.sample_tick`` (a few seconds) times, in one process, thread CPU time:

- ``stack_of`` of a stack of 40 small frames (the lines and frame ids a sample carries);
- the frame ids of 40 real code objects of uvicorn, asyncio, Starlette and FastAPI (what a
  worker's request stack holds), looked up again as every tick does.

Until stop 45 a frame id was found with the code object as a dictionary key, which hashes its
bytecode, names and constants at every lookup: 24-29 µs for the 40 real codes on Python 3.11,
91-98 µs on 3.12 and 3.13, against 3.6-3.9 µs by the code's ``id`` (docs/performance.md,
"Requests", stop 45). Needs the test extra (uvicorn, FastAPI).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import CodeType, FrameType

ROUNDS = 9
REPEATS = 2000
DEPTH = 40


def real_codes() -> list[CodeType]:
    """Forty codes of the functions a FastAPI worker's request stack runs through."""
    from asyncio import base_events

    import fastapi.routing as fastapi_routing
    import starlette.routing as starlette_routing
    from uvicorn.protocols.http import h11_impl

    functions: list[Callable[..., object]] = [
        h11_impl.H11Protocol.handle_events,
        h11_impl.RequestResponseCycle.run_asgi,
        base_events.BaseEventLoop._run_once,
        base_events.BaseEventLoop.run_forever,
        fastapi_routing.APIRoute.__init__,
        starlette_routing.Router.app,
        fastapi_routing.serialize_response,
        fastapi_routing.get_request_handler,
    ]
    return [function.__code__ for function in functions] * (DEPTH // len(functions))


def best_us(work: Callable[[], None]) -> float:
    """The median of ``ROUNDS`` rounds of ``REPEATS`` runs, µs a run."""
    rounds = []
    for _ in range(ROUNDS):
        started = time.thread_time_ns()
        for _ in range(REPEATS):
            work()
        rounds.append((time.thread_time_ns() - started) / REPEATS / 1000)
    return sorted(rounds)[ROUNDS // 2]


def at_depth(depth: int, then: Callable[[FrameType], float]) -> float:
    """``then(frame)`` called ``depth`` frames down."""
    if depth:
        return at_depth(depth - 1, then)
    return then(sys._getframe())


def main() -> None:
    from tracer._core import recorder
    from tracer._sampling import stacks

    codes = real_codes()

    def stack_time(frame: FrameType) -> float:
        def sample() -> None:
            stacks.stack_of(frame)

        return best_us(sample)

    def lookups() -> None:
        for code in codes:
            recorder.frame_id(code)

    print(f"Python {sys.version.split()[0]}")
    print(f"stack_of, {DEPTH} small frames: {at_depth(DEPTH, stack_time):.1f} µs")
    print(f"frame ids of {len(codes)} real codes: {best_us(lookups):.1f} µs")


if __name__ == "__main__":
    main()
