"""Settings: one frozen dataclass. An explicit argument beats an environment variable, which beats
the default. Every variable is a named constant below, documented in docs/guide.md."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, Literal, TypeAlias, TypedDict, TypeVar

from invoseq import DEFAULT_ENDPOINT

__all__ = [
    "DEFAULT_ENDPOINT",
    "SAMPLE_MODES",
    "TASK_SEQUENCES",
    "Config",
    "ConfigError",
    "SampleMode",
    "Settings",
    "TaskSequences",
    "environment",
    "resolve",
    "split_endpoints",
    "split_patterns",
]

log = logging.getLogger("tracer")

ENV_ENDPOINT: Final = "INVOSEQ_ENDPOINT"
ENV_ENABLED: Final = "INVOSEQ_ENABLED"
ENV_FLUSH_INTERVAL_MS: Final = "INVOSEQ_FLUSH_INTERVAL_MS"
ENV_FLUSH_TIMEOUT_MS: Final = "INVOSEQ_FLUSH_TIMEOUT_MS"
ENV_BATCH_EVENTS: Final = "INVOSEQ_BATCH_EVENTS"
ENV_QUEUE_BATCHES: Final = "INVOSEQ_QUEUE_BATCHES"
ENV_INSTRUMENT: Final = "INVOSEQ_INSTRUMENT"
ENV_HEARTBEAT_MS: Final = "INVOSEQ_HEARTBEAT_MS"
ENV_SAMPLE_INTERVAL_MS: Final = "INVOSEQ_SAMPLE_INTERVAL_MS"
ENV_SAMPLE_MODE: Final = "INVOSEQ_SAMPLE_MODE"
ENV_SAMPLE_ONLY_ACTIVE: Final = "INVOSEQ_SAMPLE_ONLY_ACTIVE"
ENV_SAMPLE_PACING: Final = "INVOSEQ_SAMPLE_PACING"
ENV_MAX_THREADS_PER_TICK: Final = "INVOSEQ_MAX_THREADS_PER_TICK"
#: The sampler's modes: every chosen thread, or only the threads that are running.
SampleMode: TypeAlias = Literal["wall", "cpu"]
SAMPLE_MODES: Final[tuple[SampleMode, ...]] = ("wall", "cpu")
ENV_SPOOL_DIR: Final = "INVOSEQ_SPOOL_DIR"
ENV_SPOOL_BYTES: Final = "INVOSEQ_SPOOL_BYTES"
ENV_MAX_INFLIGHT_BATCHES: Final = "INVOSEQ_MAX_INFLIGHT_BATCHES"
ENV_RESEND_MS: Final = "INVOSEQ_RESEND_MS"
ENV_MAX_BUFFERED_BYTES: Final = "INVOSEQ_MAX_BUFFERED_BYTES"
ENV_CURVE_SERVER_KEY: Final = "INVOSEQ_CURVE_SERVER_KEY"
ENV_CURVE_CLIENT_KEY: Final = "INVOSEQ_CURVE_CLIENT_KEY"
ENV_FLUSH_ON_SIGTERM: Final = "INVOSEQ_FLUSH_ON_SIGTERM"
ENV_TASK_SEQUENCES: Final = "INVOSEQ_TASK_SEQUENCES"
ENV_EXCLUDED_URLS: Final = "INVOSEQ_EXCLUDED_URLS"
ENV_CAPTURE_SERVER_REQUEST_HEADERS: Final = "INVOSEQ_CAPTURE_SERVER_REQUEST_HEADERS"
ENV_CAPTURE_SERVER_RESPONSE_HEADERS: Final = "INVOSEQ_CAPTURE_SERVER_RESPONSE_HEADERS"
ENV_CAPTURE_CLIENT_REQUEST_HEADERS: Final = "INVOSEQ_CAPTURE_CLIENT_REQUEST_HEADERS"
ENV_CAPTURE_CLIENT_RESPONSE_HEADERS: Final = "INVOSEQ_CAPTURE_CLIENT_RESPONSE_HEADERS"
#: OpenTelemetry's variables for the same settings, read when invoseq's own is not set.
OTEL_EXCLUDED_URLS: Final = "OTEL_PYTHON_EXCLUDED_URLS"
OTEL_CAPTURE_HEADERS: Final = "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_"
#: What a queued task (Celery, RQ) is to the request that queued it: a child in its sequence, or
#: the root of a sequence of its own, linked to the call that queued it.
TaskSequences: TypeAlias = Literal["one", "linked"]
TASK_SEQUENCES: Final[tuple[TaskSequences, ...]] = ("one", "linked")


def default_spool_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "invoseq", "spool")


_ENDPOINT_SCHEMES: Final = ("tcp://", "ipc://", "inproc://")


class ConfigError(ValueError):
    """A setting has a value the tracer cannot use; the message names the setting."""


@dataclass(frozen=True, slots=True)
class Config:
    #: Where the repository listens (ZeroMQ endpoint); several repository nodes sharing one
    #: database: their endpoints separated by commas (``configure()`` takes a list too).
    endpoint: str = DEFAULT_ENDPOINT
    #: False makes every traced function call straight through, recording nothing.
    enabled: bool = True
    #: How often the sender collects and sends buffered events (a busy process is drained
    #: sooner, by size: docs/architecture.md, "The flush interval").
    flush_interval_ms: int = 200
    #: The longest that shutdown (and so interpreter exit) waits for the repository.
    flush_timeout_ms: int = 2000
    #: The most events in one batch (a busy process's round makes fewer sends, each a turn at
    #: the GIL: docs/architecture.md, "Batch size and the GIL").
    batch_events: int = 32768
    #: Batches queued in memory while the repository is slow or away; then they go to the spool.
    queue_batches: int = 256
    #: Patch threading, concurrent.futures and asyncio so sequences follow work across threads.
    instrument: bool = False
    #: The sender sends at least this often, so the repository can tell a process that died.
    heartbeat_ms: int = 1000
    #: How often the stack sampler samples (0: no sampler).
    sample_interval_ms: int = 10
    #: "wall": every chosen thread; "cpu": only threads that are running.
    sample_mode: SampleMode = "wall"
    #: "one": a queued task runs in the sequence that queued it; "linked": in a sequence of its
    #: own, linked to the call that queued it (fan-outs that would grow one tree without bound).
    task_sequences: TaskSequences = "one"
    #: Sample only threads inside a traced call (the ones whose samples can be placed in a tree).
    sample_only_active: bool = True
    #: Lengthen the sampler's interval while its ticks cost more than 1 % of the time, and shorten
    #: it back (``tracer/_sampling/pacing.py``); off: the configured interval whatever they cost.
    sample_pacing: bool = True
    #: The most threads sampled in one tick, chosen at random.
    max_threads_per_tick: int = 8
    #: Where batches wait on disk when the memory queue is full (one file per process).
    spool_dir: str = field(default_factory=default_spool_dir)
    #: The most bytes one process spools; past it batches are dropped and counted. 0: no spool.
    spool_bytes: int = 64 * 1024 * 1024
    #: Batches sent and not yet acknowledged, at most.
    max_inflight_batches: int = 64
    #: A batch not acknowledged within this long is sent again: at once when its repository node
    #: acknowledged nothing since; while it acknowledges other batches, once it waited as long as
    #: the node's acknowledgements take, a wait that doubles at each resend (``Delivery.pump``).
    resend_ms: int = 2000
    #: Memory for events not yet delivered, in the whole process, at most: every thread's buffered
    #: events (budget.EVENT_BYTES each) and the encoded batches in memory (queued, in flight).
    #: Past it, traced calls run untraced and are counted as dropped (tracer/_core/budget.py).
    max_buffered_bytes: int = 32 * 1024 * 1024
    #: CURVE: the repository's public key file (from `cmr keys generate`); empty: no encryption.
    curve_server_key: str = ""
    #: CURVE: this client's secret key file (from `cmr keys generate`), allowed by the repository.
    curve_client_key: str = ""
    #: Where SIGTERM is at its default: flush (bounded by ``flush_timeout_ms``), then die by it.
    flush_on_sigterm: bool = True
    #: Requests a server integration leaves untraced (health checks): comma-separated regular
    #: expressions, searched in the request's full URL. OpenTelemetry's
    #: ``OTEL_PYTHON_EXCLUDED_URLS`` when not set; ``OTEL_PYTHON_<FRAMEWORK>_EXCLUDED_URLS`` (one
    #: framework's) takes precedence for that framework's requests.
    excluded_urls: str = ""
    #: Headers recorded as ``http.request.header.<name>`` of the requests servers receive:
    #: comma-separated names (any case) or regular expressions matching the whole name.
    capture_server_request_headers: str = ""
    #: Headers recorded as ``http.response.header.<name>`` of the responses servers send.
    capture_server_response_headers: str = ""
    #: Headers recorded as ``http.request.header.<name>`` of the requests clients send.
    capture_client_request_headers: str = ""
    #: Headers recorded as ``http.response.header.<name>`` of the responses clients receive.
    capture_client_response_headers: str = ""

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The repository nodes the sender spreads its batches over (``endpoint``, split)."""
        return split_endpoints(self.endpoint)


