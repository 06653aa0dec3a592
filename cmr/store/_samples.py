"""Rules for stack samples that every backend applies the same way.

Samples are not tied to a sequence on the wire: a thread is sampled whatever it runs. They are
stored per ``(puid, tid, t_ns)`` and a sequence finds its own by time: the samples of each thread
it ran on that overlap the window of one of its invocations there. A sample stands for the span
``[t_ns, t_ns + duration_ns)``; one of duration 0 stands for the instant ``t_ns``, so it is
treated as ``[t_ns, t_ns + 1)``. Both backends read them with ``load_samples``; each states
``overlaps`` in SQL (``SAMPLES_IN_WINDOW``) next to which it is named.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Final, cast

import msgspec

from cmr.store.base import (
    FrameRecord,
    InvalidBatchError,
    InvocationRecord,
    SampleRecord,
    SamplerRecord,
)
from cmr.store.column_passes import thread_windows
from cmr.store.columns import RecordColumns, field, on_threads
from invoseq.wire import GAP_TID, Batch, SamplerReport

I64_MIN: Final = -(2**63)
I64_MAX: Final = 2**63 - 1
#: The end of the window of an invocation that has not ended (yet).
OPEN_END: Final = I64_MAX

ThreadKey = tuple[int, int]  # (puid, tid)
Window = tuple[int, int]  # [start, end)


def sample_records(batch: Batch) -> list[SampleRecord]:
    """The batch's samples with wall-clock times (the process's clock offset added, as for
    events). ``lines`` is cut or padded with 0 to one line per frame, so readers can zip them.

    Raises InvalidBatchError when a sample's span does not fit a signed 64-bit integer."""
    puid = batch.puid
    offset = batch.process.clock_offset_ns
    records: list[SampleRecord] = []
    for sample in batch.samples:
        wall = sample.t_ns + offset
        if wall < I64_MIN or span_end(wall, sample.duration_ns) > I64_MAX:
            raise InvalidBatchError(
                f"batch {batch.batch_no} of process {puid:x}: sample time out of range"
            )
        frames = tuple(sample.frames)
        lines = tuple(sample.lines[: len(frames)])
        if len(lines) < len(frames):
            lines += (0,) * (len(frames) - len(lines))
        first, last = sample.first_tick_ns, sample.last_tick_ns
        ticks = None
        if first is not None and last is not None:
            if wall + max(first, last) > I64_MAX:
                raise InvalidBatchError(
                    f"batch {batch.batch_no} of process {puid:x}: sample tick out of range"
                )
            ticks = (wall + first, wall + max(first, last))
        records.append(
            SampleRecord(
                puid,
                sample.tid,
                wall,
                sample.weight,
                sample.duration_ns,
                sample.cpu_ns,
                frames,
                lines,
                ticks,
            )
        )
    return records


def tick_offsets(sample: SampleRecord) -> tuple[int, int] | tuple[None, None]:
    """The sample's ticks as offsets from its ``t_ns``, as the wire and the stored stack carry
    them (None, None: unknown)."""
    if sample.ticks is None:
        return None, None
    first, last = sample.ticks
    return first - sample.t_ns, last - sample.t_ns


def span_end(t_ns: int, duration_ns: int) -> int:
    """Where a sample's span ends; an instant sample lasts 1 ns so that it overlaps a window it
    lies in."""
    return t_ns + max(duration_ns, 1)


def overlaps(sample: SampleRecord, window: Window) -> bool:
    """Whether the sample's span meets the half-open window ``[start, end)``."""
    start, end = window
    return sample.t_ns < end and span_end(sample.t_ns, sample.duration_ns) > start


def without_gaps(samples: list[SampleRecord]) -> tuple[list[SampleRecord], list[SampleRecord]]:
    """Samples as loaded for a sequence (``sample_windows``), or as a batch brought them: the
    threads' samples, and the sampler's gaps (``wire.GAP_TID``), which a sequence reads where
    they overlap any of its invocations in their process, and which ``Store.stats`` leaves out of
    the samples it counts."""
    kept: list[SampleRecord] = []
    gaps: list[SampleRecord] = []
    for sample in samples:
        (gaps if sample.tid == GAP_TID else kept).append(sample)
    return kept, gaps


