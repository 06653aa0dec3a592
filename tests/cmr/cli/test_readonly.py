"""Reading a repository needs no write access: ``cmr ls`` and ``cmr show`` on a repository file
on a read-only mount (a tmpfs remounted read-only, so the kernel refuses every write, even
root's: chmod would not stop root) list and show what it holds.

Three states of the file a read-only mount can hold:
- closed cleanly (no ``-wal``, no ``-shm``): SQLite cannot create the ``-shm`` a WAL reader
  uses, so the reader opens the file immutable;
- copied with its ``-wal`` and ``-shm`` while a writer had it open: the reader uses them and
  sees the commits only the ``-wal`` holds;
- a ``-wal`` without its ``-shm``: its commits cannot be read there; one line says why.

Mounting needs root and a kernel that lets this container mount; elsewhere the tests skip,
saying so."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmr.store import open_store
from invoseq import wire
from tests.cmr.conftest import BatchFactory

MS = 1_000_000
FIRST = bytes.fromhex("f1" * 16)
SECOND = bytes.fromhex("5c" * 16)
PATIENCE_S = 60


def _mount(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["mount", *argv], check=False, capture_output=True, text=True, timeout=PATIENCE_S
    )


@pytest.fixture(name="mount")
def fixture_mount(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of the test's own, unmounted afterwards; ``remount_readonly`` makes it so."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "mnt"
    point.mkdir()
    try:
        done = _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(point))
    except FileNotFoundError:
        pytest.skip("no mount command here")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(
            ["umount", "-l", str(point)], check=False, capture_output=True, timeout=PATIENCE_S
        )


def remount_readonly(point: Path) -> None:
    done = _mount("-o", "remount,ro", str(point))
    assert done.returncode == 0, done.stderr
    # the kernel refuses the write, whoever asks
    with pytest.raises(OSError, match="Read-only file system"):
        (point / "probe").write_bytes(b"")


def cmr(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmr", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )


def batch(make_batch: BatchFactory, batch_no: int, seq: bytes, name: str) -> wire.Batch:
    """One call of ``name``, the batch's own method (its id: ``batch_no + 1``)."""
    iid = method = batch_no + 1
    events = [wire.Start(iid, 0, 0, method, 0, seq), wire.End(iid, 2 * MS)]
    return make_batch(7, batch_no, {1: events}, methods={method: name})


def test_a_cleanly_closed_repository_on_a_read_only_mount_lists_and_shows(
    mount: Path, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    path = str(mount / "cmr.sqlite")
    store = open_store(path)
    store.ingest(batch(make_batch, 0, FIRST, "shop.checkout"), clock_offset_ns)
    store.close()
    assert sorted(os.listdir(mount)) == ["cmr.sqlite"]  # the WAL folded in at the last close
    remount_readonly(mount)

    listed = cmr("ls", "--db", path)
    assert listed.returncode == 0, listed.stderr
    assert FIRST.hex()[:12] in listed.stdout
    assert "shop.checkout" in listed.stdout
    shown = cmr("show", FIRST.hex()[:12], "--db", path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(FIRST.hex())
    assert sorted(os.listdir(mount)) == ["cmr.sqlite"]


def test_commits_only_the_wal_holds_are_read_through_its_shm(
    mount: Path, tmp_path: Path, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    """A copy of a repository taken while ``cmr serve`` wrote (the three files): the second
    sequence is in the ``-wal`` only, and an immutable open would miss it."""
    source = str(tmp_path / "live" / "cmr.sqlite")
    store = open_store(source)
    try:
        store.ingest(batch(make_batch, 0, FIRST, "shop.checkout"), clock_offset_ns)
        keep = sqlite3.connect(source)  # holds the WAL open past the writer's close
        keep.execute("SELECT count(*) FROM sqlite_master").fetchone()
        store.ingest(batch(make_batch, 1, SECOND, "shop.refund"), clock_offset_ns)
        for suffix in ("", "-wal", "-shm"):
            shutil.copyfile(source + suffix, str(mount / "cmr.sqlite") + suffix)
    finally:
        store.close()
    keep.close()
    remount_readonly(mount)

    listed = cmr("ls", "--db", str(mount / "cmr.sqlite"))
    assert listed.returncode == 0, listed.stderr
    assert "shop.checkout" in listed.stdout
    assert "shop.refund" in listed.stdout


def test_a_wal_without_its_shm_on_a_read_only_mount_is_one_line(
    mount: Path, tmp_path: Path, make_batch: BatchFactory, clock_offset_ns: int
) -> None:
    source = str(tmp_path / "live" / "cmr.sqlite")
    store = open_store(source)
    try:
        store.ingest(batch(make_batch, 0, FIRST, "shop.checkout"), clock_offset_ns)
        for suffix in ("", "-wal"):
            shutil.copyfile(source + suffix, str(mount / "cmr.sqlite") + suffix)
    finally:
        store.close()
    remount_readonly(mount)

    listed = cmr("ls", "--db", str(mount / "cmr.sqlite"))
    assert listed.returncode == 1
    (line,) = listed.stderr.splitlines()
    assert "cmr.sqlite-wal" in line
    assert "-shm" in line