class Settings(TypedDict, total=False):
    """The keyword arguments of ``tracer.configure()`` (and ``tracer.testing.capture()``): the
    fields of ``Config``, each optional; ``endpoint`` also takes a list of endpoints."""

    endpoint: str | Sequence[str]
    enabled: bool
    flush_interval_ms: int
    flush_timeout_ms: int
    batch_events: int
    queue_batches: int
    instrument: bool
    heartbeat_ms: int
    sample_interval_ms: int
    sample_mode: SampleMode
    task_sequences: TaskSequences
    sample_only_active: bool
    sample_pacing: bool
    max_threads_per_tick: int
    spool_dir: str
    spool_bytes: int
    max_inflight_batches: int
    resend_ms: int
    max_buffered_bytes: int
    curve_server_key: str
    curve_client_key: str
    flush_on_sigterm: bool
    excluded_urls: str
    capture_server_request_headers: str
    capture_server_response_headers: str
    capture_client_request_headers: str
    capture_client_response_headers: str


_ENV_NAMES: Final = {
    "endpoint": ENV_ENDPOINT,
    "enabled": ENV_ENABLED,
    "flush_interval_ms": ENV_FLUSH_INTERVAL_MS,
    "flush_timeout_ms": ENV_FLUSH_TIMEOUT_MS,
    "batch_events": ENV_BATCH_EVENTS,
    "queue_batches": ENV_QUEUE_BATCHES,
    "instrument": ENV_INSTRUMENT,
    "heartbeat_ms": ENV_HEARTBEAT_MS,
    "sample_interval_ms": ENV_SAMPLE_INTERVAL_MS,
    "sample_mode": ENV_SAMPLE_MODE,
    "task_sequences": ENV_TASK_SEQUENCES,
    "sample_only_active": ENV_SAMPLE_ONLY_ACTIVE,
    "sample_pacing": ENV_SAMPLE_PACING,
    "max_threads_per_tick": ENV_MAX_THREADS_PER_TICK,
    "spool_dir": ENV_SPOOL_DIR,
    "spool_bytes": ENV_SPOOL_BYTES,
    "max_inflight_batches": ENV_MAX_INFLIGHT_BATCHES,
    "resend_ms": ENV_RESEND_MS,
    "max_buffered_bytes": ENV_MAX_BUFFERED_BYTES,
    "curve_server_key": ENV_CURVE_SERVER_KEY,
    "curve_client_key": ENV_CURVE_CLIENT_KEY,
    "flush_on_sigterm": ENV_FLUSH_ON_SIGTERM,
    "excluded_urls": ENV_EXCLUDED_URLS,
    "capture_server_request_headers": ENV_CAPTURE_SERVER_REQUEST_HEADERS,
    "capture_server_response_headers": ENV_CAPTURE_SERVER_RESPONSE_HEADERS,
    "capture_client_request_headers": ENV_CAPTURE_CLIENT_REQUEST_HEADERS,
    "capture_client_response_headers": ENV_CAPTURE_CLIENT_RESPONSE_HEADERS,
}
#: The OpenTelemetry variable a setting falls back to when invoseq's own is not set.
_OTEL_ENV_NAMES: Final = {
    "excluded_urls": OTEL_EXCLUDED_URLS,
    "capture_server_request_headers": OTEL_CAPTURE_HEADERS + "SERVER_REQUEST",
    "capture_server_response_headers": OTEL_CAPTURE_HEADERS + "SERVER_RESPONSE",
    "capture_client_request_headers": OTEL_CAPTURE_HEADERS + "CLIENT_REQUEST",
    "capture_client_response_headers": OTEL_CAPTURE_HEADERS + "CLIENT_RESPONSE",
}

