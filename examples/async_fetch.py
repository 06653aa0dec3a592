"""An asyncio handler that fetches several pages concurrently, then parses one in a thread.

Plain Python, no tracer import:

    python examples/async_fetch.py
    tracer run examples/async_fetch.py

The fetches interleave on one thread; each runs as a task of its own, so ``cmr show`` puts every
``fetch`` under the handler with its hand-off (``→ task``), never under whichever coroutine happened
to run before. ``asyncio.to_thread`` hands the CPU-bound parse to a thread.
"""

from __future__ import annotations

import asyncio

PAGES = {"/": 0.02, "/about": 0.01, "/pricing": 0.03}


async def fetch(path: str) -> str:
    await asyncio.sleep(PAGES[path])  # network I/O
    return f"<html>{path}</html>" * 100


def parse(html: str) -> int:
    return html.count("<html>")


async def handle() -> int:
    pages = await asyncio.gather(*(fetch(path) for path in PAGES))
    return await asyncio.to_thread(parse, "".join(pages))


if __name__ == "__main__":
    print(asyncio.run(handle()))