def sample_windows(
    invocations: Sequence[InvocationRecord], sampled: Collection[ThreadKey] | None = None
) -> dict[ThreadKey, list[Window]]:
    """Per thread, the union of the windows of the invocations that ran there, as sorted disjoint
    windows: a thread's samples are fetched once even where calls nest; and per process, of all
    its invocations, for its sampler's gaps (``GAP_TID``). With ``sampled`` (the threads the
    store holds samples of), only those threads': a sequence of threads never sampled costs
    nothing, however many calls it has."""
    gapped = sampled is None or any(tid == GAP_TID for _puid, tid in sampled)
    gaps = {
        (puid, GAP_TID): [span]
        for puid, span in (_process_spans(invocations) if gapped else {}).items()
        if sampled is None or (puid, GAP_TID) in sampled
    }
    if sampled is not None:
        if not sampled:
            return {}
        invocations = on_threads(invocations, sampled)
    if isinstance(invocations, RecordColumns):  # no record per call: one C pass per thread
        return thread_windows(invocations) | gaps
    spans: dict[ThreadKey, list[Window]] = {}
    for record in invocations:
        end = OPEN_END if record.end_ns is None else max(record.end_ns, record.start_ns + 1)
        spans.setdefault((record.puid, record.tid), []).append((record.start_ns, end))
    merged: dict[ThreadKey, list[Window]] = {}
    for key, windows in spans.items():
        windows.sort()
        union = [windows[0]]
        for start, end in windows[1:]:
            last_start, last_end = union[-1]
            if start <= last_end:
                union[-1] = (last_start, max(last_end, end))
            else:
                union.append((start, end))
        merged[key] = union
    return merged | gaps


def _process_spans(invocations: Sequence[InvocationRecord]) -> dict[int, Window]:
    """Per process, from the first start of its invocations to the last end (open: unending)."""
    spans: dict[int, Window] = {}
    if isinstance(invocations, RecordColumns):
        puids = set(invocations.puid)
        if len(puids) == 1:  # the usual big sequence: the arrays' own min and max
            low = min(invocations.start_ns, default=0)
            high = max(invocations.end_ns, default=0) if all(invocations.ended) else OPEN_END
            return {puid: (low, max(high, low + 1)) for puid in puids}
        ended: Iterable[int] = map(_end_or_open, invocations.end_ns, invocations.ended)
    else:
        ended = (OPEN_END if r.end_ns is None else r.end_ns for r in invocations)
    starts = field(invocations, "start_ns")
    for puid, start, end in zip(field(invocations, "puid"), starts, ended, strict=True):
        found = spans.get(puid)
        low, high = (start, end) if found is None else (min(found[0], start), max(found[1], end))
        spans[puid] = (low, max(high, low + 1))
    return spans


def _end_or_open(end_ns: int, ended: int) -> int:
    return end_ns if ended else OPEN_END


class _Stack(msgspec.Struct, array_like=True, frozen=True):
    """A stored sample's ``stack`` column: msgpack ``[[frame ids], [lines]]``, outermost
    first, then its ticks' offsets from ``t_ns`` when they are known (stored without a new
    schema: a stack stored before has two items)."""

    frames: tuple[int, ...]
    lines: tuple[int, ...]
    first_tick_ns: int | None = None
    last_tick_ns: int | None = None


_decode_stack: Final = msgspec.msgpack.Decoder(_Stack).decode
_encode: Final = msgspec.msgpack.Encoder().encode


def encode_stack(sample: SampleRecord) -> bytes:
    """The ``stack`` column of a sample (``_Stack``)."""
    first, last = tick_offsets(sample)
    if first is None:
        return _encode((sample.frames, sample.lines))
    return _encode((sample.frames, sample.lines, first, last))


def decode_stack(
    t_ns: int, stack: bytes
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, int] | None]:
    """Frames, lines and ticks (wall clock) of a stored sample at ``t_ns``."""
    decoded = _decode_stack(stack)
    first, last = decoded.first_tick_ns, decoded.last_tick_ns
    ticks = None if first is None or last is None else (t_ns + first, t_ns + last)
    return decoded.frames, decoded.lines, ticks


#: (t_ns, weight, duration_ns, cpu_ns, stack) of a stored sample.
SampleRow = tuple[int, int, int, int, bytes]