_T = TypeVar("_T")


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected one of 1/0/true/false/yes/no/on/off, got {text!r}")


def _check_endpoint(value: str) -> str:
    """One endpoint, or several separated by commas (repository nodes sharing one database):
    each checked, blanks around commas removed, none listed twice."""
    endpoints = [part.strip() for part in value.split(",")]
    for endpoint in endpoints:
        if not endpoint:
            raise ValueError(f"an empty endpoint in {value!r} (a comma too many)")
        if not endpoint.startswith(_ENDPOINT_SCHEMES):
            example = DEFAULT_ENDPOINT
            raise ValueError(f"expected a ZeroMQ endpoint like {example}, got {endpoint!r}")
    repeated = sorted({e for e in endpoints if endpoints.count(e) > 1})
    if repeated:
        raise ValueError(f"{repeated[0]!r} is listed twice")
    return ",".join(endpoints)


def split_endpoints(value: str) -> tuple[str, ...]:
    """The endpoints of an ``endpoint`` setting that was checked (comma-separated)."""
    return tuple(value.split(","))


def split_patterns(value: str) -> list[str]:
    """The items of a comma-separated list of patterns (``excluded_urls``, header names)."""
    return [item.strip() for item in value.split(",") if item.strip()]


def _check_patterns(value: str, what: str) -> str:
    """Comma-separated regular expressions, each compiled once to check it."""
    import re

    for pattern in split_patterns(value):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is no regular expression of {what}: {exc}") from None
    return value


