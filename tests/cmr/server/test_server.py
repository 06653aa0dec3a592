"""The repository server over real ZeroMQ sockets: what it stores, acknowledges and refuses."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from zmq.utils.monitor import recv_monitor_message

from cmr.server.groups import GROUP_BATCHES
from cmr.server.ingest import Ingest
from cmr.server.server import HARD_LIMIT_FACTOR, ServerThread, run_server
from cmr.store import Store, open_store
from cmr.store.base import Outcome
from cmr.store.memory.store import MemoryStore
from cmr.store.sqlite.store import SQLiteStore
from invoseq import wire
from tests.cmr.store.wal import COPIED_BYTES, big_batches, wal_frames
from tests.support import READY_PREFIX, read_line

pytestmark = pytest.mark.system

BatchFactory = Callable[..., wire.Batch]
Encode = Callable[[wire.Batch], list[bytes]]
#: How long a test waits for what must happen (generous: a loaded CI machine).
PATIENCE_S = 60.0

MAX_FRAME = 4096
TIMEOUT_MS = 10_000
SEQ = bytes.fromhex("5e9" + "0" * 29)


def events() -> dict[int, list[wire.Event]]:
    return {1: [wire.Start(1, 0, 0, 1, 100, SEQ), wire.End(1, 200)]}


def receive_ack(sock: zmq.Socket[bytes]) -> wire.Ack:
    assert sock.poll(TIMEOUT_MS), "no reply from the server"
    header, body = sock.recv_multipart()
    assert header == wire.ACK_HEADER
    return msgspec.msgpack.decode(body, type=wire.Ack)


def request(sock: zmq.Socket[bytes], frames: list[bytes]) -> wire.Ack:
    sock.send_multipart(frames)
    return receive_ack(sock)


@pytest.fixture(name="store")
def fixture_store() -> Iterator[Store]:
    store = MemoryStore()
    yield store
    store.close()


@pytest.fixture(name="server")
def fixture_server(store: Store) -> Iterator[ServerThread]:
    with ServerThread(store, "tcp://127.0.0.1:*", max_frame_bytes=MAX_FRAME) as server:
        yield server


@pytest.fixture(name="connect")
def fixture_connect() -> Iterator[Callable[[str], zmq.Socket[bytes]]]:
    """``connect(endpoint)``: a DEALER like a traced process's, closed after the test."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sockets: list[zmq.Socket[bytes]] = []

    def connect(endpoint: str) -> zmq.Socket[bytes]:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(endpoint)
        sockets.append(sock)
        return sock

    yield connect
    for sock in sockets:
        sock.close()
    context.term()


@pytest.fixture(name="client")
def fixture_client(
    server: ServerThread, connect: Callable[[str], zmq.Socket[bytes]]
) -> zmq.Socket[bytes]:
    return connect(server.endpoint)


# -- accepted batches -----------------------------------------------------------------------


def test_valid_batch_is_stored_then_acknowledged(
    store: Store, client: zmq.Socket[bytes], make_batch: BatchFactory, encode_batch: Encode
) -> None:
    ack = request(client, encode_batch(make_batch(7, 1, events())))

    assert ack == wire.Ack(7, 1)
    assert [r.iid for r in store.load_sequence(SEQ).invocations] == [1]


def test_resent_batch_is_acknowledged_again_but_stored_once(
    store: Store, client: zmq.Socket[bytes], make_batch: BatchFactory, encode_batch: Encode
) -> None:
    frames = encode_batch(make_batch(7, 1, events()))

    assert request(client, frames) == request(client, frames) == wire.Ack(7, 1)
    stats = store.stats()
    assert (stats.batches, stats.duplicate_batches, stats.events) == (1, 1, 2)


