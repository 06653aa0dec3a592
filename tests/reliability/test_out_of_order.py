"""Batches may reach the repository in any order (resends, spool replays, several processes): the
trees it builds do not depend on it. The batches are those of three real traced processes,
recorded on the wire, then delivered to fresh repositories in order, reversed and shuffled."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from invoseq import wire
from tests.reliability.conftest import Launcher
from tests.reliability.harness import PATIENCE_S, program_env
from tests.support import cmr, cmr_json, write_script

#: Two sequences, each handing work to a child process: three processes in all.
PARENT = """
import subprocess, sys
import tracer

CHILD = sys.argv[1]

@tracer.traced(name="shop.order")
def order(n, task):
    price(n)
    subprocess.run([sys.executable, CHILD, task, str(n)], check=True)
    price(n + 1)

@tracer.traced(name="shop.price")
def price(n):
    return n * 1.2

order(1, "pay")
order(2, "ship")
"""

CHILD = """
import sys
import tracer

@tracer.traced(name=f"shop.{sys.argv[1]}")
def work(n):
    for k in range(3):
        detail(n, k)

@tracer.traced(name="shop.detail")
def detail(n, k):
    return n + k

work(int(sys.argv[2]))
"""

Frames = tuple[bytes, bytes]


@pytest.fixture(name="zmq_context")
def fixture_zmq_context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


def record_batches(
    context: zmq.Context[zmq.Socket[bytes]], command: list[str], env: dict[str, str], log: Path
) -> list[Frames]:
    """Run ``command`` against a ROUTER that acknowledges every batch and keeps its frames, once
    per (puid, batch_no), in arrival order. The program's stderr goes to ``log``."""
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("tcp://127.0.0.1:*")
    env = {**env, "INVOSEQ_ENDPOINT": router.getsockopt_string(zmq.LAST_ENDPOINT)}
    recorded: dict[tuple[int, int], Frames] = {}
    with log.open("wb") as stderr:
        program = subprocess.Popen(command, env=env, stderr=stderr)
    try:
        deadline = time.monotonic() + PATIENCE_S
        # Every process waits for its acknowledgements before it exits, and the parent waits
        # for its children: once it is gone, nothing more comes.
        while program.poll() is None or router.poll(0):
            assert time.monotonic() < deadline, "the traced program did not finish"
            if not router.poll(50):
                continue
            identity, header, body = router.recv_multipart()
            batch = msgspec.msgpack.decode(body, type=wire.Batch)
            recorded.setdefault((batch.puid, batch.batch_no), (header, body))
            ack = msgspec.msgpack.encode(wire.Ack(batch.puid, batch.batch_no))
            router.send_multipart([identity, wire.ACK_HEADER, ack])
        assert program.wait(PATIENCE_S) == 0, log.read_text()
    finally:
        if program.poll() is None:
            program.kill()
            program.wait(PATIENCE_S)
        router.close()
    return list(recorded.values())


def deliver(context: zmq.Context[zmq.Socket[bytes]], endpoint: str, batches: list[Frames]) -> None:
    """Send the batches one at a time, each acknowledged before the next goes: the repository
    receives them in exactly this order."""
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    try:
        for header, body in batches:
            dealer.send_multipart([header, body])
            assert dealer.poll(int(PATIENCE_S * 1000)), "no acknowledgement"
            ack_header, ack = dealer.recv_multipart()
            assert ack_header == wire.ACK_HEADER
            batch = msgspec.msgpack.decode(body, type=wire.Batch)
            assert msgspec.msgpack.decode(ack, type=wire.Ack) == wire.Ack(
                batch.puid, batch.batch_no
            )
    finally:
        dealer.close()


def views(db: Path) -> dict[str, Any]:
    """What a user reads: the list, each sequence's tree, and one tree as text."""
    listed = cmr_json(db, "ls")
    trees = {s["seq"]: cmr_json(db, "show", s["seq"]) for s in listed}
    return {"ls": listed, "trees": trees, "text": cmr(db, "show", listed[0]["seq"]).stdout}


def outline(node: dict[str, Any]) -> list[Any]:
    """A node's name, how it was reached (a hand-off's kind), and its children's outlines."""
    hop = node["handoff"]["kind"] if node["handoff"] else None
    return [node["name"], hop, [outline(child) for child in node["children"]]]


def expected_outline(task: str) -> list[Any]:
    detail: list[Any] = ["__main__.shop.detail", None, []]
    price: list[Any] = ["__main__.shop.price", None, []]
    child = [f"__main__.shop.{task}", "process", [detail] * 3]
    return ["__main__.shop.order", None, [price, child, price]]


def test_batches_delivered_in_any_order_build_the_same_trees(
    tmp_path: Path, launch: Launcher, zmq_context: zmq.Context[zmq.Socket[bytes]]
) -> None:
    parent = write_script(tmp_path / "parent.py", PARENT)
    child = write_script(tmp_path / "child.py", CHILD)
    # Two events a batch: each sequence is spread over many batches, in every process.
    env = program_env("", launch.spool_dir, INVOSEQ_INSTRUMENT="1", INVOSEQ_BATCH_EVENTS="2")
    command = [sys.executable, str(parent), str(child)]
    batches = record_batches(zmq_context, command, env, tmp_path / "parent.err")
    puids = {msgspec.msgpack.decode(body, type=wire.Batch).puid for _, body in batches}
    assert len(puids) == 3
    assert len(batches) > 12

    shuffled = batches[:]
    random.Random(20240601).shuffle(shuffled)
    orders = {"in order": batches, "reversed": batches[::-1], "shuffled": shuffled}
    seen = {}
    for name, order in orders.items():
        repository = launch.repository(name.replace(" ", "-"))
        repository.start()
        deliver(zmq_context, repository.endpoint, order)
        repository.stop()
        seen[name] = views(repository.db)

    expected = seen["in order"]
    assert sorted(outline(tree["root"]) for tree in expected["trees"].values()) == [
        expected_outline("pay"),
        expected_outline("ship"),
    ]
    assert {(s["processes"], s["status"], s["lossy"]) for s in expected["ls"]} == {
        (2, "complete", False)
    }
    for name in ("reversed", "shuffled"):
        assert seen[name] == expected, name
