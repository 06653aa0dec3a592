"""The tracer's lifecycle: configure, lazy start, shutdown at exit, and a fresh sender after fork.

Importing and decorating start nothing. The sender starts when ``configure()`` is called, or at the
first traced call of the process with the settings from the environment. ``shutdown()`` runs at
interpreter exit and is bounded by ``flush_timeout_ms`` even when no repository listens.
"""

from __future__ import annotations

import _thread
import atexit
import os
import sys

from tracer import _patching as patching
from tracer._core import decorator, forking, ids, lifecycle, recorder

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:  # the sender, the sampler and ZeroMQ load when a sender starts (_start)
    from collections.abc import Callable
    from typing import Final, Unpack

    from tracer._sampling.sampler import Sampler
    from tracer._shipping.sender import Sender
    from tracer._shipping.transport import Transport
    from tracer._stats import TracerStats
    from tracer.config import Config, Settings


def _default() -> Config:
    """The default settings (``tracer.config`` loads with the first ``configure()``, traced call
    or flush, not at import)."""
    from tracer.config import Config

    return Config()


class Runtime:
    """The tracer's cold state, in one object: the settings in force, the sender (which holds
    the sampler and the spool), whether the process shut down, the transport ``tracer.testing``
    asked for, and the senders a forked child inherited. The hot path keeps its own
    module-level state (``tracer._core``); everything here changes under ``lock``."""

    __slots__ = ("abandoned", "config", "last", "lock", "sender", "shut_down", "transport_factory")

    def __init__(self) -> None:
        self.lock = _thread.RLock()  # threading's RLock
        self.config: Config | None = None
        self.sender: Sender | None = None
        self.shut_down = False
        self.transport_factory: Callable[[Config], Transport] | None = None
        # A forked child must not touch (or collect) its parent's sockets.
        self.abandoned: list[Sender] = []
        # The most recent sender, so that stats() still reports after shutdown.
        self.last: Sender | None = None

    def after_fork_in_child(self) -> None:
        """The child's sender starts on its first event; the parent's is left alone."""
        self.lock = _thread.RLock()
        if self.sender is not None:
            self.abandoned.append(self.sender)
        self.sender = self.last = None


RUNTIME: Final = Runtime()


def set_transport_factory(
    factory: Callable[[Config], Transport] | None,
) -> Callable[[Config], Transport] | None:
    """Make the senders started from now on use ``factory`` for their transport (None: ZeroMQ to
    the configured endpoints); returns the one it replaces. ``tracer.testing`` uses it."""
    previous, RUNTIME.transport_factory = RUNTIME.transport_factory, factory
    return previous


def _start(config: Config) -> None:
    """Start a sender for ``config`` (caller holds the lock)."""
    from tracer import _signals as signals

    signals.arm(config)  # flush on SIGTERM (or no longer, with enabled=False): tracer/_signals.py
    if not config.enabled:
        return
    from tracer._sampling.sampler import Sampler
    from tracer._shipping.sender import Sender

    factory = RUNTIME.transport_factory

    def transports() -> dict[str, Transport]:
        """One transport per repository node (``endpoint`` may list several)."""
        if factory is None:
            from tracer._shipping.transport import open_zmq

            curve = (config.curve_server_key, config.curve_client_key)
            window = config.max_inflight_batches
            opened = open_zmq(config.endpoints, window, curve if curve[0] else None)
            return dict(zip(config.endpoints, opened, strict=True))
        return {config.endpoint: factory(config)}

    def own_threads() -> set[int]:
        """The tracer's own threads, and those doing its work now (starting it, waiting in a
        flush: a forked child's or a task's after its work): the sampler never samples them."""
        idents = (sender.ident, sampler.ident if sampler is not None else None)
        return {ident for ident in idents if ident is not None} | sender.tracer_work.threads

    sampler: Sampler | None = None
    if config.sample_interval_ms > 0:
        sampler = Sampler(
            interval_ms=config.sample_interval_ms,
            mode=config.sample_mode,
            only_active=config.sample_only_active,
            paced=config.sample_pacing,
            max_threads_per_tick=config.max_threads_per_tick,
            exclude=own_threads,
        )
    sender = Sender(config, transports, sampler)
    sender.start()
    RUNTIME.sender = RUNTIME.last = sender