def test_each_sender_gets_its_own_acknowledgements(
    server: ServerThread,
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    first, second = connect(server.endpoint), connect(server.endpoint)
    first.send_multipart(encode_batch(make_batch(7, 1, events())))
    second.send_multipart(encode_batch(make_batch(8, 1, events())))

    assert receive_ack(second) == wire.Ack(8, 1)
    assert receive_ack(first) == wire.Ack(7, 1)


class HeldStore(MemoryStore):
    """A memory store whose first write waits until the test lets it go: batches sent
    meanwhile queue on the server's socket, and are stored in groups."""

    def __init__(self) -> None:
        super().__init__()
        self.busy = threading.Event()
        self.release = threading.Event()
        self.groups: list[int] = []

    def ingest_many(
        self,
        batches: Sequence[wire.Batch],
        received_ns: int,
        bodies: Sequence[bytes] | None = None,
    ) -> list[Outcome]:
        self.groups.append(len(batches))
        self.busy.set()
        assert self.release.wait(30), "the test never released the store"
        return super().ingest_many(batches, received_ns, bodies)


def test_batches_that_queue_while_the_store_is_busy_are_each_acked_to_their_sender(
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    store = HeldStore()
    try:
        with ServerThread(store, "tcp://127.0.0.1:*") as server:
            senders = {7: connect(server.endpoint), 8: connect(server.endpoint)}
            senders[7].send_multipart(encode_batch(make_batch(7, 0, events())))
            assert store.busy.wait(30), "the server never stored the first batch"
            for batch_no in range(1, 11):  # these wait on the socket meanwhile
                for puid, sock in senders.items():
                    sock.send_multipart(encode_batch(make_batch(puid, batch_no, events())))
            store.release.set()
            acked = {
                puid: [receive_ack(sock) for _ in range(11 if puid == 7 else 10)]
                for puid, sock in senders.items()
            }
        assert acked[7] == [wire.Ack(7, n) for n in range(11)]
        assert acked[8] == [wire.Ack(8, n) for n in range(1, 11)]
        assert sum(store.groups) == 21  # every batch stored once
        assert max(store.groups) <= GROUP_BATCHES
        assert store.stats().batches == 21
    finally:
        store.close()


# -- refused frames -------------------------------------------------------------------------


def valid_body(batch: wire.Batch) -> bytes:
    return msgspec.msgpack.encode(batch)


def altered_body(batch: wire.Batch, change: Callable[[list[Any]], None]) -> bytes:
    fields = msgspec.to_builtins(batch)
    change(fields)
    return msgspec.msgpack.encode(fields)


def _set(path: tuple[int, ...], value: Any) -> Callable[[list[Any]], None]:
    def change(fields: list[Any]) -> None:
        target = fields
        for index in path[:-1]:
            target = target[index]
        target[path[-1]] = value

    return change


# Each case: the reason it is counted under, and the frames built from a valid batch.
BAD_FRAMES: dict[str, tuple[str, Callable[[wire.Batch], list[bytes]]]] = {
    "not invoseq": ("garbage", lambda b: [b"hello", b"world"]),
    "empty frames": ("garbage", lambda b: [b"", b""]),
    "short header": ("garbage", lambda b: [wire.MAGIC, valid_body(b)]),
    "long header": ("garbage", lambda b: [wire.BATCH_HEADER + b"!", valid_body(b)]),
    "other protocol version": (
        "version",
        lambda b: [wire.MAGIC + bytes((wire.PROTOCOL_VERSION + 1, wire.KIND_BATCH)), valid_body(b)],
    ),
    "an ack sent to the server": ("kind", lambda b: [wire.ACK_HEADER, valid_body(b)]),
    "header alone": ("frames", lambda b: [wire.BATCH_HEADER]),
    "extra frame": ("frames", lambda b: [wire.BATCH_HEADER, valid_body(b), b"extra"]),
    "truncated body": ("decode", lambda b: [wire.BATCH_HEADER, valid_body(b)[:-3]]),
    "body not msgpack": ("decode", lambda b: [wire.BATCH_HEADER, b"\xc1\xc1\xc1"]),
    "puid is a string": ("decode", lambda b: [wire.BATCH_HEADER, altered_body(b, _set((0,), "7"))]),
    "negative batch number": (
        "decode",
        lambda b: [wire.BATCH_HEADER, altered_body(b, _set((1,), -1))],
    ),
    "15-byte sequence id": (
        "decode",
        lambda b: [wire.BATCH_HEADER, altered_body(b, _set((5, 0, 1, 0, 6), b"x" * 15))],
    ),
    "unknown event tag": (
        "decode",
        lambda b: [wire.BATCH_HEADER, altered_body(b, _set((5, 0, 1, 1, 0), 9))],
    ),
    "time overflows wall clock": (
        "decode",
        lambda b: [wire.BATCH_HEADER, altered_body(b, _set((5, 0, 1, 1, 2), 2**63 - 1))],
    ),
    "frame over the limit": ("oversized", lambda b: [wire.BATCH_HEADER, b"\0" * (MAX_FRAME + 1)]),
}


@pytest.mark.parametrize("case", BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
def test_bad_frames_are_counted_and_refused_and_the_server_carries_on(
    store: Store,
    client: zmq.Socket[bytes],
    make_batch: BatchFactory,
    encode_batch: Encode,
    case: tuple[str, Callable[[wire.Batch], list[bytes]]],
) -> None:
    reason, build = case
    refused = make_batch(7, 1, events())
    client.send_multipart(build(refused))

    # Replies come back in order: the first one answering the good batch proves that the bad
    # frames got none, and that they were handled (and counted) before it.
    assert request(client, encode_batch(make_batch(7, 2, events()))) == wire.Ack(7, 2)
    stats = store.stats()
    assert stats.rejected == {reason: 1}
    assert (stats.batches, stats.events) == (1, 2)


def test_frame_far_over_the_limit_only_costs_its_sender_the_connection(
    store: Store,
    server: ServerThread,
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    # libzmq refuses such a frame itself, before the server sees it, and drops the connection.
    flooder = connect(server.endpoint)
    monitor = flooder.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        flooder.send_multipart([wire.BATCH_HEADER, b"\0" * (HARD_LIMIT_FACTOR * MAX_FRAME + 1)])
        assert monitor.poll(TIMEOUT_MS), "the server kept the connection"
        assert recv_monitor_message(monitor)["event"] == zmq.EVENT_DISCONNECTED
    finally:
        flooder.disable_monitor()
        monitor.close()

    other = connect(server.endpoint)
    assert request(other, encode_batch(make_batch(7, 1, events()))) == wire.Ack(7, 1)
    assert store.stats().batches == 1


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(st.binary(max_size=64), max_size=4), header_ok=st.booleans())
def test_ingest_never_raises_on_arbitrary_frames(frames: list[bytes], header_ok: bool) -> None:
    if header_ok and frames:
        frames[0] = wire.BATCH_HEADER
    store = MemoryStore()

    ack = Ingest(store).handle(frames)

    stats = store.stats()
    if ack is None:
        assert sum(stats.rejected.values()) == 1  # refused, and counted once
    else:
        assert (stats.batches, stats.rejected) == (1, {})  # a valid batch by chance: stored


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_group_of_messages_gets_an_ack_for_each_batch_stored(
    tmp_path: Path, make_batch: BatchFactory, encode_batch: Encode, kind: str
) -> None:
    # The memory store takes decoded batches; SQLite, a group packed batch by batch as decoded.
    valid = encode_batch(make_batch(7, 1, events()))
    overflowing = encode_batch(
        make_batch(7, 2, {1: [wire.Start(2, 0, 0, 1, 100, SEQ), wire.End(2, 2**63 - 1)]})
    )
    garbage = [b"not invoseq", b"\x00"]
    store = MemoryStore() if kind == "memory" else SQLiteStore(str(tmp_path / "cmr.sqlite"))
    try:
        acks = Ingest(store).handle_many([garbage, valid, overflowing, valid])

        assert acks == [None, wire.Ack(7, 1), None, wire.Ack(7, 1)]  # resent: acked again
        stats = store.stats()
        assert (stats.batches, stats.duplicate_batches) == (1, 1)
        assert stats.rejected == {"garbage": 1, "decode": 1}
        assert [line.invocations for line in store.list_sequences(10)] == [
            1
        ]  # nothing of the refused
        assert gc.isenabled()  # the collector paused for the group is back on
    finally:
        store.close()


def test_store_failure_is_not_acknowledged_so_the_sender_retries(
    tmp_path: Path,
    make_batch: BatchFactory,
    encode_batch: Encode,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "cmr.sqlite"
    store = SQLiteStore(str(path), busy_timeout_ms=50)
    ingest = Ingest(store)
    frames = encode_batch(make_batch(7, 1, events()))
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database
        assert ingest.handle(frames) is None
        assert "cannot store batch 1 of process 7" in caplog.text
        later = encode_batch(make_batch(7, 2, events()))
        assert ingest.handle_many([frames, later]) == [None, None]  # one transaction: neither
        assert "cannot store batch 1 of process 7 and 1 more in its group" in caplog.text
        assert gc.isenabled()  # a failed group leaves the collector on, too
        blocker.execute("ROLLBACK")

        assert ingest.handle(frames) == wire.Ack(7, 1)
        assert store.stats().batches == 1
    finally:
        blocker.close()
        store.close()


# -- `cmr serve` as a process ---------------------------------------------------------------


def start_server_process(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cmr.server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Wait for the process; its exit code, the rest of stdout, and stderr."""
    try:
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    return process.returncode, out, err


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


@contextlib.contextmanager
def serving_process(
    tmp_path: Path, connect: Callable[[str], zmq.Socket[bytes]]
) -> Iterator[tuple[Path, zmq.Socket[bytes]]]:
    """`cmr serve --db` in ``tmp_path`` (the repository file) and a client connected to it;
    stopped with SIGTERM at the end, from which it must exit cleanly."""
    db = tmp_path / "cmr.sqlite"
    bind = f"ipc://{tmp_path}/cmr.sock"
    process = start_server_process("--bind", bind, "--db", str(db))
    try:
        assert read_line(process, 30) == f"{READY_PREFIX}{bind}\n"
        yield db, connect(bind)
        process.send_signal(signal.SIGTERM)
    finally:
        code, out, err = finish(process)
    assert (code, out, err) == (0, "", "")


def test_a_served_repositorys_wal_is_copied_beside_its_commits(
    tmp_path: Path, connect: Callable[[str], zmq.Socket[bytes]], encode_batch: Encode
) -> None:
    """`cmr serve` alone (no --workers, as `tracer run` starts it) copies the WAL into the file on
    a thread once 8 MiB of it waits: left to the commit that takes it past 32 MiB, the copy and
    its syncs stalled every acknowledgement for up to 0.6 s, and a program making a million
    calls a second dropped events meanwhile (docs/performance.md)."""
    with serving_process(tmp_path, connect) as (db, client):
        for batch in big_batches(1, 6):
            assert request(client, encode_batch(batch)) == wire.Ack(1, batch.batch_no)
        frames, _copied = wal_frames(db)
        assert frames < 8192  # short of wal_autocheckpoint: no commit copied any of it
        # The file's size says what was copied (the WAL may have started over since).
        deadline = time.monotonic() + PATIENCE_S
        while db.stat().st_size < COPIED_BYTES:
            assert time.monotonic() < deadline, f"{frames} frames; the file has none"
            time.sleep(0.01)


def test_a_served_repository_keeps_its_lock_on_the_wal_index(
    tmp_path: Path,
    connect: Callable[[str], zmq.Socket[bytes]],
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    """`cmr serve` holds its share of SQLite's lock on the WAL index (the "dead man switch" byte
    of `<file>-shm`) while it runs. Its checkpoint thread once read the index through a
    descriptor it opened and closed after every commit, which dropped every POSIX lock the
    process held on it: a reader from another process (`cmr ls` while it writes) then took the
    index for unused and truncated it, and the server died of SIGBUS (seen in CI)."""
    with serving_process(tmp_path, connect) as (db, client):
        for batch_no in range(1, 21):
            batch = make_batch(7, batch_no, {1: [wire.Start(batch_no, 0, 0, 1, 100, SEQ)]})
            assert request(client, encode_batch(batch)) == wire.Ack(7, batch_no)
            assert not _lockable(db.with_name(db.name + "-shm"), WAL_INDEX_DMS), batch_no
            reader = sqlite3.connect(db)  # this process: another one than the server's
            try:
                [(batches,)] = reader.execute("SELECT count(*) FROM batches").fetchall()
            finally:
                reader.close()
            assert batches == batch_no


#: SQLite's "dead man switch" byte in the WAL index (unix VFS): every connection holds a shared
#: lock on it, and one that gets it exclusively takes the index for unused and starts it over.
WAL_INDEX_DMS = 128


def _lockable(path: Path, offset: int) -> bool:
    """Whether this process could lock byte ``offset`` of ``path`` exclusively (released at once):
    no other process holds a lock on it."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
    except OSError:
        return False
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)
        return True
    finally:
        os.close(fd)


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
