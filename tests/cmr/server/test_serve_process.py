"""`cmr serve` as a process: it announces its address, stores what it is sent and stops cleanly
on SIGTERM or SIGINT; a stop or a signal (even one another thread catches) ends its poll at
once; an address in use, an unusable repository or a malformed endpoint fails in one line."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq

from cmr.server.server import ServerThread, run_server
from cmr.store import Store, open_store
from cmr.store.memory.store import MemoryStore
from invoseq import wire
from tests.cmr.server.conftest import (
    SEQ,
    BatchFactory,
    Encode,
    events,
    finish,
    request,
    start_server_process,
)
from tests.support import READY_PREFIX, read_line

pytestmark = pytest.mark.system


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_server_process_announces_stores_and_stops_on_signal(
    tmp_path: Path,
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
    stop_signal: signal.Signals,
) -> None:
    db = tmp_path / "repo" / "cmr.sqlite"
    bind = f"ipc://{tmp_path}/cmr.sock"
    process = start_server_process("--bind", bind, "--db", str(db))
    try:
        assert read_line(process, 30) == f"{READY_PREFIX}{bind}\n"
        client = connect(bind)
        assert request(client, encode_batch(make_batch(7, 1, events()))) == wire.Ack(7, 1)
        process.send_signal(stop_signal)
    finally:
        code, out, err = finish(process)

    assert (code, out, err) == (0, "", "")
    store = open_store(str(db), readonly=True)
    try:
        assert [r.iid for r in store.load_sequence(SEQ).invocations] == [1]
    finally:
        store.close()


#: A poll timeout no test waits out: a stop must end the poll at once, not at its timeout.
ENDLESS_POLL_MS = 3_600_000


def test_a_stop_ends_the_servers_poll_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tracer run waits for its repository to stop at the end of every run: a stop that waited
    # for the poll's timeout cost each run that timeout.
    monkeypatch.setattr("cmr.server.server.POLL_MS", ENDLESS_POLL_MS)
    server = ServerThread(store, "tcp://127.0.0.1:*")
    server.stop(timeout=30)  # raises when the thread is still polling


def stopped_endless_poll_server(
    tmp_path: Path, stop: Callable[[subprocess.Popen[str]], None], prelude: str = ""
) -> tuple[int, str, str]:
    """Start `cmr serve` with an endless poll (after running ``prelude`` in it), ``stop`` it
    once it listens, and return its exit code, stdout and stderr: at most 30 s after the stop,
    where the poll itself lasts an hour."""
    bind = f"ipc://{tmp_path}/cmr.sock"
    code = (
        f"{prelude}import sys, cmr.server.server as server; "
        f"server.POLL_MS = {ENDLESS_POLL_MS}; "
        "from cmr.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, "serve", "--bind", bind, "--db", str(tmp_path / "r.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert read_line(process, 30) == f"{READY_PREFIX}{bind}\n"
        stop(process)
    finally:
        code_, out, err = finish(process)
    return code_, out, err


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_server_process_poll_at_once(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    stopped = stopped_endless_poll_server(
        tmp_path, lambda process: process.send_signal(stop_signal)
    )
    assert stopped == (0, "", "")


#: A thread of the server process that sends itself SIGTERM once a line arrives on stdin.
SIGNALS_ITSELF = """import signal, sys, threading
def deliver():
    sys.stdin.readline()
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
threading.Thread(target=deliver, daemon=True).start()
"""


def test_a_signal_reaching_another_thread_ends_the_server_process_poll(tmp_path: Path) -> None:
    # The kernel gives a process's signal to any thread that does not block it. Caught by
    # another thread, the signal cannot interrupt the main thread's poll, and the Python
    # handler waits for that poll to return: as when a signal lands just before the poll
    # begins (CI: a `cmr serve` still polling 30 s after its SIGTERM).
    def ask_the_thread(process: subprocess.Popen[str]) -> None:
        assert process.stdin is not None
        process.stdin.write("signal\n")
        process.stdin.flush()

    stopped = stopped_endless_poll_server(tmp_path, ask_the_thread, prelude=SIGNALS_ITSELF)
    assert stopped == (0, "", "")


def test_server_process_reports_an_address_in_use(store: Store, server: ServerThread) -> None:
    process = start_server_process("--bind", server.endpoint, "--memory")

    code, out, err = finish(process)

    assert (code, out) == (1, "")
    assert err == f"cmr: cannot listen on {server.endpoint}: Address already in use\n"


def test_server_process_reports_an_unusable_repository(tmp_path: Path) -> None:
    process = start_server_process("--bind", "tcp://127.0.0.1:*", "--db", str(tmp_path))

    code, out, err = finish(process)

    assert (code, out) == (1, "")
    assert err.startswith(f"cmr: cannot open repository {tmp_path}")
    assert err.count("\n") == 1


def test_run_server_refuses_a_malformed_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    store = MemoryStore()

    assert run_server(store, "nonsense") == 1

    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "cmr: cannot listen on nonsense: Invalid argument "
        "(expected tcp://HOST:PORT or ipc://PATH)\n"
    )
    with pytest.raises(Exception, match="closed"):
        store.stats()  # run_server owns the store it was given, even when it cannot start
