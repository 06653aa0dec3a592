"""Integration: celery. A task published inside a sequence continues it in the worker that runs it.

More in docs/architecture.md, "tracer/_patching/integrations/celery.py".
"""

from __future__ import annotations

import contextvars
from types import ModuleType
from typing import Any, Final

from tracer import propagation
from tracer._core import context, decorator, handoff, lifecycle, measured, recorder, stack
from tracer._patching.integrations import Hook, PatchSpec, _links

#: The message header of a link (linked mode).
LINK_HEADER: Final = "invoseq_link"
#: Every header this integration writes; a message carries one hand-off or one link, never both.
TRACE_HEADERS: Final = (propagation.TRACEPARENT, propagation.TRACESTATE, LINK_HEADER)
LINK_KIND: Final = "celery"
RETRY_LINK_KIND: Final = "celery.retry"

NAME: Final = "celery.task.name"
ID: Final = "celery.task.id"
RETRIES: Final = "celery.task.retries"
STATE: Final = "celery.task.state"

SUCCESS: Final = "SUCCESS"
FAILURE: Final = "FAILURE"
RETRY: Final = "RETRY"

#: The signals, by the name of the receiver connected to each.
SIGNALS: Final = (
    "before_task_publish",
    "task_prerun",
    "task_failure",
    "task_retry",
    "task_postrun",
    "worker_process_shutdown",
)
DISPATCH_UID: Final = "invoseq.celery.{}"
#: Task classes whose method ids are remembered at most; past it the cache starts again.
MAX_TASKS: Final = 4096

_set = context.set_current
_reset = context.reset_current


class Run:
    """One run of a task in this worker, between ``task_prerun`` and ``task_postrun``."""

    __slots__ = ("call", "error", "incoming", "method", "outer", "retries", "task_id", "token")

    def __init__(
        self,
        task_id: str,
        retries: int,
        incoming: dict[str, str],
        call: measured.Measured | None,
        method: int,
    ) -> None:
        self.task_id = task_id
        self.retries = retries
        self.incoming = incoming  # the trace headers the message carried
        self.call = call
        self.method = method  # the task's function
        self.error: str | None = None  # what ``task_failure`` or ``task_retry`` names
        #: The context and the run found at the start, restored at the end.
        self.token: object = None  # set_current's token (context.NOT_WRITTEN: nothing set)
        self.outer: object = None  # _running_set's token

    def attach(self) -> None:
        """Make this the current run, its invocation the current one (when it is measured)."""
        if self.call is not None:
            self.token = _set(self.call.value)
        self.outer = _running_set(self)

    def detach(self) -> None:
        """Restore the context and the run found at the start (or clear them, when the run ends
        in another context than it began in)."""
        try:
            if self.outer is not None:
                _running_reset(self.outer)
            if self.token is not None:
                _reset(self.token)
        except (ValueError, RuntimeError):
            _running_set(None)
            _set(None)

    def retried_by(self, headers: dict[str, Any]) -> bool:
        """Whether ``headers`` are of this run's task published again by ``retry``: the same id,
        more retries (``Task.replace`` keeps the id too, with the same count)."""
        retries = headers.get("retries")
        return (
            headers.get("id") == self.task_id
            and isinstance(retries, int)
            and retries > self.retries
        )

    def retry_headers(self) -> dict[str, str]:
        """The trace headers of this run's retry: those it received, or, for a run that started a
        sequence of its own, a link to it."""
        if self.incoming:
            return dict(self.incoming)
        link = _links.link_from(self.call.value) if self.call is not None else None
        return {} if link is None else {LINK_HEADER: f"{RETRY_LINK_KIND}:{link}"}


_running: contextvars.ContextVar[Run | None] = contextvars.ContextVar(
    "invoseq_celery_run", default=None
)
_running_set, _running_reset = context.guarded(_running)
_methods: dict[type, int] = {}


# -- publishing ----------------------------------------------------------------------------------


def before_task_publish(sender: Any = None, headers: Any = None, **_: Any) -> None:
    """Write the trace headers of the message ``sender`` (the task's name) is about to send."""
    try:
        if not isinstance(headers, dict):
            return
        run = _running.get()
        if run is not None and run.retried_by(headers):
            written: dict[str, str] | None = run.retry_headers()
        else:
            written = _handoff_headers(str(sender))
        if written is None:
            return  # outside any sequence: the message goes as the caller made it
        nested = headers.get("headers")
        for carrier in (headers, nested) if isinstance(nested, dict) else (headers,):
            for key in TRACE_HEADERS:
                carrier.pop(key, None)  # a retry or a replace copies the request's own
            carrier.update(written)
    except Exception as exc:
        recorder.internal_error(exc)


def _handoff_headers(task_name: str) -> dict[str, str] | None:
    """A fresh hand-off from the current invocation, or in linked mode a link to it; None
    outside any sequence."""
    current = stack.capture()
    if current is None:
        return None
    if _links.linked():
        link = _links.link_from(current)
        return {} if link is None else {LINK_HEADER: link}
    carrier: dict[str, str] = {}
    propagation.inject(carrier, name=f"celery.task {task_name}")
    return carrier


# -- running -------------------------------------------------------------------------------------