def configure(**settings: Unpack[Settings]) -> Config:
    """Apply settings (argument > environment > default) and (re)start the sender.

    Events recorded before the call are sent through the new configuration. Raises ConfigError
    for a setting the tracer cannot use."""
    from tracer.config import resolve

    config = resolve(settings, strict=True)
    _check_key_files(config)
    with RUNTIME.lock:
        _stop_sender(config.flush_timeout_ms, final=False)  # the process goes on
        RUNTIME.config = config
        RUNTIME.shut_down = False
        decorator.set_enabled(config.enabled)
        decorator.set_max_buffered(config.max_buffered_bytes)
        patching.use(config)
        _start(config)
    if config.instrument:
        patching.instrument()
    return config


def _check_key_files(config: Config) -> None:
    """Raise ConfigError, in one line, for CURVE key files the sender could not use (a lazily
    started tracer logs the same line from its sender instead: it never raises into the
    program)."""
    if not (config.enabled and config.curve_server_key and config.curve_client_key):
        return
    if RUNTIME.transport_factory is not None:  # tracer.testing's: no ZeroMQ
        return
    from tracer._shipping.transport import KeyFileError, load_curve
    from tracer.config import ConfigError

    try:
        load_curve((config.curve_server_key, config.curve_client_key))
    except KeyFileError as exc:
        raise ConfigError(str(exc)) from None


def _stop_sender(timeout_ms: int, *, final: bool = True) -> bool:
    sender, RUNTIME.sender = RUNTIME.sender, None
    if sender is None:
        return True
    return sender.stop(timeout_ms / 1000, final=final)


def ensure_started() -> None:
    """Start the sender with the environment's settings if nothing started it yet (first event)."""
    if RUNTIME.sender is not None or RUNTIME.shut_down:
        return
    with RUNTIME.lock:
        if RUNTIME.sender is not None or RUNTIME.shut_down:
            return
        config = RUNTIME.config
        if config is None:
            from tracer.config import resolve

            config = RUNTIME.config = resolve({}, strict=False)
            decorator.set_enabled(config.enabled)
            decorator.set_max_buffered(config.max_buffered_bytes)
            patching.use(config)
            if config.instrument and not patching.instrumented():  # tracer run's bootstrap did
                patching.instrument()
        _start(config)


def shutdown(timeout_s: float | None = None) -> bool:
    """Flush and stop: send what is buffered, wait for the repository's acknowledgement (at most
    ``timeout_s``, default the configured flush timeout), and stop recording. True when everything
    sent was acknowledged. Runs at interpreter exit; calling it again is harmless."""
    with RUNTIME.lock:
        signals = sys.modules.get("tracer._signals")  # armed only by a sender's start
        if signals is not None:
            signals.disarm()  # SIGTERM at its default again: one during the flush kills at once
        RUNTIME.shut_down = True
        decorator.set_enabled(False)
        if RUNTIME.sender is None:  # nothing to flush (and no settings to load at exit)
            return True
        config = RUNTIME.config or _default()
        timeout_ms = config.flush_timeout_ms if timeout_s is None else int(timeout_s * 1000)
        return _stop_sender(timeout_ms)


def flush(timeout_s: float | None = None) -> bool:
    """Send what is buffered now and wait (bounded) for its acknowledgement; keeps tracing."""
    with RUNTIME.lock:
        sender = RUNTIME.sender
        config = RUNTIME.config or _default()
    if sender is None:
        return recorder.buffered() == 0
    return sender.flush(config.flush_timeout_ms / 1000 if timeout_s is None else timeout_s)


