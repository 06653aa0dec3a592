"""The on-disk spool: where batches wait while the repository is unreachable and memory is full.

One append-only file per process, in a configurable directory, bounded in bytes. Each record is

    magic (2) | length (4) | events (4) | CRC-32 of the body (4) | puid (8) | batch no (8) | body

so a file cut short by a crash is read up to its last whole record, and what follows is counted as
lost (``Spool.lost_events``, plus ``lost_records`` for a record whose header was cut too).

More in docs/architecture.md, "tracer/_shipping/spool.py".
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from tracer._core import recorder

log = logging.getLogger("tracer")

_MAGIC: Final = b"\xa5\x5a"
_HEADER: Final = struct.Struct(">2sIIIQQ")
_SLOT_MAGIC: Final = b"\xa5\x5b"
SUFFIX: Final = ".spool"
#: The report slot at the start of a spool file, header included; a spool bound below
#: ``SLOT_MIN_SPOOL`` has none (it would take too much of it).
SLOT_BYTES: Final = 4096
SLOT_MIN_SPOOL: Final = 4 * SLOT_BYTES


@dataclass(frozen=True, slots=True)
class Record:
    puid: int
    batch_no: int
    body: bytes
    events: int


def program_key(argv: list[str] | None = None) -> str:
    """Names the program: the script or module it runs (its first argument), hashed."""
    program = (argv if argv is not None else sys.argv)[:1] or ["python"]
    return hashlib.sha256(os.path.abspath(program[0]).encode()).hexdigest()[:12]


def read_file(path: str | Path) -> list[Record]:
    """Every whole record of a spool file, in order (stops at a damaged or cut record). The file
    is only read: unlike a replay, reading it to its end does not delete it."""
    reader = Spool(str(Path(path).parent), 0, "", pid=-1)
    reader._reading = Path(path)
    records = []
    with open(path, "rb") as stream:
        while (record := reader._read_one(stream)) is not None:
            records.append(record)
    return records


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Spool:
    """The spool of one process. Not thread-safe: the sender's worker thread owns it."""

    def __init__(self, directory: str, max_bytes: int, program: str, pid: int | None = None):
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.program = program
        self.pid = os.getpid() if pid is None else pid
        self.path = self.directory / f"{program}-{self.pid}{SUFFIX}"
        self._writer: BinaryIO | None = None
        self._written = 0  # bytes in our own file
        self._pending: list[Path] = []  # files to replay, oldest first; ours last
        self._reader: BinaryIO | None = None
        self._reading: Path | None = None
        self._peeked: Record | None = None
        self.lost_events = 0
        self.lost_records = 0
        self.spooled_events = 0
        self._slot = False  # our file begins with a report slot
        #: The batch number the slot of our current file reports under (None: not reserved yet);
        #: a new file (the old one read to its end) gets a new one: the old one's was sent.
        self.report_batch_no: int | None = None

    # -- writing ----------------------------------------------------------------------------------

    def append(self, puid: int, batch_no: int, body: bytes | bytearray, events: int) -> bool:
        """Append a batch; False (nothing written) when the spool is full or cannot be written."""
        size = _HEADER.size + len(body)
        if self._written + size > self.max_bytes:
            return False
        try:
            if self._writer is None:
                self._open_writer()
                if self._written + size > self.max_bytes:
                    return False
            assert self._writer is not None
            header = _HEADER.pack(_MAGIC, len(body), events, zlib.crc32(body), puid, batch_no)
            self._writer.write(header)  # not header + body: no copy of the body while it is written
            self._writer.write(body)
            self._writer.flush()
        except OSError as exc:
            log.warning("invoseq: cannot write the spool %s: %s", self.path, exc)
            self._undo_partial()
            return False
        self._written += size
        self.spooled_events += events
        return True

    def _undo_partial(self) -> None:
        """A write failed (the disk is full, say): cut off what it wrote of its record, which
        would end the file for a reader, so that a later, smaller batch that fits is read."""
        if self._writer is None:
            return
        with contextlib.suppress(OSError):  # what it could not write is dropped with the batch
            self._writer.flush()
        with contextlib.suppress(OSError):
            self._writer.truncate(self._written)
            self._writer.seek(self._written)

    def _open_writer(self) -> None:
        """Open our file to append to it (a file a process of the same pid left is appended to);
        a new one begins with an empty report slot when the bound has room for it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        # Not O_APPEND: Linux's pwrite would append the slot rather than write it in place.
        writer = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666), "r+b")
        try:
            end = writer.seek(0, os.SEEK_END)
            self._slot = False
            self.report_batch_no = None
            if end == 0 and self.max_bytes >= SLOT_MIN_SPOOL:
                writer.write(_HEADER.pack(_SLOT_MAGIC, SLOT_BYTES - _HEADER.size, 0, 0, 0, 0))
                writer.write(bytes(SLOT_BYTES - _HEADER.size))
                writer.flush()
                self._slot = True
                end = SLOT_BYTES
        except BaseException:
            writer.close()
            raise
        self._writer = writer
        self._written = max(self._written, end)
        if self.path not in self._pending:
            self._pending.append(self.path)

    @property
    def reports(self) -> bool:
        """Whether our file is open and begins with a report slot (``write_report`` can write)."""
        return self._writer is not None and self._slot

    def write_report(self, puid: int, batch_no: int, body: bytes) -> bool:
        """Write an encoded report batch into our file's slot, in place (no new disk space);
        False when there is no slot (no file yet, or a spool too small) or it does not fit."""
        if self._writer is None or not self._slot or len(body) > SLOT_BYTES - _HEADER.size:
            return False
        header = _HEADER.pack(
            _SLOT_MAGIC, SLOT_BYTES - _HEADER.size, len(body), zlib.crc32(body), puid, batch_no
        )
        try:
            os.pwrite(self._writer.fileno(), header + body, 0)
        except OSError as exc:
            log.warning("invoseq: cannot write the spool %s: %s", self.path, exc)
            return False
        return True

    # -- reading ----------------------------------------------------------------------------------

    def adopt_orphans(self) -> int:
        """Queue for replay the spool files that dead processes of this program left behind."""
        try:
            candidates = sorted(self.directory.glob(f"{self.program}-*{SUFFIX}"))
        except OSError:
            return 0
        adopted = 0
        for path in candidates:
            # <program>-<pid>.spool, or <program>-<pid>.<n>.spool once adopted by process <pid>
            pid = path.name[len(self.program) + 1 : -len(SUFFIX)].split(".", 1)[0]
            if path == self.path or not pid.isdigit() or _alive(int(pid)):
                continue
            claimed = path.with_name(f"{self.program}-{self.pid}.{os.urandom(4).hex()}{SUFFIX}")
            with contextlib.suppress(OSError):
                path.rename(claimed)  # atomic: two new processes never replay the same file
                self._pending.insert(adopted, claimed)
                adopted += 1
        return adopted

    def has_records(self) -> bool:
        return bool(self._pending)

    def peek(self) -> Record | None:
        """The oldest record not yet taken (it stays in the spool until ``advance``)."""
        if self._peeked is None:
            self._peeked = self._next_record()
        return self._peeked

    def advance(self) -> None:
        """The peeked record was taken (sent): move past it."""
        self._peeked = None

    def _next_record(self) -> Record | None:
        """The oldest record not yet read, or None. A file read to its end is deleted, unless it
        is the one this process is still writing."""
        while self._pending:
            if self._reader is None:
                self._reading = self._pending[0]
                try:
                    self._reader = open(self._reading, "rb")  # noqa: SIM115
                except OSError:
                    self._pending.pop(0)
                    continue
            record = self._read_one(self._reader)
            if record is not None:
                return record
            if self._reading == self.path and self._writer is not None:
                if self._reader.tell() < self._written:
                    return None  # a partial write in progress: try again later
                self._truncate_own()
            self._close_reader()
        return None

    def _read_one(self, reader: BinaryIO) -> Record | None:
        start = reader.tell()
        header = reader.read(_HEADER.size)
        if not header:
            return None
        if len(header) < _HEADER.size:
            self._cut(reader, start, events=None)
            return None
        magic, length, events, crc, puid, batch_no = _HEADER.unpack(header)
        if magic == _SLOT_MAGIC:
            return self._read_slot(reader, start, (length, events, crc, puid, batch_no))
        # Kept until the repository acknowledges it: the program's tracemalloc does not count it.
        body = recorder.untracked(reader.read, length) if magic == _MAGIC else b""
        if magic != _MAGIC or len(body) < length or zlib.crc32(body) != crc:
            self._cut(reader, start, events=events if magic == _MAGIC else None)
            return None
        return Record(puid, batch_no, body, events)

    def _read_slot(
        self, reader: BinaryIO, start: int, header: tuple[int, int, int, int, int]
    ) -> Record | None:
        """The report slot: its batch, or the next record when it holds none (empty, or torn by
        a crash while it was rewritten: the report is lost, not the batches after it).
        ``header``: (slot length, length of its batch, CRC, puid, batch number)."""
        length, used, crc, puid, batch_no = header
        if self._reading == self.path:
            # Our own slot, about to be sent: what it says later goes under a new number (the
            # repository would discard a second batch of this one as a duplicate).
            self.report_batch_no = None
        slot = recorder.untracked(reader.read, length)
        if len(slot) < length:
            self._cut(reader, start, events=0)
            return None
        body = slot[:used]
        if used == 0 or used > length or zlib.crc32(body) != crc:
            return self._read_one(reader)
        return Record(puid, batch_no, body, 0)

    def _cut(self, reader: BinaryIO, start: int, events: int | None) -> None:
        """The file ends in a damaged record (a crash while writing): count it lost; skip it."""
        if events is None:
            self.lost_records += 1
        else:
            self.lost_events += events
        log.warning(
            "invoseq: spool %s is cut short at byte %d; the rest is lost", self._reading, start
        )
        reader.seek(0, os.SEEK_END)

    def _truncate_own(self) -> None:
        """Our own file was read to its end: start it again empty."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        with contextlib.suppress(OSError):
            self.path.unlink()
        self._written = 0
        self._slot = False
        self.report_batch_no = None

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._reading is not None:
            if self._reading != self.path:
                with contextlib.suppress(OSError):
                    self._reading.unlink()
            if self._pending and self._pending[0] == self._reading:
                self._pending.pop(0)
            self._reading = None

    def close(self) -> None:
        """Stop writing; what is left stays on disk for the next run of this program."""
        self._peeked = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