def task_prerun(sender: Any = None, task_id: Any = None, task: Any = None, **_: Any) -> None:
    """Begin the run's invocation and attach it for the task's code."""
    try:
        if task is None:
            return
        request = task.request
        incoming = _incoming(request)
        retries = getattr(request, "retries", 0)
        retries = retries if isinstance(retries, int) else 0
        call, link = _begin(incoming)
        method = _method(task)
        if call is not None:
            call.open(method)
            attributes: dict[str, measured.AttributeValue] = {
                NAME: str(getattr(task, "name", "")),
                ID: str(task_id),
                RETRIES: retries,
            }
            measured.add_attributes(call.iid, {**attributes, **(link or {})})
        Run(str(task_id), retries, incoming, call, method).attach()
    except Exception as exc:
        recorder.internal_error(exc)


def _incoming(request: Any) -> dict[str, str]:
    """The trace headers of a task's request: its message's own headers, else those of a
    ``headers`` dict nested in them (older Celery versions)."""
    nested = getattr(request, "headers", None)
    found: dict[str, str] = {}
    for key in TRACE_HEADERS:
        value = getattr(request, key, None)
        if value is None and isinstance(nested, dict):
            value = nested.get(key)
        if isinstance(value, str):
            found[key] = value
    return found


def _begin(
    incoming: dict[str, str],
) -> tuple[measured.Measured | None, dict[str, measured.AttributeValue] | None]:
    """The run's invocation: the root of a new sequence for a link, else continuing the
    hand-off (or the current invocation: an eager ``apply`` inside a task; or a new sequence)."""
    link = incoming.get(LINK_HEADER)
    if link is None:
        return measured.begin(propagation.extract(incoming)), None
    kind, _, text = link.rpartition(":")
    attributes = _links.link_attributes(text, kind or LINK_KIND)
    return measured.begin((decorator.new_seq(), 0, 0)), attributes


def _method(task: Any) -> int:
    """The interned name of the task's function (``module.qualname``), once per task class."""
    cls = type(task)
    found = _methods.get(cls)
    if found is None:
        if len(_methods) >= MAX_TASKS:
            _methods.clear()
        found = _methods[cls] = handoff.method_for(task.run)
    return found


def task_failure(task_id: Any = None, exception: Any = None, **_: Any) -> None:
    """The run failed: its error is named after the exception."""
    try:
        run = _running.get()
        if run is not None and run.task_id == str(task_id):
            run.error = _error_name(exception, FAILURE)
    except Exception as exc:
        recorder.internal_error(exc)


def task_retry(request: Any = None, reason: Any = None, **_: Any) -> None:
    """The run asked for a retry: its error is named after the exception given to ``retry``
    (``retry(exc=...)``, the ``Retry``'s ``exc``), else ``Retry``."""
    try:
        run = _running.get()
        if run is not None and run.task_id == str(getattr(request, "id", None)):
            cause = getattr(reason, "exc", None)
            run.error = _error_name(cause if isinstance(cause, BaseException) else reason, "Retry")
    except Exception as exc:
        recorder.internal_error(exc)


def _error_name(exception: object, otherwise: str) -> str:
    return type(exception).__name__ if isinstance(exception, BaseException) else otherwise


def task_postrun(task_id: Any = None, state: Any = None, **_: Any) -> None:
    """End the run's invocation with the task's state, and detach it."""
    try:
        run = _running.get()
        if run is None or run.task_id != str(task_id):
            return
        run.detach()
        if run.call is None:
            return
        state = "" if state is None else str(state)
        error = run.error or state if state in (FAILURE, RETRY) else None
        run.call.finish(run.method, {STATE: state}, error=error)
    except Exception as exc:
        recorder.internal_error(exc)


def worker_process_shutdown(**_: Any) -> None:
    """A pool child is about to exit (``os._exit``, no atexit): send what it recorded and tell
    the repository it ended (bounded by the flush timeout)."""
    lifecycle.end_before_exit()


# -- connecting ----------------------------------------------------------------------------------


class Receivers:
    """The receivers connected to Celery's signals, one attribute per signal: setting a receiver
    connects it (``weak=False``), setting None disconnects it. The patches are these attributes."""

    _signals: ModuleType

    def __init__(self, signals: ModuleType) -> None:
        object.__setattr__(self, "_signals", signals)
        for name in SIGNALS:
            object.__setattr__(self, name, None)

    def __setattr__(self, name: str, receiver: Any) -> None:
        if name not in SIGNALS:
            raise AttributeError(name)
        signal = getattr(self._signals, name)
        uid = DISPATCH_UID.format(name)
        if getattr(self, name) is not None:
            signal.disconnect(dispatch_uid=uid)
        if receiver is not None:
            signal.connect(receiver, weak=False, dispatch_uid=uid)
        object.__setattr__(self, name, receiver)


RECEIVERS: Final = {
    "before_task_publish": before_task_publish,
    "task_prerun": task_prerun,
    "task_failure": task_failure,
    "task_retry": task_retry,
    "task_postrun": task_postrun,
    "worker_process_shutdown": worker_process_shutdown,
}


def _hook(module: ModuleType) -> list[PatchSpec]:
    for name in SIGNALS:
        signal = getattr(module, name)
        if not callable(getattr(signal, "connect", None)) or not callable(signal.disconnect):
            raise TypeError(f"celery.signals.{name} is not a signal here")
    receivers = Receivers(module)
    return [(receivers, name, _connecting(receiver)) for name, receiver in RECEIVERS.items()]


def _connecting(receiver: Any) -> Any:
    """A patch's maker: the receiver to set in place of None."""
    return lambda _: receiver


HOOKS: dict[str, Hook] = {"celery.signals": _hook}