def unacknowledged_events() -> int:
    """Events recorded and not yet acknowledged: in the threads' lists, queued, or sent and
    waiting (approximate while the sender works): what a flush has left to do."""
    sender = RUNTIME.sender
    delivery = sender.delivery if sender is not None else None
    waiting = delivery.unacknowledged_events() if delivery is not None else 0
    return recorder.buffered() + waiting


def acknowledged_events() -> int:
    """Events the repository acknowledged so far, of the current (or last) sender."""
    sender = RUNTIME.sender or RUNTIME.last
    delivery = sender.delivery if sender is not None else None
    return delivery.counters.sent_events if delivery is not None else 0


def child_settings() -> dict[str, str]:
    """Environment variables that make a child process trace like this one (same repository,
    same settings, same instrumentation; CURVE key files, not keys)."""
    config = RUNTIME.config or _default()
    from tracer.config import ENV_ENDPOINT, ENV_HEARTBEAT_MS, ENV_INSTRUMENT, environment

    settings = environment(config)  # every setting that is not the default
    settings.update({ENV_ENDPOINT: config.endpoint, ENV_HEARTBEAT_MS: str(config.heartbeat_ms)})
    settings.pop(ENV_INSTRUMENT, None)
    if patching.instrumented():
        settings[ENV_INSTRUMENT] = "1"
    return settings


def current_config() -> Config:
    """The settings in force: those ``configure`` set, else the environment's."""
    config = RUNTIME.config
    if config is not None:
        return config
    from tracer.config import resolve

    return resolve({}, strict=False)


def stats() -> TracerStats:
    """Counters of the current (or last) sender: what was acknowledged, spooled, dropped."""
    from tracer._stats import TracerStats

    sender = RUNTIME.sender or RUNTIME.last
    delivery = sender.delivery if sender else None
    if delivery is not None:
        counters = delivery.counters
    else:
        from tracer._shipping.delivery import Counters

        counters = Counters()
    spool = delivery.spool if delivery else None
    return TracerStats(
        sent_events=counters.sent_events,
        dropped_events=counters.dropped_events,
        spooled_batches=counters.spooled_batches,
        spooled_events=delivery.spooled_events(ids.identity().puid) if delivery else 0,
        acked_batches=counters.acked_batches,
        resent_batches=counters.resent_batches,
        buffered_events=recorder.buffered(),
        internal_errors=recorder.internal_errors(),
        spool_lost_events=spool.lost_events if spool else 0,
        spool_lost_records=spool.lost_records if spool else 0,
        acked_by_endpoint=delivery.nodes.acked_by_endpoint() if delivery else {},
    )


#: The variables a parent's sequence comes in (``propagation.TRACEPARENT`` and ``TRACESTATE``,
#: upper case, as ``propagation.extract_env`` reads them; a test keeps them equal).
_CARRIED: Final = ("TRACEPARENT", "TRACESTATE")


def adopt_environment(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """A child process started inside a sequence carries it in ``TRACEPARENT`` (the subprocess
    patch puts it there): the main thread continues that sequence. The variables are consumed,
    so this process's own children get fresh hand-offs rather than inheriting the same one.
    Without them (most processes) nothing loads: neither the propagation nor ``threading``."""
    if not any(name in environ for name in _CARRIED):
        return False
    import threading

    from tracer import propagation
    from tracer._core import context

    if threading.current_thread() is not threading.main_thread():
        return False
    value = propagation.extract_env(environ)
    for header in (propagation.TRACEPARENT, propagation.TRACESTATE):
        environ.pop(header.upper(), None)
    if value is None:
        return False
    context.current.set(value)
    return True


recorder.on_new_thread = ensure_started
forking.on_fork("runtime", in_child=RUNTIME.after_fork_in_child)
lifecycle.install(
    flush=flush, shutdown=shutdown, child_settings=child_settings, config=current_config
)
atexit.register(shutdown)
adopt_environment()
