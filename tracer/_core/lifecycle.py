"""The runtime's services that the layers below it call: flush, shut down, a child's settings.

The runtime (``tracer._runtime``) starts the sender and owns the process's tracing lifecycle; it
imports the patches and the SIGTERM handling, so they cannot import it back. They call these
instead, which the runtime fills in when it is imported. Until then there is nothing to flush
and nothing for a child to inherit.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable

    from tracer.config import Config

__all__ = ["child_settings", "config", "end_before_exit", "flush", "install", "shutdown"]


def flush(timeout_s: float | None = None) -> bool:
    """Send what is buffered and wait (bounded) for its acknowledgement."""
    return _flush(timeout_s)


def shutdown() -> bool:
    """Flush and stop recording (the configured flush timeout bounds it)."""
    return _shutdown()


def end_before_exit() -> None:
    """``shutdown`` where the process exits next without ``atexit`` (``os._exit``: a Celery or
    RQ child, a forked ``multiprocessing`` process): what it recorded is sent and the repository
    learns it ended. Never raises: a failure is counted as the tracer's own."""
    try:
        shutdown()
    except Exception as exc:
        from tracer._core import recorder

        recorder.internal_error(exc)


def child_settings() -> dict[str, str]:
    """Environment variables that make a child process trace like this one."""
    return _child_settings()


def config() -> Config:
    """The settings in force (the environment's until ``configure`` is called)."""
    return _config()


def install(
    *,
    flush: Callable[[float | None], bool],
    shutdown: Callable[[], bool],
    child_settings: Callable[[], dict[str, str]],
    config: Callable[[], Config],
) -> None:
    """The runtime's implementations (called once, when it is imported)."""
    global _flush, _shutdown, _child_settings, _config
    _flush, _shutdown, _child_settings, _config = flush, shutdown, child_settings, config


_flush: Callable[[float | None], bool] = lambda timeout_s: True  # noqa: E731 (replaced)
_shutdown: Callable[[], bool] = lambda: True  # noqa: E731 (replaced by the runtime)
_child_settings: Callable[[], dict[str, str]] = dict


def _default_config() -> Config:
    from tracer.config import Config

    return Config()


_config: Callable[[], Config] = _default_config
