"""Threads and thread pools: the context is captured when work is submitted and attached where it
runs, with a hand-off of kind ``thread`` between the two.

More in docs/architecture.md, "tracer/_patching/threads.py".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tracer._core import context, handoff, stack

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

_set = context.set_current
_reset = context.reset_current


def _thread_target(thread: threading.Thread) -> Any:
    target = getattr(thread, "_target", None)
    if target is not None:
        return target
    if isinstance(thread, threading.Timer):
        return thread.function
    return type(thread).run


def patch_thread_start(original: Callable[[threading.Thread], None]) -> Callable[..., None]:
    def start(self: threading.Thread) -> None:
        if stack.active():
            run = handoff.bind(self.run, "thread", named_after=_thread_target(self))
            self.run = run  # type: ignore[method-assign]
        original(self)

    return start


def patch_executor_submit(original: Callable[..., Future[Any]]) -> Callable[..., Future[Any]]:
    def submit(
        self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        bound = handoff.bind(fn, "thread")
        with context.detached():  # the pool's worker threads, started in here, get none
            return original(self, bound, *args, **kwargs)

    return submit


PATCHES: tuple[tuple[Any, str, Callable[[Any], Any]], ...] = (
    (threading.Thread, "start", patch_thread_start),
)


def _thread_pool(module: ModuleType) -> Iterable[tuple[Any, str, Callable[[Any], Any]]]:
    return [(module.ThreadPoolExecutor, "submit", patch_executor_submit)]


#: Patched once the program imports them (``tracer._patching.integrations.Watcher``), so
#: instrumenting imports no pool.
HOOKS: dict[str, Callable[[ModuleType], Iterable[tuple[Any, str, Callable[[Any], Any]]]]] = {
    "concurrent.futures.thread": _thread_pool,
}
