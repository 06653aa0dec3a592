"""The stack sampler and asyncio event loops: a loop's wait is sampled while a traced task is
suspended in it or a measured request is in flight, and not once nothing traced is left (an idle
server lets the sampler rest); a loop iterating in C (uvloop) likewise."""

from __future__ import annotations

import asyncio
import selectors
import sys
import threading
from types import FrameType
from typing import Any

import pytest

import tracer
from tests.support import wait_for
from tracer._sampling import active
from tracer.testing import capture


class _Watched(selectors.DefaultSelector):
    """A selector that asks, each time the loop waits in it, whether the sampler would sample
    the loop's thread there, and files the answer under the test's current ``phase``."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "starting"
        self.answers: dict[str, list[bool]] = {}

    def select(self, timeout: float | None = None) -> list[Any]:
        answer = active.worth_sampling(sys._getframe())
        self.answers.setdefault(self.phase, []).append(answer)
        return super().select(timeout)


def test_an_event_loop_waiting_is_sampled_while_a_traced_task_is_suspended_and_not_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the steps of its tasks no traced frame is on the loop's stack (a suspended
    coroutine leaves none), yet the repository can tell the loop's time there from the tasks'
    (cmr/views/samples/placement.py): while a traced coroutine is suspended, the loop's wait is
    sampled. Once nothing traced is left in its tasks, the loop's wait is not (an idle server lets
    the sampler rest). A step of an untraced task is not sampled; a step of a traced one is."""
    monkeypatch.setattr(active, "VERDICT_NS", 0)  # each wait asks afresh
    seen: dict[str, bool] = {}
    selector = _Watched()

    @tracer.traced
    async def traced_task() -> None:
        seen["traced step"] = active.worth_sampling(sys._getframe())
        selector.phase = "a traced task suspended"
        await asyncio.sleep(0.02)
        selector.phase = "its last step"  # (the gather's own wake-up comes after it)

    async def untraced_task() -> None:
        seen["untraced step"] = active.worth_sampling(sys._getframe())
        await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(traced_task(), untraced_task())
        selector.phase = "nothing traced left"
        await asyncio.sleep(0.02)

    loop = asyncio.SelectorEventLoop(selector)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    suspended = selector.answers["a traced task suspended"]
    assert suspended
    assert all(suspended), selector.answers
    after = selector.answers["nothing traced left"]
    assert after
    assert not any(after), selector.answers
    assert seen == {"traced step": True, "untraced step": False}
    assert not active.worth_sampling(sys._getframe())  # no loop here, no traced call


def test_an_event_loop_serving_a_measured_request_is_sampled_and_its_service_alone_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request an integration measures (``measured.begin``) keeps its loop's wait sampled until
    it finishes; a service invocation (an ASGI lifespan, open for the server's life) does not."""
    from tracer._core import measured, service

    monkeypatch.setattr(active, "VERDICT_NS", 0)
    selector = _Watched()

    async def main() -> None:
        with capture():
            lifespan = service.begin("asgi.lifespan")
            assert lifespan is not None
            selector.phase = "service only"
            await asyncio.sleep(0.01)
            request = measured.begin()
            assert request is not None
            selector.phase = "a request in flight"
            await asyncio.sleep(0.01)
            request.finish(measured.method("test", "GET /"))
            selector.phase = "request finished"
            await asyncio.sleep(0.01)
            service.finish(lifespan, "asgi.lifespan")

    loop = asyncio.SelectorEventLoop(selector)
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert selector.answers["a request in flight"]
    assert all(selector.answers["a request in flight"]), selector.answers
    for idle in ("service only", "request finished"):
        assert selector.answers[idle]
        assert not any(selector.answers[idle]), selector.answers


def test_a_loop_iterating_in_c_is_sampled_while_it_waits_not_in_an_untraced_step() -> None:
    """uvloop runs its iteration in C: while it waits, the innermost frame of its thread is
    ``asyncio.Runner.run`` (``uvloop.run``), and that is the loop, worth sampling while a traced
    task is suspended; a step of an untraced task, above it, is not; a step of a traced one
    is."""
    uvloop = pytest.importorskip("uvloop")
    seen: dict[str, bool] = {}
    waiting = threading.Event()
    release = threading.Event()

    @tracer.traced
    async def traced_task() -> None:
        seen["traced step"] = active.worth_sampling(sys._getframe())
        while not release.is_set():  # suspended: the loop's wait serves it
            await asyncio.sleep(0.005)

    async def untraced_task() -> None:
        seen["untraced step"] = active.worth_sampling(sys._getframe())
        waiting.set()
        while not release.is_set():  # the loop waits in C between these steps
            await asyncio.sleep(0.005)

    async def main() -> None:
        await asyncio.gather(traced_task(), untraced_task())

    thread = threading.Thread(target=uvloop.run, args=(main(),), name="uvloop")
    thread.start()
    try:
        assert waiting.wait(30), "the loop never ran its tasks"

        def top_in_runner() -> FrameType | None:
            top = sys._current_frames().get(thread.ident or 0)
            if (
                top is not None
                and top.f_code.co_name == "run"
                and "runners" in top.f_code.co_filename
            ):
                return top
            return None

        top = wait_for(top_in_runner, timeout_s=30, interval_s=0.001)
        assert active.worth_sampling(top)
    finally:
        release.set()
        thread.join(30)
    assert not thread.is_alive()
    assert seen == {"traced step": True, "untraced step": False}
