"""Flush on SIGTERM: a process stopped the ordinary way (containers, systemd,
``Process.terminate()``, ``Pool.terminate()``) keeps what it traced.

More in docs/architecture.md, "tracer/_signals.py".
"""

from __future__ import annotations

import _thread
import contextlib
import functools
import logging
import os
import signal
import threading
from types import FrameType, ModuleType
from typing import Any, Final

from tracer._core import forking, lifecycle, recorder
from tracer.config import Config

log = logging.getLogger("tracer")

#: Beyond the flush timeout, how long the tracer may take to write what the repository did not
#: acknowledge to the spool before the process dies anyway.
SPOOL_GRACE_S: Final = 1.0
_STOP: Final = b"\0"  # written to the pipe to stop the watchdog (no signal has number 0)
_SIGTERM: Final = bytes([signal.SIGTERM])

_wanted = False  # the tracer runs with flush_on_sigterm: our handler should be installed
_timeout_s = Config().flush_timeout_ms / 1000  # the running configuration's flush timeout
_claimed = _thread.allocate_lock()  # taken by whichever of handler and watchdog acts first
#: (callback, Py_AddPendingCall) and libc's signal(): built once, kept alive.
_pending: tuple[Any, Any] | None = None
_libc_signal: Any = None
#: SIGTERM's OS-level handler that wakes the watchdog (``tracer/_sigterm.c``); None without a
#: compiler at install: the Python-level handler alone.
_sigterm: ModuleType | None
try:
    from tracer import _sigterm
except ImportError:  # pragma: no cover - built wherever a compiler is
    _sigterm = None


class _Watchdog:
    """The pipe SIGTERM writes to (``tracer/_sigterm.c``) and the thread that reads it."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)  # a signal handler must never block on it
        self._finished = _thread.allocate_lock()
        self._finished.acquire()

    def start(self) -> None:
        _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        try:
            while True:
                data = os.read(self.read_fd, 512)
                if not data or _STOP in data:
                    return
                if _SIGTERM in data and signal.getsignal(signal.SIGTERM) is _on_sigterm:
                    _terminate(on_main=False)
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                recorder.internal_error(exc)
        finally:
            self._finished.release()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.write_fd, _STOP)
        self._finished.acquire(timeout=5.0)
        self.close()

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


_watchdog: _Watchdog | None = None

#: ``signal.signal`` as the tracer found it: the tracer's own changes go straight to it, never
#: through ``_program_sets_handler`` (which would re-arm inside ``_die``).
_set_handler = signal.signal


def _program_sets_handler(signalnum: Any, handler: Any) -> Any:
    """``signal.signal`` while the tracer is armed: the program's call, then, when it put
    SIGTERM back at its default, the tracer's handler over it again (a server that handles
    SIGTERM while it stops, then restores the default and raises SIGTERM again to die by it, as
    uvicorn's workers do, would otherwise die with the tracer's last events unsent)."""
    previous = _set_handler(signalnum, handler)
    if _wanted and signalnum == signal.SIGTERM and _is_default(handler):
        try:
            _apply()  # on the main thread: signal.signal() succeeded
        except Exception as exc:
            recorder.internal_error(exc)
    return previous


functools.update_wrapper(_program_sets_handler, _set_handler)


def _is_default(handler: object) -> bool:
    return isinstance(handler, int) and handler == signal.SIG_DFL


def arm(config: Config) -> None:
    """A sender starts with ``config``: install the handler if the configuration wants it and
    SIGTERM is at its default (now on the main thread, else as soon as the main thread runs),
    or take it away if the configuration does not want it. Never raises."""
    global _wanted, _timeout_s
    _wanted = config.enabled and config.flush_on_sigterm
    _timeout_s = config.flush_timeout_ms / 1000
    _watch_the_programs_handlers(_wanted)
    _apply_soon()


def disarm() -> None:
    """The tracer stops: put SIG_DFL back if our handler is still installed, stop the watchdog.
    Never raises."""
    global _wanted
    _wanted = False
    _watch_the_programs_handlers(False)
    _apply_soon()


def _watch_the_programs_handlers(watch: bool) -> None:
    """Put ``_program_sets_handler`` in ``signal.signal``'s place, or the original back (where
    it is still ours: a wrapper the program put over it stays)."""
    current = signal.signal
    if watch and current is _set_handler:
        setattr(signal, "signal", _program_sets_handler)  # noqa: B010 (mypy: a module's function)
    elif not watch and current is _program_sets_handler:
        setattr(signal, "signal", _set_handler)  # noqa: B010


def installed() -> bool:
    """True while our handler is SIGTERM's handler."""
    return signal.getsignal(signal.SIGTERM) is _on_sigterm


