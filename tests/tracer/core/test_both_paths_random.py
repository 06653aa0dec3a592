"""Both hot paths run the same random programs and send byte-identical batches: nested calls,
generators run out, left by a break, thrown into, closed before they start or dropped half
way, coroutines awaited or cancelled, async generators left and closed, exceptions caught a
level up, threads. A generator's close once ran its finally under the caller in pure Python
only; programs like these are where such a difference shows."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.support import write_script
from tests.tracer.core.implementations import needs_c_build, run
from tests.tracer.core.test_both_paths import DETERMINISTIC_PROGRAM

#: The programs' seeds: fixed, so a failure is the same failure again.
SEEDS = range(40)

#: An interpreter of op lists, every kind of traced callable in it (added to the deterministic
#: program's definitions: leaf, fails, cancel_one).
INTERPRETER = """
class Boom(Exception):
    pass

@tracer.traced
def call(ops):
    return execute(ops)

@tracer.traced
def gen(ops):
    try:
        for op in ops:
            try:
                yield execute([op])
            except KeyError:
                leaf(-1)
    finally:
        leaf(99)

@tracer.traced
async def coro(ops):
    try:
        for op in ops:
            execute([op])
            await asyncio.sleep(0)
    finally:
        leaf(98)

@tracer.traced
async def agen(ops):
    try:
        for op in ops:
            yield execute([op])
            await asyncio.sleep(0)
    finally:
        leaf(97)

def run_generator(mode, ops):
    g = gen(ops)
    if mode == "all":
        for _ in g:
            pass
    elif mode == "break":
        for _ in g:
            break
    elif mode == "throw":
        try:
            next(g)
            g.throw(KeyError("k"))
            g.close()
        except StopIteration:
            pass
    elif mode == "close":
        g.close()
    else:  # "drop": one step, then its last reference goes
        next(g, None)
        del g

async def run_coroutine(mode, ops):
    if mode == "await":
        await coro(ops)
    elif mode == "cancel":
        await cancel_one(coro(ops + [("leaf", 0)]))
    else:  # "agen"
        rows = agen(ops)
        async for _ in rows:
            break
        await rows.aclose()

def execute(ops):
    total = 0
    for op in ops:
        kind = op[0]
        if kind == "leaf":
            total += leaf(op[1])
        elif kind == "call":
            total += call(op[1])
        elif kind == "raise":
            try:
                fails(Boom)
            except Boom:
                total += 1
        elif kind == "gen":
            run_generator(op[1], op[2])
        elif kind == "coro":
            asyncio.run(run_coroutine(op[1], op[2]))
        else:  # "thread"
            worker = threading.Thread(target=call, args=(op[1],), name="worker")
            worker.start()
            worker.join()
    return total
"""


def random_ops(rng: random.Random, depth: int) -> list[Any]:
    ops: list[Any] = []
    kinds = ["leaf", "leaf", "call", "raise", "gen", "gen", "coro", "thread"]
    for _ in range(rng.randint(0, 3)):
        kind = rng.choice(kinds if depth < 3 else ["leaf", "raise"])
        if kind == "leaf":
            ops.append(("leaf", rng.randint(0, 9)))
        elif kind == "raise":
            ops.append(("raise",))
        elif kind in ("call", "thread"):
            ops.append((kind, random_ops(rng, depth + 1)))
        elif kind == "gen":
            mode = rng.choice(["all", "break", "throw", "close", "drop"])
            ops.append(("gen", mode, random_ops(rng, depth + 1)))
        else:
            mode = rng.choice(["await", "cancel", "agen"])
            ops.append(("coro", mode, random_ops(rng, depth + 1)))
    return ops


def program(seeds: range) -> str:
    """The deterministic program with a root that runs one random op list per seed."""
    programs = [random_ops(random.Random(seed), 0) for seed in seeds]
    start = DETERMINISTIC_PROGRAM.index("@tracer.traced\ndef root():")
    end = DETERMINISTIC_PROGRAM.index("tracer.configure(")
    root = (
        f"PROGRAMS = {programs!r}\n\n@tracer.traced\ndef root():\n"
        "    for ops in PROGRAMS:\n        call(ops)\n\n"
    )
    return DETERMINISTIC_PROGRAM[:start] + INTERPRETER + root + DETERMINISTIC_PROGRAM[end:]


@needs_c_build
@pytest.mark.system
def test_random_programs_send_byte_identical_batches_on_both_paths(tmp_path: Path) -> None:
    script = write_script(tmp_path / "program.py", program(SEEDS))
    pure = json.loads(run(script, pure=True))
    accelerated = json.loads(run(script, pure=False))
    assert (pure["implementation"], accelerated["implementation"]) == ("python", "c")
    assert len(pure["bodies"]) > 20  # the programs did something
    assert accelerated["bodies"] == pure["bodies"]
