"""``cmr serve --workers N``: one endpoint, several processes storing, every batch acknowledged
once it is stored, a killed worker replaced, and a clean stop. Real processes and sockets."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
import zmq

from cmr.server.workers import WorkerError, WorkerPool
from cmr.store import open_store
from invoseq import wire
from tests.support import READY_PREFIX, read_line

pytestmark = pytest.mark.system

BatchFactory = Callable[..., wire.Batch]
Encode = Callable[[wire.Batch], list[bytes]]

PATIENCE_S = 60
BATCHES = 60


def _seq(n: int) -> bytes:
    return (0x5E0 + n).to_bytes(16, "big")


def _workers_of(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux: /proc)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sorted(int(child) for child in children)


@pytest.fixture(name="serve")
def fixture_serve(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def serve(*args: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "cmr", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        started.append(process)
        return process

    yield serve
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=PATIENCE_S)


@pytest.fixture(name="two_workers")
def fixture_two_workers(
    serve: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> tuple[subprocess.Popen[str], str]:
    """``cmr serve --workers 2`` on repo.sqlite in tmp_path, listening: (process, endpoint)."""
    bind = f"ipc://{tmp_path}/cmr.sock"
    process = serve("--workers", "2", "--bind", bind, "--db", "repo.sqlite")
    assert read_line(process, PATIENCE_S) == f"{READY_PREFIX}{bind}\n"
    return process, bind


@contextlib.contextmanager
def _client(endpoint: str) -> Iterator[zmq.Socket[bytes]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        yield sock
    finally:
        sock.close()
        context.term()


def _send_all(
    sock: zmq.Socket[bytes],
    frames: dict[int, list[bytes]],
    on_first_ack: Callable[[], None] | None = None,
) -> int:
    """Send every batch and resend those not acknowledged, until each is (bounded in time);
    ``on_first_ack`` runs once the first acknowledgement came. How many rounds it took."""
    waiting = dict(frames)
    deadline = time.monotonic() + PATIENCE_S
    rounds = 0
    while waiting:
        rounds += 1
        for batch_frames in waiting.values():
            sock.send_multipart(batch_frames)
        resend_at = time.monotonic() + 2.0
        while waiting and time.monotonic() < resend_at:
            assert time.monotonic() < deadline, f"not acknowledged: {sorted(waiting)}"
            if sock.poll(100):
                header, body = sock.recv_multipart()
                assert header == wire.ACK_HEADER
                waiting.pop(msgspec.msgpack.decode(body, type=wire.Ack).batch_no, None)
                if on_first_ack is not None:
                    on_first_ack()
                    on_first_ack = None
    return rounds


def _batches(
    make_batch: BatchFactory, encode_batch: Encode, numbers: range
) -> dict[int, list[bytes]]:
    return {
        n: encode_batch(
            make_batch(
                7, n, {1: [wire.Start(n, 0, 0, 1, 100 * n, _seq(n)), wire.End(n, 100 * n + 50)]}
            )
        )
        for n in numbers
    }


def _stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _out, err = process.communicate(timeout=PATIENCE_S)
    return process.returncode, err


def test_two_workers_store_every_batch_once_and_stop_with_the_server(
    two_workers: tuple[subprocess.Popen[str], str],
    tmp_path: Path,
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    process, bind = two_workers
    workers = _workers_of(process.pid)
    with _client(bind) as sock:
        _send_all(sock, _batches(make_batch, encode_batch, range(1, BATCHES + 1)))
        # Sent again: acknowledged, stored once.
        _send_all(sock, _batches(make_batch, encode_batch, range(1, 3)))
    code, err = _stop(process)

    assert len(workers) == 2
    assert (code, err) == (0, "")
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
    store = open_store(str(tmp_path / "repo.sqlite"), readonly=True)
    try:
        stats = store.stats()
        listed = store.list_sequences(BATCHES + 10)
    finally:
        store.close()
    assert (stats.batches, stats.duplicate_batches, stats.events) == (BATCHES, 2, 2 * BATCHES)
    assert sorted(s.seq for s in listed) == sorted(_seq(n) for n in range(1, BATCHES + 1))
    assert {s.status for s in listed} == {"complete"}


def test_a_killed_worker_is_replaced_and_nothing_is_lost(
    two_workers: tuple[subprocess.Popen[str], str],
    tmp_path: Path,
    make_batch: BatchFactory,
    encode_batch: Encode,
) -> None:
    process, bind = two_workers
    doomed, survivor = _workers_of(process.pid)
    os.kill(doomed, signal.SIGSTOP)  # what it is given from now on stays unacknowledged
    with _client(bind) as sock:
        # Round robin gives the frozen worker its share; it dies holding it, and the batches
        # are sent again (to the survivor and the replacement).
        rounds = _send_all(
            sock,
            _batches(make_batch, encode_batch, range(1, BATCHES + 1)),
            on_first_ack=lambda: os.kill(doomed, signal.SIGKILL),
        )
    replaced = _workers_of(process.pid)
    code, err = _stop(process)

    assert rounds >= 2
    assert survivor in replaced
    assert doomed not in replaced
    assert len(replaced) == 2
    assert code == 0
    assert f"worker {doomed} exited with code -9: starting another" in err
    store = open_store(str(tmp_path / "repo.sqlite"), readonly=True)
    try:
        assert store.stats().batches == BATCHES
    finally:
        store.close()


def test_workers_that_cannot_open_the_repository_fail_the_start_in_one_line(
    tmp_path: Path,
) -> None:
    others = set(_workers_of(os.getpid()))  # what this process runs besides (other tests')
    pool = WorkerPool(2, str(tmp_path))  # a directory: no worker can open it

    with pytest.raises(WorkerError, match=r"^cannot open repository .*") as failed:
        pool.start()

    assert "\n" not in str(failed.value)
    assert set(_workers_of(os.getpid())) <= others  # the pool stopped the workers it started


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "2", "--memory"], "--workers needs a repository every worker can open"),
        (["--workers", "0"], "give 1 to 64 workers, not 0"),
        (["--workers", "many"], "not a number of workers: 'many'"),
    ],
)
def test_bad_worker_options_are_refused_in_one_line(
    serve: Callable[..., subprocess.Popen[str]], args: list[str], message: str
) -> None:
    process = serve(*args, "--bind", "tcp://127.0.0.1:*")
    out, err = process.communicate(timeout=PATIENCE_S)

    assert process.returncode != 0
    assert out == ""
    assert message in err