def watching() -> bool:
    """True while the watchdog reads the pipe SIGTERM writes to."""
    return _watchdog is not None


def _apply_soon() -> None:
    try:
        current = signal.getsignal(signal.SIGTERM)
        if _wanted and current is _on_sigterm and _watchdog is not None:
            return
        if not _wanted and current is not _on_sigterm and _watchdog is None:
            return
        if _wanted and current is not _on_sigterm and current != signal.SIG_DFL:
            return  # the program's own handler (or SIG_IGN): never replaced
        if _on_main_thread():
            _apply()
        else:
            _schedule()
    except Exception as exc:
        recorder.internal_error(exc)


def _apply() -> None:
    """On the main thread: make SIGTERM's handler and the watchdog what ``_wanted`` says,
    looking again at what is installed now (the program may have installed its own since)."""
    global _watchdog, _libc_signal
    current = signal.getsignal(signal.SIGTERM)
    try:
        if _wanted and current == signal.SIG_DFL and os.getpid() != 1:
            _set_handler(signal.SIGTERM, _on_sigterm)
            current = _on_sigterm
        elif not _wanted and current is _on_sigterm:
            _set_handler(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # the main thread of a subinterpreter: signals belong to the main one
        log.debug("invoseq: SIGTERM handler not installed (not the main interpreter)")
        return
    if _wanted and current is _on_sigterm and _watchdog is not None and _sigterm is not None:
        if not _sigterm.hooked():  # ours put back over a program's: wake the watchdog again
            _sigterm.hook(_watchdog.write_fd)
    elif _wanted and current is _on_sigterm and _watchdog is None and _sigterm is not None:
        if _libc_signal is None:
            try:
                _libc_signal = _libc_signal_function()
            except (ImportError, AttributeError, OSError):
                return  # no ctypes or no libc signal(): the Python-level handler alone
        watchdog = _Watchdog()
        if not _sigterm.hook(watchdog.write_fd):  # not CPython's handler under ours: none
            watchdog.close()
            return
        watchdog.start()
        _watchdog = watchdog
    elif not _wanted and _watchdog is not None:
        watchdog, _watchdog = _watchdog, None
        _unhook()
        watchdog.stop()


def _unhook() -> None:
    """SIGTERM no longer writes to the pipe (and CPython's handler is back if ours was there):
    before the pipe is closed, so that its number, reused, is never written to."""
    if _sigterm is not None:
        _sigterm.unhook()


def _on_main_thread() -> bool:
    return threading.get_ident() == threading.main_thread().ident


def _schedule() -> None:
    """Have the main thread run ``_apply`` when it next runs Python code (CPython's pending
    calls, run only by the main thread). Without ctypes (another interpreter), the handler is
    installed by the next sender started on the main thread."""
    global _pending
    if _pending is None:
        try:
            import ctypes
        except ImportError:
            log.debug("invoseq: no ctypes, the SIGTERM handler waits for the main thread")
            return
        callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
        prototype = ctypes.PYFUNCTYPE(ctypes.c_int, callback_type, ctypes.c_void_p)
        add = prototype(("Py_AddPendingCall", ctypes.pythonapi))
        _pending = (callback_type(_run_pending), add)
    callback, add = _pending
    if add(callback, None) != 0:  # the queue of pending calls is full: rare, and not fatal
        log.debug("invoseq: could not schedule the SIGTERM handler on the main thread")


def _run_pending(_arg: object) -> int:
    """The pending call: runs on the main thread, must return 0 and never raise."""
    try:
        if _on_main_thread():
            _apply()
    except BaseException as exc:  # a pending call that fails would raise SystemError in the program
        with contextlib.suppress(BaseException):
            recorder.internal_error(exc)
    return 0


# -- SIGTERM -------------------------------------------------------------------------------------


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler (main thread)."""
    _terminate(on_main=True)


def _terminate(*, on_main: bool) -> None:
    """Shut the tracer down (bounded), then die by SIGTERM as if the tracer were not there."""
    budget_s = _timeout_s + SPOOL_GRACE_S
    with contextlib.suppress(BaseException):  # KeyboardInterrupt while waiting: end all the same
        if not _claimed.acquire(blocking=False):
            if on_main:  # the watchdog is at work: the program goes no further meanwhile
                _wait(budget_s)  # (the watchdog ends it by dying)
                _die()
            return
        _reset_to_default(on_main)  # a second SIGTERM kills at once
        _shut_down_within(budget_s)
    _die()


def _reset_to_default(on_main: bool) -> None:
    if on_main:
        _set_handler(signal.SIGTERM, signal.SIG_DFL)
    elif _libc_signal is not None:  # built with the watchdog, before any signal came
        _libc_signal(signal.SIGTERM, None)  # SIG_DFL is NULL


def _libc_signal_function() -> Any:
    """libc's ``signal()``, which any thread may call (``signal.signal`` only the main one)."""
    import ctypes

    prototype = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
    return prototype(("signal", ctypes.CDLL(None)))


def _wait(seconds: float) -> None:
    """Sleep in C, whatever the program did to ``time.sleep``."""
    lock = _thread.allocate_lock()
    lock.acquire()
    lock.acquire(timeout=seconds)


def _shut_down_within(budget_s: float) -> None:
    """Run the runtime's shutdown in a helper thread and wait for it at most ``budget_s``."""
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(_shut_down, (done,))
    done.acquire(timeout=budget_s)


def _shut_down(done: _thread.LockType) -> None:
    try:
        lifecycle.shutdown()
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            recorder.internal_error(exc)
    finally:
        done.release()


def _die() -> None:
    """End the process by SIGTERM at its default, raised in this thread. Were it still alive
    after (SIGTERM at its default does not end it), the program goes on, as it would have."""
    if _on_main_thread():
        with contextlib.suppress(BaseException):
            _set_handler(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(BaseException):  # a blocked SIGTERM would wait: unblock it first
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    with contextlib.suppress(BaseException):
        signal.raise_signal(signal.SIGTERM)


# -- fork ----------------------------------------------------------------------------------------

_fork_mask: set[int | signal.Signals] | None = None


def _before_fork() -> None:
    """SIGTERM waits while the child still shares our pipe (it would wake our watchdog)."""
    global _fork_mask
    if _watchdog is not None:
        with contextlib.suppress(Exception):
            _fork_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _unblock_after_fork() -> None:
    global _fork_mask
    mask, _fork_mask = _fork_mask, None
    if mask is not None and signal.SIGTERM not in mask:
        with contextlib.suppress(Exception):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _after_fork_in_child() -> None:
    """The child has no events and no sender yet: SIGTERM goes back to its default, and the
    pipe shared with the parent is dropped (the parent's watchdog thread is not in the child).
    The child's tracer installs both again when it starts, on the child's first traced call."""
    global _watchdog, _claimed, _wanted
    _claimed = _thread.allocate_lock()
    _wanted = False  # until the child's own sender starts (``arm``)
    watchdog, _watchdog = _watchdog, None
    with contextlib.suppress(Exception):  # the forking thread is the child's main thread
        if watchdog is not None:
            _unhook()
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            _set_handler(signal.SIGTERM, signal.SIG_DFL)
    if watchdog is not None:
        watchdog.close()
    _unblock_after_fork()


forking.on_fork(
    "signals", before=_before_fork, in_parent=_unblock_after_fork, in_child=_after_fork_in_child
)