def read_windows(
    windows: dict[ThreadKey, list[Window]],
    longest: Callable[[int, int], int | None],
    in_window: Callable[[dict[str, Any]], Iterable[SampleRow]],
) -> list[SampleRecord]:
    """The samples overlapping ``windows`` (per thread, sorted and disjoint), by thread then
    time, each once even when it spans two windows: what the SQL backends share. ``longest``
    gives a thread's longest sample span (None: never sampled); ``in_window`` runs the backend's
    SAMPLES_IN_WINDOW with the parameters ``puid``, ``tid``, ``lowest``, ``start``, ``end``."""
    samples: list[SampleRecord] = []
    for (puid, tid), spans in sorted(windows.items()):
        span = longest(puid, tid)
        if span is None:
            continue  # never sampled
        reach = max(span, 1)
        seen: set[int] = set()
        for start, end in spans:
            params = {
                "puid": puid,
                "tid": tid,
                "lowest": max(I64_MIN, start - reach),
                "start": start,
                "end": end,
            }
            for t_ns, weight, duration_ns, cpu_ns, stack in in_window(params):
                if t_ns in seen:
                    continue
                seen.add(t_ns)
                frames, lines, ticks = decode_stack(t_ns, stack)
                samples.append(
                    SampleRecord(puid, tid, t_ns, weight, duration_ns, cpu_ns, frames, lines, ticks)
                )
    return samples


#: A connection's ``execute(query, params)`` (sqlite3 and psycopg alike): an iterable of rows.
Execute = Callable[[str, Any], Iterable[tuple[Any, ...]]]
#: Frame ids per ``IN (...)`` list, well under either database's limit on bound parameters.
_FRAME_CHUNK: Final = 500


def load_samples(
    execute: Execute, windows: dict[ThreadKey, list[Window]], *, mark: str, in_window_sql: str
) -> tuple[list[SampleRecord], dict[tuple[int, int], FrameRecord]]:
    """The samples overlapping ``windows`` (per thread, sorted and disjoint), by thread then
    time, each once even when it spans two windows; and the frames they use. ``mark`` is the
    backend's positional placeholder (``?``, ``%s``) and ``in_window_sql`` its statement of
    ``overlaps`` with named parameters."""

    def longest(puid: int, tid: int) -> int | None:
        query = f"SELECT longest_ns FROM sample_threads WHERE puid = {mark} AND tid = {mark}"
        for (found,) in execute(query, (puid, tid)):
            return int(found)
        return None

    def in_window(params: dict[str, Any]) -> Iterable[SampleRow]:
        return cast(Iterable[SampleRow], execute(in_window_sql, params))

    samples = read_windows(windows, longest, in_window)
    return samples, _frames(execute, samples, mark)


def _frames(
    execute: Execute, samples: Iterable[SampleRecord], mark: str
) -> dict[tuple[int, int], FrameRecord]:
    wanted: dict[int, set[int]] = {}
    for sample in samples:
        wanted.setdefault(sample.puid, set()).update(sample.frames)
    frames: dict[tuple[int, int], FrameRecord] = {}
    for puid, ids in sorted(wanted.items()):
        ordered = sorted(ids)
        for at in range(0, len(ordered), _FRAME_CHUNK):
            chunk = ordered[at : at + _FRAME_CHUNK]
            marks = ", ".join([mark] * len(chunk))
            query = (
                f"SELECT frame, file, function, line FROM frames "
                f"WHERE puid = {mark} AND frame IN ({marks})"
            )
            for frame, file, function, line in execute(query, (puid, *chunk)):
                frames[puid, frame] = FrameRecord(file, function, line)
    return frames


def sampler_record(report: SamplerReport) -> SamplerRecord:
    """What a store keeps of a sampler report: all of it, in the same order (its row in the
    ``samplers`` tables after the puid)."""
    return SamplerRecord(*msgspec.structs.astuple(report))


def load_samplers(execute: Execute) -> dict[int, SamplerRecord]:
    """Every process's last sampler report, by puid."""
    query = (
        "SELECT puid, mode, interval_ms, ticks, late_ticks, cost_ns, current_interval_ns, "
        "longest_interval_ns, dropped_samples FROM samplers ORDER BY puid"
    )
    return {puid: SamplerRecord(*report) for puid, *report in execute(query, ())}
