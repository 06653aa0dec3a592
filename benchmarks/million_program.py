"""The program of ``benchmarks/million.py``: traced calls at a million a second, for a fixed
count, then what the tracer sent and dropped.

Each root makes ``calls`` nested calls; after each root the program waits (spinning, as a busy
program would hold its core) until the pace of a million calls a second allows the next. It
runs under ``tracer run``, which traces ``leaf`` and ``request`` (``--include``).
"""

from __future__ import annotations

import time

from benchmarks.processes import report_result, sent_and_dropped, worker_params

PACE_PER_S = 1_000_000


def leaf(x: int) -> int:
    return x + 1


def request(calls: int) -> None:
    call = leaf
    for i in range(calls):
        call(i)


def main() -> None:
    params = worker_params()
    roots, calls = int(params["roots"]), int(params["calls"])
    started = time.perf_counter()
    for at in range(roots):
        request(calls)
        due = started + (at + 1) * (calls + 1) / PACE_PER_S
        while time.perf_counter() < due:
            pass
    elapsed = time.perf_counter() - started
    result = {"calls_per_s": roots * (calls + 1) / elapsed, "events": 2 * roots * (calls + 1)}
    report_result({**result, **sent_and_dropped()})


if __name__ == "__main__":
    main()
