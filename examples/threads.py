"""A search request fanned out to a thread pool: one sequence across four threads.

Plain Python, no tracer import:

    python examples/threads.py
    tracer run examples/threads.py

``tracer run`` patches the pool, so each shard query continues the request's sequence on a pool
thread. The pool has three threads for four shards: the last shard waits in the queue, and
``cmr show`` says for how long (``→ thread "ThreadPoolExecutor-0_0", queued …``).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

SHARDS = ("books", "music", "films", "games")


def query_shard(shard: str, term: str) -> list[str]:
    time.sleep(0.01 if shard != "films" else 0.03)  # the films shard is slow today
    return [f"{shard}:{term}-{n}" for n in range(2)]


def rank(hits: list[str]) -> list[str]:
    return sorted(hits, key=len)


def search(pool: ThreadPoolExecutor, term: str) -> list[str]:
    futures = [pool.submit(query_shard, shard, term) for shard in SHARDS]
    hits = [hit for future in futures for hit in future.result()]
    return rank(hits)[:3]


def main() -> None:
    with ThreadPoolExecutor(max_workers=3) as pool:
        print(search(pool, "dune"))


if __name__ == "__main__":
    main()
