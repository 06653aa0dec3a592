"""Flush on SIGTERM: a process stopped the ordinary way (containers, systemd,
``Process.terminate()``, ``Pool.terminate()``) keeps what it traced.

Where the program has left SIGTERM at its default (``SIG_DFL``), the tracer installs a handler:
on SIGTERM it puts ``SIG_DFL`` back (a second SIGTERM kills at once), shuts the tracer down (sends
what it holds, waits for the acknowledgement at most ``flush_timeout_ms``, spools the rest) and
dies by SIGTERM exactly as the process would have: exit status -15, none of the program's code
run (no ``atexit``, no ``finally``).

Design:

- **Only over SIG_DFL.** A program's own handler (or ``SIG_IGN``) is left alone: one installed
  before the tracer starts is kept, one installed after replaces ours. Such a program calls
  ``tracer.flush()`` from its handler (``Sender``'s lock is reentrant, so that cannot deadlock on
  the main thread it interrupted). PID 1 (a container's init) is left alone too: the kernel does
  not end init with a signal at its default, so neither would our re-raise.
- **Who notices.** Python runs a signal handler in the main thread between two bytecodes. A
  SIGTERM that lands in the microseconds before the main thread blocks in a system call (a pool
  worker going back to wait for its next task) would wait for that call to return, perhaps for
  ever (``Pool.terminate()`` would then hang joining the worker). So a watchdog thread (started
  with ``_thread``, blocked in ``read`` on a pipe of its own, costing nothing until a signal
  comes) does the work at once, whatever the main thread is doing: ``tracer/_sigterm.c`` puts an
  OS-level handler over CPython's for SIGTERM that writes to the pipe, then calls CPython's. Not
  the signal wakeup fd, which is the process's: asyncio and trio set their own, and trio refuses
  to start where it is taken (issue 32). The Python-level handler does the work when there is no
  watchdog (an install without a compiler), or when CPython's handler was installed again over
  ours (a program that put ours back with ``signal.signal`` after handling SIGTERM itself). The
  first to claim the SIGTERM does the work; the main thread, if it comes second, waits there.
- **The work** runs in a helper thread, waited for at most ``flush_timeout_ms`` +
  ``SPOOL_GRACE_S``: the code the handler interrupted may hold a lock the shutdown needs, which
  in the main thread would deadlock and in a helper costs at most the bound. Threads are started
  with ``_thread``, because ``threading.Thread.start`` takes a lock of ``threading`` that the
  interrupted code may hold. ``SIG_DFL`` is put back with ``signal.signal`` on the main thread,
  with libc's ``signal()`` from the watchdog (Python allows the former only on the main thread).
  Nothing raises: a ``KeyboardInterrupt`` during the wait ends it, and the process dies all the
  same (the signal is unblocked and raised in the thread doing the work).
- **The main thread.** ``signal.signal`` works only there, and the
  tracer may start from another thread's first traced call. ``arm()`` runs whenever a sender
  starts (``configure()``, or the first traced call of the process): on the main thread it
  installs at once; elsewhere it asks CPython to install on the main thread
  (``Py_AddPendingCall``, the mechanism that runs signal handlers there), which happens as soon as
  the main thread runs Python code again. A main thread blocked for good in C (``Thread.join()``)
  installs it only when it wakes: such a program calls ``tracer.configure()`` at start-up.
- **Processes.** A forked child starts with no events and no sender: right after ``os.fork()``
  it puts SIGTERM back at its default and drops the pipe it shares with its parent (SIGTERM is
  blocked around the fork meanwhile: a child's signal must not wake the parent's watchdog). At its
  first traced call its tracer starts a fresh sender and installs handler and watchdog again, so
  a forked pool worker ended by ``Pool.terminate()`` flushes its own events, and one that never
  traced dies at once as before. ``exec`` resets handlers: a spawned child installs its own when
  its tracer starts.
- **Undone** by ``disarm()``: ``shutdown()`` (so SIGTERM during the flush at exit kills at once),
  ``configure(enabled=False)`` and ``configure(flush_on_sigterm=False)`` put ``SIG_DFL`` back if
  our handler is still the one installed, and stop the watchdog. ``uninstrument()`` does not:
  the handler belongs to the sender, which ``@traced`` keeps using after it.
"""

from __future__ import annotations

import _thread
import contextlib
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


def arm(config: Config) -> None:
    """A sender starts with ``config``: install the handler if the configuration wants it and
    SIGTERM is at its default (now on the main thread, else as soon as the main thread runs),
    or take it away if the configuration does not want it. Never raises."""
    global _wanted, _timeout_s
    _wanted = config.enabled and config.flush_on_sigterm
    _timeout_s = config.flush_timeout_ms / 1000
    _apply_soon()


def disarm() -> None:
    """The tracer stops: put SIG_DFL back if our handler is still installed, stop the watchdog.
    Never raises."""
    global _wanted
    _wanted = False
    _apply_soon()


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
            signal.signal(signal.SIGTERM, _on_sigterm)
            current = _on_sigterm
        elif not _wanted and current is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # the main thread of a subinterpreter: signals belong to the main one
        log.debug("invoseq: SIGTERM handler not installed (not the main interpreter)")
        return
    if _wanted and current is _on_sigterm and _watchdog is None and _sigterm is not None:
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
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
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
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
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
    global _watchdog, _claimed
    _claimed = _thread.allocate_lock()
    watchdog, _watchdog = _watchdog, None
    with contextlib.suppress(Exception):  # the forking thread is the child's main thread
        if watchdog is not None:
            _unhook()
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if watchdog is not None:
        watchdog.close()
    _unblock_after_fork()


forking.on_fork(
    "signals", before=_before_fork, in_parent=_unblock_after_fork, in_child=_after_fork_in_child
)
