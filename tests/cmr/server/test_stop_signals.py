"""``cmr serve`` stops on SIGINT or SIGTERM however many arrive at once: a second signal's
handler, run while the first one's holds the stop event's lock, must not wait for it."""

from __future__ import annotations

import os
import signal
import threading

from cmr.server.server import _stop_on_signals


def test_a_signal_arriving_while_the_first_is_handled_returns_at_once() -> None:
    stop = threading.Event()
    woken: list[bool] = []
    with _stop_on_signals(stop, lambda: woken.append(True)):
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)
        assert stop.is_set()
        assert woken == [True]  # the poll is woken too
        second = threading.Thread(target=handler, args=(signal.SIGTERM, None))
        # the first handler inside Event.set, holding its lock (as a nested handler finds it)
        with stop._cond:  # type: ignore[attr-defined]
            second.start()
            second.join(30)
            returned = not second.is_alive()
        second.join(30)
    assert returned, "the second signal's handler waited for the lock the first one holds"
    assert woken == [True]  # once
    assert signal.getsignal(signal.SIGTERM) is not handler  # the previous handler is back


def test_a_signal_writes_the_poll_s_pipe_before_its_python_handler_runs() -> None:
    # The Python handler may run only once the poll has begun waiting; the C-level handler
    # writing the pipe is what ends that poll.
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    stop = threading.Event()
    try:
        with _stop_on_signals(stop, lambda: None, write_fd):
            signal.raise_signal(signal.SIGTERM)
            assert os.read(read_fd, 16) == bytes([signal.SIGTERM])
            assert stop.is_set()
        assert signal.set_wakeup_fd(-1) == -1  # the previous wakeup fd (none) is back
    finally:
        os.close(read_fd)
        os.close(write_fd)