def _one_of(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"expected one of {', '.join(allowed)}, got {value!r}")
    return value


def _positive(value: int) -> int:
    if value <= 0:
        raise ValueError(f"expected a positive number, got {value}")
    return value


_CHECKS: Final[dict[str, Callable[[Any], Any]]] = {
    "endpoint": _check_endpoint,
    "flush_interval_ms": _positive,
    "flush_timeout_ms": lambda v: v if v >= 0 else _positive(v),
    "batch_events": _positive,
    "queue_batches": _positive,
    "heartbeat_ms": _positive,
    "sample_interval_ms": lambda v: v if v >= 0 else _positive(v),
    "sample_mode": lambda v: _one_of(v, SAMPLE_MODES),
    "task_sequences": lambda v: _one_of(v, TASK_SEQUENCES),
    "max_threads_per_tick": _positive,
    "spool_bytes": lambda v: v if v >= 0 else _positive(v),
    "max_inflight_batches": _positive,
    "resend_ms": _positive,
    "max_buffered_bytes": _positive,
    "excluded_urls": lambda v: _check_patterns(v, "a URL"),
    "capture_server_request_headers": lambda v: _check_patterns(v, "a header name"),
    "capture_server_response_headers": lambda v: _check_patterns(v, "a header name"),
    "capture_client_request_headers": lambda v: _check_patterns(v, "a header name"),
    "capture_client_response_headers": lambda v: _check_patterns(v, "a header name"),
}


