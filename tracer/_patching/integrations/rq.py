"""RQ: a job carries its caller's context in ``job.meta``; the work horse runs it as an invocation
and shuts the tracer down (flushed, the process ended) before it exits.

More in docs/architecture.md, "tracer/_patching/integrations/rq.py".
"""

from __future__ import annotations

import contextvars
import functools
import types
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

from tracer import propagation
from tracer._core import codes, context, decorator, handoff, lifecycle, measured, recorder, stack
from tracer._patching.integrations import Hook, PatchSpec, _clients, _links

LIBRARY: Final = "rq"
#: The ``meta`` key of a linked job's link (``_links``).
LINK_KEY: Final = "invoseq_link"
#: The job's attributes (OpenTelemetry's messaging conventions, and RQ's own names).
SYSTEM: Final = "messaging.system"
JOB_ID: Final = "messaging.message.id"
QUEUE: Final = "messaging.destination.name"
ORIGIN: Final = "rq.job.origin"
STATUS: Final = "rq.job.status"
FINISHED: Final = "finished"
FAILED: Final = "failed"
#: The hand-off's name when the job's function has none we can read.
UNNAMED: Final = "<rq job>"

_set = context.set_current
_reset = context.reset_current
#: The job whose run is measured now (``Job.func`` unwraps its traced function).
_performing: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "invoseq_rq_performing", default=None
)
#: The name of the queue a worker took the job being performed from.
_queue: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "invoseq_rq_queue", default=None
)
_performing_set, _performing_reset = context.guarded(_performing)
_queue_set, _queue_reset = context.guarded(_queue)


# -- enqueuing ------------------------------------------------------------------------------------


def _hop_name(job: Any) -> str:
    try:
        name = job.func_name
    except Exception:
        return UNNAMED
    return name if isinstance(name, str) and name else UNNAMED


def hand_off(job: Any) -> None:
    """Write the current sequence into ``job.meta``, a copy of it (module docstring): a hand-off,
    or in linked mode a link. Nothing outside any sequence; never raises."""
    try:
        current = stack.capture()
        meta = job.meta
        if current is None or len(current[0]) != 16 or not isinstance(meta, dict):
            return
        if LINK_KEY in meta or propagation.HEADERS.get(meta, propagation.TRACEPARENT):
            return  # carried already: the caller put it there on purpose
        written = dict(meta)
        if _links.linked():
            link = _links.link_from(current)
            if link is None:
                return
            written[LINK_KEY] = link
        elif not propagation.inject(written, name=_hop_name(job)):
            return
        job.meta = written
    except Exception as exc:
        recorder.internal_error(exc)


def by_reference(func: Any) -> Any:
    """The function a traced one wraps, when RQ can find it by the same dotted name (a function
    of a module or class, not a local one): RQ stores a plain function by reference, but takes the
    C wrapper for a callable object, which it would pickle and call as ``__call__``. The worker
    imports the name, finds the traced wrapper, and runs the job as its function's invocation."""
    wrapped = getattr(func, "__wrapped__", None)
    if (
        isinstance(func, types.MethodType)
        or not getattr(func, decorator.TRACED_MARK, False)
        or not isinstance(wrapped, types.FunctionType)
        or "<locals>" in wrapped.__qualname__
        or (getattr(func, "__module__", None), getattr(func, "__qualname__", None))
        != (wrapped.__module__, wrapped.__qualname__)
    ):
        return func
    return wrapped


