"""asyncio: tasks created inside a sequence are hand-offs of kind ``task``; ``to_thread`` hands off
to a thread.

More in docs/architecture.md, "tracer/_patching/tasks.py".
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Coroutine, Generator, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from tracer._core import context, handoff, stack

if TYPE_CHECKING:
    import asyncio

T = TypeVar("T")

_get = context.current.get
_capture = stack.capture  # the exact current invocation
#: Writes into a copied context only, which holds its own reference to the mapping: not the
#: write a collection can interrupt (context.set_current).
_set = context.current.set


_subclasses: dict[type[Any], type[Any]] = {}


def make_task_class(original: type[asyncio.Task[Any]]) -> type[asyncio.Task[Any]]:
    """The one traced subclass of ``original`` (``asyncio.Task`` and ``asyncio.tasks.Task`` must
    stay the same class)."""
    if original not in _subclasses:
        _subclasses[original] = _subclass(original)
    return _subclasses[original]


def _subclass(original: type[asyncio.Task[Any]]) -> type[asyncio.Task[Any]]:
    class Task(original):  # type: ignore[valid-type,misc]
        def __init__(
            self,
            coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any],
            *,
            loop: asyncio.AbstractEventLoop | None = None,
            name: str | None = None,
            context: contextvars.Context | None = None,
            **options: Any,  # eager_start (3.12+) and whatever later Pythons add
        ) -> None:
            current = _capture() if context is None else stack.live(context.get(_var))
            if current is not None:
                value = handoff.record("task", coro, current)
                if value is not None:
                    context = contextvars.copy_context() if context is None else context.copy()
                    context.run(_set, stack.new_value(*value))  # exact on the loop's thread
            super().__init__(coro, loop=loop, name=name, context=context, **options)

    Task.__qualname__ = Task.__name__ = original.__name__
    Task.__module__ = original.__module__
    return Task


_var = context.current


def patch_to_thread(original: Callable[..., Any]) -> Callable[..., Any]:
    import asyncio

    async def to_thread(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        copied = contextvars.copy_context()
        runner = handoff.bind(func, "thread")
        call = functools.partial(copied.run, runner, *args, **kwargs)
        setattr(call, handoff.BOUND_MARK, True)  # the executor's submit must not hand off again
        return await loop.run_in_executor(None, call)

    functools.update_wrapper(to_thread, original)
    return to_thread


def _asyncio(module: ModuleType) -> Iterable[tuple[Any, str, Callable[[Any], Any]]]:
    """The package, once its ``__init__`` has run: ``asyncio.Task`` is bound by then."""
    return [
        (module.tasks, "Task", make_task_class),
        (module, "Task", make_task_class),
        (module.threads, "to_thread", patch_to_thread),
        (module, "to_thread", patch_to_thread),
    ]


#: Patched once the program imports asyncio (``tracer._patching.integrations.Watcher``), so
#: instrumenting imports no asyncio.
HOOKS: dict[str, Callable[[ModuleType], Iterable[tuple[Any, str, Callable[[Any], Any]]]]] = {
    "asyncio": _asyncio,
}