def _convert(name: str, raw: Any, expected: type) -> Any:
    if expected is bool:
        value = _parse_bool(raw) if isinstance(raw, str) else raw
        if not isinstance(value, bool):
            raise TypeError(f"expected true or false, got {raw!r}")
        return value
    if expected is int:
        value = int(raw) if isinstance(raw, str) else raw
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"expected an integer, got {raw!r}")
        return _CHECKS.get(name, lambda v: v)(value)
    if name == "endpoint" and isinstance(raw, list | tuple):
        if not raw or not all(isinstance(item, str) for item in raw):
            raise TypeError(f"expected one or more endpoint strings, got {raw!r}")
        raw = ",".join(raw)
    if not isinstance(raw, str):
        raise TypeError(f"expected a string, got {raw!r}")
    return _CHECKS.get(name, lambda v: v)(raw)


def resolve(
    overrides: Mapping[str, Any], environ: Mapping[str, str] | None = None, *, strict: bool = True
) -> Config:
    """Build the configuration: argument > environment > default.

    A bad explicit argument raises ConfigError. A bad environment value raises too when ``strict``;
    otherwise (the tracer configuring itself lazily inside the host program) it is logged and the
    default is used, because the tracer never raises into user code."""
    env = os.environ if environ is None else environ
    config = _resolve_values(overrides, env, strict)
    if bool(config.curve_server_key) != bool(config.curve_client_key):
        message = "CURVE needs both curve_server_key and curve_client_key (`cmr keys generate`)"
        if strict:
            raise ConfigError(message)
        log.error("invoseq: %s; the repository will refuse this process", message)
    return config


#: Settings that were replaced, with what replaces them: named, they fail (or warn, from the
#: environment of a lazily configured process) with a message that says what to use instead.
_REPLACED: Final = {
    "max_buffered_events": (
        "INVOSEQ_MAX_BUFFERED_EVENTS",
        "max_buffered_events (one thread's events) was replaced by max_buffered_bytes "
        "(INVOSEQ_MAX_BUFFERED_BYTES), one bound in bytes for the whole process",
    ),
}


def _check_replaced(overrides: Mapping[str, Any], env: Mapping[str, str], strict: bool) -> None:
    for name, (variable, message) in _REPLACED.items():
        if name in overrides:
            raise ConfigError(message)
        if env.get(variable):
            if strict:
                raise ConfigError(f"environment variable {variable}: {message}")
            log.warning("invoseq: environment variable %s is ignored: %s", variable, message)


def _resolve_values(overrides: Mapping[str, Any], env: Mapping[str, str], strict: bool) -> Config:
    known = {f.name: f for f in fields(Config)}
    _check_replaced(overrides, env, strict)
    unknown = set(overrides) - set(known)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name in known:
        expected = type(getattr(Config(), name))
        if overrides.get(name) is not None:
            try:
                values[name] = _convert(name, overrides[name], expected)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"configure({name}=...): {exc}") from None
            continue
        variable = _ENV_NAMES[name]
        raw = env.get(variable)
        if not raw and name in _OTEL_ENV_NAMES:
            variable = _OTEL_ENV_NAMES[name]
            raw = env.get(variable)
        if raw is None or raw == "":
            continue
        try:
            values[name] = _convert(name, raw, expected)
        except (ValueError, TypeError) as exc:
            message = f"environment variable {variable}: {exc}"
            if strict:
                raise ConfigError(message) from None
            log.warning("invoseq: %s; using the default %r", message, getattr(Config(), name))
    return replace(Config(), **values)


def environment(config: Config) -> dict[str, str]:
    """The environment variables that give a process resolving its settings from the environment
    (a child process) the settings of ``config`` that differ from their defaults."""
    default = Config()
    variables: dict[str, str] = {}
    for item in fields(Config):
        value = getattr(config, item.name)
        if value != getattr(default, item.name):
            text = ("1" if value else "0") if isinstance(value, bool) else str(value)
            variables[_ENV_NAMES[item.name]] = text
    return variables
