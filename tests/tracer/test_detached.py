"""Detached work as the tracer records it (issue 34, point 3): a call that leaves work behind (a
generator it left suspended, an asyncio task it did not await, a thread it did not join) ends,
and its sequence is complete; the work stays open under it, detached, and its later calls join
the same sequence under it. Recorded by the real tracer (``tracer.testing.capture``), read back
through a repository in memory."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator

import tracer
from cmr.store import open_store
from cmr.store.base import SequenceSummary
from cmr.views.model import Node, SequenceTree, walk
from cmr.views.tree.calltree import build_tree
from tracer import traced
from tracer.testing import Capture, capture

TIMEOUT_S = 60.0


@traced
def numbers() -> Generator[int, None, None]:
    yield 1
    yield 2


@traced
def pages() -> Generator[int, None, None]:
    """Leaves ``numbers`` suspended after its first value."""
    generator = numbers()
    next(generator)
    return generator


@traced
def leaf() -> int:
    return 1


@traced
async def background(started: asyncio.Event, release: asyncio.Event) -> None:
    started.set()
    await release.wait()
    leaf()


@traced
async def handler(started: asyncio.Event, release: asyncio.Event) -> asyncio.Task[None]:
    """Starts ``background`` and returns without awaiting it."""
    return asyncio.get_running_loop().create_task(background(started, release))


def writer(release: threading.Event) -> None:
    """Untraced: the patched thread runner times it as a call of its own."""
    assert release.wait(TIMEOUT_S)
    leaf()


@traced
def request(release: threading.Event) -> threading.Thread:
    """Starts a writer thread and returns without joining it."""
    thread = threading.Thread(target=writer, args=(release,), name="writer", daemon=True)
    thread.start()
    return thread


def sequences(trace: Capture) -> dict[str, tuple[SequenceSummary, SequenceTree]]:
    """Every captured sequence's listing line and tree, by the root's name (without module)."""
    trace.flush()
    store = open_store(memory=True)
    try:
        for batch in trace.batches:
            store.ingest(batch, time.time_ns())
        found = {}
        for line in store.list_sequences(100):
            found[line.root.rsplit(".", 1)[-1]] = (line, build_tree(store.load_sequence(line.seq)))
        return found
    finally:
        store.close()


def child(tree: SequenceTree, name: str) -> Node:
    (node,) = [n for n, _ in walk(tree.root) if n.name.endswith("." + name)]
    return node


async def serve_until_started(
    release: asyncio.Event,
) -> asyncio.Task[None]:
    started = asyncio.Event()
    task = await handler(started, release)
    await started.wait()
    return task


def test_a_suspended_generator_an_unawaited_task_and_an_unjoined_thread_are_detached() -> None:
    loop = asyncio.new_event_loop()
    thread_release = threading.Event()
    thread: threading.Thread | None = None
    try:
        with capture(sample_interval_ms=0, instrument=True) as trace:
            generator = pages()
            task_release = asyncio.Event()
            task = loop.run_until_complete(serve_until_started(task_release))
            thread = request(thread_release)
            found = sequences(trace)
            for root, work in [("pages", "numbers"), ("handler", "background")]:
                line, tree = found[root]
                assert (line.status, tree.status) == ("complete", "complete"), root
                node = child(tree, work)
                assert (node.status, node.detached) == ("running", True), root
                assert tree.root.children == [node]

            task_release.set()
            loop.run_until_complete(task)
            thread_release.set()
            thread.join(TIMEOUT_S)
            found = sequences(trace)
            for root, work in [("handler", "background"), ("request", "writer")]:
                line, tree = found[root]
                assert line.status == "complete", root
                node = child(tree, work)
                assert (node.status, node.detached) == ("ok", True), root
                assert [c.name.rsplit(".", 1)[-1] for c in node.children] == ["leaf"], root
            assert set(found) == {"pages", "handler", "request"}  # the later calls joined
            generator.close()
    finally:
        thread_release.set()
        if thread is not None:
            thread.join(TIMEOUT_S)
        loop.close()
        tracer.uninstrument()
