"""The disk spool: bounded, read back in order, tolerant of a crash mid-write, adopted by the
next run of the same program."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

from tests.tracer.core.implementations import needs_c_path
from tracer._shipping import spool
from tracer._shipping.spool import Spool


def fill(target: Spool, count: int, size: int = 100) -> None:
    for n in range(1, count + 1):
        assert target.append(7, n, bytes([n % 256]) * size, events=n)


def drain(target: Spool) -> list[tuple[int, int]]:
    taken = []
    while (record := target.peek()) is not None:
        taken.append((record.batch_no, record.events))
        target.advance()
    return taken


def test_records_come_back_in_order_and_the_file_is_reused(tmp_path: Path) -> None:
    own = Spool(str(tmp_path), 10_000, "prog")
    fill(own, 5)
    assert drain(own) == [(n, n) for n in range(1, 6)]
    assert not own.has_records()
    assert not own.path.exists()  # read to its end: emptied
    fill(own, 2)
    assert drain(own) == [(1, 1), (2, 2)]


@needs_c_path  # pure Python does not hide the tracer's bytes from tracemalloc
def test_a_batch_read_back_is_not_counted_as_the_programs_allocation(tmp_path: Path) -> None:
    own = Spool(str(tmp_path), 4 << 20, "prog")
    assert own.append(7, 1, b"x" * (1 << 20), events=1)
    tracemalloc.start()
    try:
        record = own.peek()  # kept in memory until the repository acknowledges it
        retained, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert record is not None
    assert len(record.body) == 1 << 20
    assert retained < 64 * 1024, retained  # the file's read buffer and the record's object


def test_the_byte_bound_is_never_exceeded(tmp_path: Path) -> None:
    own = Spool(str(tmp_path), 1000, "prog")
    accepted = sum(own.append(7, n, b"x" * 100, events=1) for n in range(50))
    assert 0 < accepted < 50
    assert own.path.stat().st_size <= 1000


def test_a_file_cut_by_a_crash_is_read_to_its_last_whole_record(tmp_path: Path) -> None:
    writer = Spool(str(tmp_path), 10_000, "prog", pid=999_999_999)
    fill(writer, 3)
    writer.close()
    data = writer.path.read_bytes()
    writer.path.write_bytes(data[:-40])  # the third record's body is cut
    reader = Spool(str(tmp_path), 10_000, "prog")
    assert reader.adopt_orphans() == 1  # pid 999999999 is not alive
    assert drain(reader) == [(1, 1), (2, 2)]
    assert reader.lost_events == 3  # the cut record's events, from its intact header
    assert list(tmp_path.iterdir()) == []  # replayed files are removed


def test_a_cut_header_and_a_corrupt_body_are_counted(tmp_path: Path) -> None:
    writer = Spool(str(tmp_path), 10_000, "prog", pid=999_999_998)
    fill(writer, 2)
    writer.close()
    data = bytearray(writer.path.read_bytes())
    data[-10] ^= 0xFF  # the second record's body no longer matches its CRC
    writer.path.write_bytes(bytes(data) + b"\xa5\x5a\x00")  # and a header cut short after it
    records = spool.read_file(writer.path)
    assert [(r.batch_no, r.events) for r in records] == [(1, 1)]


def test_only_dead_processes_files_of_the_same_program_are_adopted(tmp_path: Path) -> None:
    Spool(str(tmp_path), 10_000, "prog", pid=os.getpid()).append(7, 1, b"alive", events=1)
    Spool(str(tmp_path), 10_000, "other", pid=999_999_997).append(7, 1, b"other", events=1)
    Spool(str(tmp_path), 10_000, "prog", pid=999_999_996).append(8, 1, b"dead", events=1)
    assert Spool(str(tmp_path), 10_000, "prog", pid=999_999_995).adopt_orphans() == 1
    # The adopter died before replaying it: the next one adopts it again.
    newcomer = Spool(str(tmp_path), 10_000, "prog", pid=os.getpid())
    assert newcomer.adopt_orphans() == 1
    [claimed] = tmp_path.glob(f"prog-{os.getpid()}.*.spool")
    assert [bytes(r.body) for r in spool.read_file(claimed)] == [b"dead"]
    assert Spool(str(tmp_path), 10_000, "prog", pid=999_999_994).adopt_orphans() == 0  # alive


def test_program_key_names_the_script() -> None:
    assert spool.program_key(["app.py"]) == spool.program_key([os.path.abspath("app.py")])
    assert spool.program_key(["app.py"]) != spool.program_key(["other.py"])


def test_the_report_slot_is_rewritten_in_place_and_replayed_first(tmp_path: Path) -> None:
    writer = Spool(str(tmp_path), 1 << 20, "prog", pid=999_999_993)
    assert not writer.reports  # no file yet
    fill(writer, 2)
    assert writer.reports
    size = writer.path.stat().st_size
    assert writer.write_report(7, 50, b"dropped 10")
    assert writer.write_report(7, 50, b"dropped 12")  # later drops: the same slot, rewritten
    assert writer.path.stat().st_size == size  # in place: no new disk space
    assert not writer.write_report(7, 50, b"x" * spool.SLOT_BYTES)  # does not fit: refused
    writer.close()
    records = spool.read_file(writer.path)
    assert [(r.batch_no, bytes(r.body)[:10], r.events) for r in records][:1] == [
        (50, b"dropped 12", 0)
    ]
    assert [(r.batch_no, r.events) for r in records[1:]] == [(1, 1), (2, 2)]


def test_an_empty_or_torn_report_slot_is_skipped_and_the_batches_after_it_are_read(
    tmp_path: Path,
) -> None:
    writer = Spool(str(tmp_path), 1 << 20, "prog", pid=999_999_992)
    fill(writer, 2)
    writer.close()
    assert [(r.batch_no, r.events) for r in spool.read_file(writer.path)] == [(1, 1), (2, 2)]
    writer = Spool(str(tmp_path), 1 << 20, "prog", pid=999_999_991)
    fill(writer, 2)
    assert writer.write_report(7, 50, b"dropped 10")
    writer.close()
    data = bytearray(writer.path.read_bytes())
    data[35] ^= 0xFF  # a crash while the slot was rewritten: it no longer matches its CRC
    writer.path.write_bytes(bytes(data))
    assert [(r.batch_no, r.events) for r in spool.read_file(writer.path)] == [(1, 1), (2, 2)]


def test_a_spool_too_small_for_a_report_slot_has_none(tmp_path: Path) -> None:
    own = Spool(str(tmp_path), spool.SLOT_MIN_SPOOL - 1, "prog")
    fill(own, 1)
    assert not own.reports
    assert not own.write_report(7, 50, b"dropped 10")
    assert own.path.stat().st_size == 30 + 100  # its one record, header and body


def test_a_report_written_after_its_slot_was_replayed_takes_a_new_batch_number(
    tmp_path: Path,
) -> None:
    own = Spool(str(tmp_path), 1 << 20, "prog")
    fill(own, 1)
    own.report_batch_no = 50
    assert own.write_report(7, 50, b"dropped 10")
    record = own.peek()  # the repository is back: the slot goes first
    assert record is not None
    assert (record.batch_no, bytes(record.body)) == (50, b"dropped 10")
    own.advance()
    assert own.report_batch_no is None  # later drops are reported under a new number
