"""Processes: the sequence follows work into child processes, as a hand-off of kind ``process``.

More in docs/architecture.md, "tracer/_patching/processes.py".
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterable
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from tracer import propagation
from tracer._core import (
    context,
    decorator,
    forking,
    handoff,
    lifecycle,
    recorder,
    stack,
    wrapper_frames,
)

if TYPE_CHECKING:
    import multiprocessing.pool
    import multiprocessing.process
    import subprocess
    from concurrent.futures import ProcessPoolExecutor

_get = context.current.get
_set = context.set_current
_reset = context.reset_current

#: How long a child waits, at the end of each task, for the repository to acknowledge its events.
TASK_FLUSH_TIMEOUT_S = 2.0


class ProcessRunner:
    """A callable handed to another process, with the hand-off it continues. Pickles by value (the
    wrapped callable by reference, as multiprocessing would pickle it anyway)."""

    __slots__ = ("fn", "origin_pid", "value")

    def __init__(self, fn: Callable[..., Any], value: context.Current) -> None:
        self.fn = fn
        self.value = value
        self.origin_pid = os.getpid()

    def __getstate__(self) -> tuple[Any, ...]:
        return self.fn, self.value, self.origin_pid

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.fn, self.value, self.origin_pid = state

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fn = self.fn
        if not decorator.is_traced(handoff._unwrap(fn)):
            fn = decorator.wrap_with_method(fn, handoff.method_for(fn))
        token = _set(self.value)
        try:
            return fn(*args, **kwargs)
        finally:
            _reset(token)
            if os.getpid() != self.origin_pid:
                _flush_task()


wrapper_frames.register_wrappers(ProcessRunner.__call__)


def _flush_task() -> None:
    try:
        lifecycle.flush(TASK_FLUSH_TIMEOUT_S)
    except Exception as exc:
        recorder.internal_error(exc)


def _runner(fn: Callable[..., Any], value: context.Current | None) -> Callable[..., Any]:
    return fn if value is None or isinstance(fn, ProcessRunner) else ProcessRunner(fn, value)


def _record(fn: Any) -> context.Current | None:
    return None if isinstance(fn, ProcessRunner) else handoff.record("process", fn)


def patch_process_start(original: Callable[..., None]) -> Callable[..., None]:
    def start(self: multiprocessing.process.BaseProcess) -> None:
        if stack.active():
            target = getattr(self, "_target", None)
            if target is not None:
                self._target = _runner(target, _record(target))  # type: ignore[attr-defined]
            elif type(self).run is not sys.modules["multiprocessing.process"].BaseProcess.run:
                # A subclass's own run(): the instance attribute shadows it. It pickles for
                # spawn as getattr(process, "run"), which unpickles to the class's run again.
                self.run = _runner(self.run, _record(self.run))  # type: ignore[method-assign]
        with context.detached():  # the bare-fork hook must not hand off a second time
            original(self)

    return start


def patch_process_bootstrap(original: Callable[..., int]) -> Callable[..., int]:
    """``BaseProcess._bootstrap``, which runs the process in the child: then, in a forked child
    (``fork``, ``forkserver``: ``os._exit`` follows, and the fork cleared ``atexit``), the
    tracer's shutdown, so that the repository learns it ended; in a spawned one (``sys.exit``
    follows, and the shutdown at exit) a flush."""

    @functools.wraps(original)
    def bootstrap(self: multiprocessing.process.BaseProcess, *args: Any, **kwargs: Any) -> int:
        try:
            return original(self, *args, **kwargs)
        finally:
            if _forked or _served_by_forkserver():
                lifecycle.end_before_exit()
            else:
                _flush_task()

    return bootstrap


def _served_by_forkserver() -> bool:
    """Whether this process is a forkserver's child, run by the server's code on this stack
    (``forkserver._serve_one``, which ``os._exit``s once the process ends): forked before its
    tracer started (a script that instruments itself at import, unpickled in the child), it
    did not see the fork, so ``_forked`` is not set."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "multiprocessing.forkserver":
            return True
        frame = frame.f_back
    return False