def patch_create_job(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def create_job(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if args:
                args = (by_reference(args[0]), *args[1:])
            elif "func" in kwargs:
                kwargs["func"] = by_reference(kwargs["func"])
        except Exception as exc:
            recorder.internal_error(exc)
        job = original(self, *args, **kwargs)
        hand_off(job)
        return job

    return create_job


# -- running --------------------------------------------------------------------------------------


def untraced(func: Any) -> Any:
    """``func`` without the tracer's wrapper (a bound method rebound to the same object), or a
    copy of a function whose code is traced that runs the untraced code; ``func`` itself when it
    is not traced."""
    if isinstance(func, types.MethodType):
        inner = untraced(func.__func__)
        return func if inner is func.__func__ else types.MethodType(inner, func.__self__)
    if isinstance(func, types.FunctionType) and codes.is_traced(func):
        return codes.untraced(func)
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", None) == "__call__" and getattr(owner, decorator.TRACED_MARK, 0):
        return untraced(owner)  # a traced function RQ took for a callable object
    wrapped = getattr(func, "__wrapped__", None)
    if getattr(func, decorator.TRACED_MARK, False) and callable(wrapped):
        return wrapped
    return func


def _method(job: Any) -> int:
    """The interned name of the job's function (its bare dotted name when it cannot be imported:
    the run then fails, and says why)."""
    try:
        return handoff.method_for(untraced(job.func))
    except Exception:
        return handoff.method_for(_hop_name(job))


class JobRun:
    """One job's run, measured (module docstring)."""

    __slots__ = ("attributes", "call", "method")

    def __init__(
        self, call: measured.Measured, method: int, attributes: dict[str, measured.AttributeValue]
    ) -> None:
        self.call = call
        self.method = method
        self.attributes = attributes
        call.open(method)

    def finish(self, exc: BaseException | None) -> None:
        error = None if exc is None else type(exc).__name__
        self.attributes[STATUS] = FINISHED if exc is None else FAILED
        self.call.finish(self.method, self.attributes, error=error)


def begin_run(job: Any) -> JobRun | None:
    """Begin the run of ``job``: under the hand-off its meta carries, else as a root (linked or
    not); opened, named after its function. None when not recording (never raises)."""
    try:
        meta = job.meta if isinstance(job.meta, dict) else {}
        link = _links.link_attributes(meta.get(LINK_KEY), LIBRARY)
        remote = None if link is not None else propagation.extract(meta)
        with context.detached():  # a job without a hand-off is not the worker's child
            call = measured.begin(remote)
        if call is None:
            return None
        origin = str(job.origin)
        attributes: dict[str, measured.AttributeValue] = {
            SYSTEM: LIBRARY,
            JOB_ID: str(job.id),
            QUEUE: _queue.get() or origin,
            ORIGIN: origin,
        }
        if link is not None:
            attributes.update(link)
        return JobRun(call, _method(job), attributes)
    except Exception as exc:
        recorder.internal_error(exc)
        return None


def _finish(run: JobRun, exc: BaseException | None) -> None:
    try:
        run.finish(exc)
    except Exception as error:
        recorder.internal_error(error)


def patch_perform(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def perform(self: Any, *args: Any, **kwargs: Any) -> Any:
        run = begin_run(self)
        if run is None:
            return original(self, *args, **kwargs)
        token = _set(run.call.value)
        performing = _performing_set(self)
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            _finish(run, exc)
            raise
        finally:
            _performing_reset(performing)
            _reset(token)
        _finish(run, None)
        return result

    return perform


def patch_func(original: property) -> property:
    """``Job.func``: the function under the tracer's wrapper while its own job's run is measured."""
    getter = original.fget
    assert getter is not None  # checked by the hook

    def func(self: Any) -> Any:
        found = getter(self)
        return untraced(found) if _performing.get() is self else found

    functools.update_wrapper(func, getter)
    return property(func, original.fset, original.fdel, original.__doc__)


def patch_perform_job(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def perform_job(self: Any, job: Any, queue: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(queue, "name", None)
        token = _queue_set(name if isinstance(name, str) else None)
        try:
            return original(self, job, queue, *args, **kwargs)
        finally:
            _queue_reset(token)
            if getattr(self, "is_horse", False) is True:
                # os._exit comes next (Worker.main_work_horse): a flush alone left every
                # horse `lost` in cmr stats
                lifecycle.end_before_exit()

    return perform_job


# -- hooks ----------------------------------------------------------------------------------------


def _queue_hook(module: ModuleType) -> list[PatchSpec]:
    _clients.require(module.Queue, "create_job", ("self", "func"))
    return [(module.Queue, "create_job", patch_create_job)]


def _job_hook(module: ModuleType) -> list[PatchSpec]:
    job = module.Job
    _clients.require(job, "perform", ("self",))
    func = job.__dict__.get("func")
    if not isinstance(func, property) or func.fget is None:
        raise TypeError("Job.func is not a property here")
    return [(job, "perform", patch_perform), (job, "func", patch_func)]


def _worker_hook(module: ModuleType) -> list[PatchSpec]:
    worker = getattr(module, "BaseWorker", None) or module.Worker  # RQ 2+, RQ 1
    _clients.require(worker, "perform_job", ("self", "job", "queue"))
    return [(worker, "perform_job", patch_perform_job)]


HOOKS: dict[str, Hook] = {"rq.queue": _queue_hook, "rq.job": _job_hook, "rq.worker": _worker_hook}