def patch_detached(original: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``original`` with no context attached (a pool's constructor)."""

    @functools.wraps(original)
    def detached(*args: Any, **kwargs: Any) -> Any:
        with context.detached():
            return original(*args, **kwargs)

    return detached


def patch_pool_method(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Pool.apply_async``, ``_map_async``, ``imap``, ``imap_unordered``: one hand-off per call,
    continued by every task it becomes."""

    @functools.wraps(original)
    def submit(
        self: multiprocessing.pool.Pool, func: Callable[..., Any], *args: Any, **kw: Any
    ) -> Any:
        runner = _runner(func, _record(func))
        with context.detached():
            return original(self, runner, *args, **kw)

    return submit


def patch_executor_submit(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def submit(self: ProcessPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kw: Any) -> Any:
        if not _is_map_chunk(fn):
            fn = _runner(fn, _record(fn))
        with context.detached():
            return original(self, fn, *args, **kw)

    return submit


def _is_map_chunk(fn: Any) -> bool:
    """``ProcessPoolExecutor.map`` submits ``partial(_process_chunk, runner)``: already bound."""
    return (
        isinstance(fn, functools.partial)
        and fn.func is sys.modules["concurrent.futures.process"]._process_chunk
        and bool(fn.args)
        and isinstance(fn.args[0], ProcessRunner)
    )


def patch_executor_map(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def map_(self: ProcessPoolExecutor, fn: Callable[..., Any], *iterables: Any, **kw: Any) -> Any:
        return original(self, _runner(fn, _record(fn)), *iterables, **kw)

    return map_


def patch_popen_init(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        if stack.active():
            kwargs["env"] = child_environment(kwargs.get("env"), args)
        original(self, args, *rest, **kwargs)

    return popen_init


def child_environment(env: Any, args: Any) -> dict[str, str]:
    """The child's environment: the given one (or ours), plus the hand-off, the tracer's
    settings and, under ``tracer run``, what traces a Python child (``tracer.run.bootstrap``),
    unless the caller set them."""
    child = dict(os.environ if env is None else env)
    program = args if isinstance(args, (str, bytes)) else next(iter(args), "")
    name = os.path.basename(os.fsdecode(program))
    propagation.inject_env(child, kind="process", name=name or "<subprocess>")
    for variable, value in lifecycle.child_settings().items():
        child.setdefault(variable, value)
    for extend in _child_environment_extensions:
        extend(child)
    return child


_child_environment_extensions: list[Callable[[dict[str, str]], None]] = []


def extend_child_environment(extend: Callable[[dict[str, str]], None]) -> None:
    """Have ``extend`` add to every child's environment (``tracer run``: what traces a Python
    child); idempotent."""
    if extend not in _child_environment_extensions:
        _child_environment_extensions.append(extend)


Patches = Iterable[tuple[Any, str, Callable[[Any], Any]]]


def _process(module: ModuleType) -> Patches:
    return [
        (module.BaseProcess, "start", patch_process_start),
        (module.BaseProcess, "_bootstrap", patch_process_bootstrap),
    ]


def _pool(module: ModuleType) -> Patches:
    return [
        (module.Pool, "__init__", patch_detached),
        (module.Pool, "apply_async", patch_pool_method),
        (module.Pool, "_map_async", patch_pool_method),
        (module.Pool, "imap", patch_pool_method),
        (module.Pool, "imap_unordered", patch_pool_method),
    ]


def _executor(module: ModuleType) -> Patches:
    return [
        (module.ProcessPoolExecutor, "submit", patch_executor_submit),
        (module.ProcessPoolExecutor, "map", patch_executor_map),
    ]


def _subprocess(module: ModuleType) -> Patches:
    return [(module.Popen, "__init__", patch_popen_init)]


#: Patched once the program imports them (``tracer._patching.integrations.Watcher``), so
#: instrumenting imports neither multiprocessing nor concurrent.futures nor subprocess.
HOOKS: dict[str, Callable[[ModuleType], Patches]] = {
    "multiprocessing.process": _process,
    "multiprocessing.pool": _pool,
    "concurrent.futures.process": _executor,
    "subprocess": _subprocess,
}


# -- a bare os.fork() inside a sequence ----------------------------------------------------------

_fork_value: context.Current | None = None


def _before_fork() -> None:
    global _fork_value
    _fork_value = handoff.record("process", "<fork>") if stack.active() else None


def _after_fork_in_parent() -> None:
    global _fork_value
    _fork_value = None


#: True in a process made by ``os.fork()`` (multiprocessing's ``fork`` and ``forkserver``).
_forked = False


def _after_fork_in_child() -> None:
    global _fork_value, _forked
    _forked = True
    if _fork_value is not None:
        _set(_fork_value)
        _fork_value = None


_fork_hooks_installed = False


def install_fork_hooks() -> None:
    """Registered once, at the first ``instrument()`` (fork hooks cannot be removed); they act
    only while instrumented."""
    global _fork_hooks_installed
    if _fork_hooks_installed:
        return
    _fork_hooks_installed = True
    forking.on_fork(
        "processes",
        before=lambda: _before_fork() if _enabled else None,
        in_parent=_after_fork_in_parent,
        in_child=_after_fork_in_child,
    )


_enabled = False


def set_fork_hooks(enabled: bool) -> None:
    global _enabled
    _enabled = enabled
