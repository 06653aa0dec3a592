"""Drops whose sequences cannot be named are reported by their time (``Batch.lost_windows``):
the windows are bounded, travel once with the next batch, come back when that batch is dropped,
and go into the spool's report slot with the names it has no room for."""

from __future__ import annotations

import itertools
from pathlib import Path

import msgspec
import pytest

from invoseq import wire
from tracer._core import budget
from tracer._shipping import delivery as delivery_module
from tracer._shipping.delivery import Delivery, Outgoing
from tracer._shipping.endpoints import Nodes
from tracer._shipping.spool import Spool
from tracer._shipping.windows import MAX_WINDOWS, LostWindows

PUID = 7


def seq(n: int) -> bytes:
    return n.to_bytes(16, "big")


class DownNode:
    """A repository node that refuses every send."""

    def send(self, body: bytes) -> bool:
        return False

    def receive_acks(self, timeout_ms: int) -> list[wire.Ack]:
        return []

    def close(self) -> None:
        pass


def batch_body(batch_no: int, calls: list[tuple[int, int]], **fields: object) -> bytes:
    """An encoded batch of one thread: a Start and an End at (t, t + 1) for each (seq, t)."""
    events: list[tuple[object, ...]] = []
    for n, (s, t) in enumerate(calls, 1):
        events += [(wire.TAG_START, n, 0, 0, 1, t, seq(s)), (wire.TAG_END, n, t + 1)]
    process = wire.process_layout(
        pid=1, host="h", platform_id="p", clock_offset_ns=0, started_ns=0, argv=[], heartbeat_ms=0
    )
    layout = wire.batch_layout(
        puid=PUID, batch_no=batch_no, process=process, methods=[], threads=[],
        chunks=[(1, events)], **fields,
    )  # fmt: skip
    return msgspec.msgpack.encode(layout)


def decoded(body: bytes) -> wire.Batch:
    return msgspec.msgpack.decode(body, type=wire.Batch)


@pytest.fixture(name="delivery")
def fixture_delivery(tmp_path: Path) -> Delivery:
    """Nothing reaches the repository and nothing is queued or spooled: every batch drops."""
    return Delivery(
        Nodes({"a": DownNode()}), window=1, queue_batches=1, spool=None, resend_ns=10**12
    )


def test_windows_merge_where_they_meet_and_the_closest_past_the_bound() -> None:
    windows = LostWindows()
    windows.add((10, 20))
    windows.add((15, 30))  # meets the first
    assert windows.to_report() == ((10, 30),)
    for n in range(1, MAX_WINDOWS):
        windows.add((1000 * n, 1000 * n + 1))
    windows.add((45, 40))  # given backwards, and close to the first: merged with it
    reported = windows.to_report()
    assert len(reported) == MAX_WINDOWS
    assert reported[0] == (10, 45)
    windows.reported(reported[:2])
    assert windows.to_report() == reported[2:]


def test_a_dropped_batch_whose_sequences_do_not_fit_the_names_is_reported_by_its_time(
    delivery: Delivery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery_module, "MAX_UNREPORTED", 2)
    for batch_no, calls in enumerate([[(1, 100), (2, 150)], [(3, 300), (4, 350)]], 1):
        delivery.submit(Outgoing(PUID, batch_no, batch_body(batch_no, calls), events=4))
    delivery.submit(Outgoing(PUID, 3, batch_body(3, []), events=0))  # pushes the second out

    assert delivery.counters.dropped_events == 8
    assert delivery.lost_to_report() == (seq(1), seq(2))  # the first batch's: named
    assert delivery.windows.to_report() == ((300, 351),)  # the second's: its time
    assert delivery.counters.unnamed_lost_seqs >= 2

    # the next batch reports both; dropped in turn, it gives them back
    lost, windows = delivery.lost_to_report(), delivery.windows.to_report()
    body = batch_body(4, [(5, 500)], lost_seqs=lost, lost_windows=windows)
    assert decoded(body).lost_windows == [wire.LostWindow(300, 351)]
    delivery.submit(Outgoing(PUID, 4, body, events=2, reports=lost, windows=windows))
    assert delivery.windows.to_report() == ()
    delivery.submit(Outgoing(PUID, 5, batch_body(5, []), events=0))  # the fourth drops
    assert set(delivery.lost_to_report()) == {seq(1), seq(2)}
    assert delivery.windows.to_report() == ((300, 351), (500, 501))  # seq 5 did not fit either


def test_calls_the_memory_bound_turned_away_past_the_names_are_reported_by_their_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    budget.take_overflow()  # what earlier tests left
    monkeypatch.setattr(budget, "_MAX_OVERFLOW_SEQS", 1)
    times = itertools.count(1000, 1000)
    monkeypatch.setattr(budget._clock, "now", lambda: next(times))
    budget.overflow((seq(1),))  # named
    budget.overflow((seq(1),))  # the same: named already, no time taken
    budget.overflow(None)  # no sequence: nothing to mark
    budget.overflow((seq(2),))  # past the names
    budget.overflow((seq(3),))
    assert budget.take_overflow() == (10, {seq(1)}, (1000, 2000))
    assert budget.take_overflow() == (0, set(), None)


def test_the_report_slot_gives_the_time_of_the_names_it_has_no_room_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery_module, "REPORT_LOST_SEQS", 1)
    reports: list[tuple[tuple[bytes, ...], tuple[tuple[int, int], ...]]] = []

    def reporter(
        batch_no: int | None, lost: tuple[bytes, ...], windows: tuple[tuple[int, int], ...]
    ) -> tuple[int, int, bytes]:
        reports.append((lost, windows))
        return PUID, 99, b"report"

    spool = Spool(str(tmp_path), 2**16, "test")
    assert spool.append(PUID, 1, b"a batch", 2)  # the file, with its report slot
    delivery = Delivery(
        Nodes({"a": DownNode()}), window=1, queue_batches=1, spool=spool, resend_ns=10**12,
        reporter=reporter,
    )  # fmt: skip
    try:
        delivery.drop_unsent(4, {seq(1), seq(2)}, (100, 200), unnamed=(300, 310))
        delivery.write_report()
    finally:
        delivery.close()
    ((lost, windows),) = reports
    assert len(lost) == 1  # room for one name: the other is known by the time of the drops
    assert windows == ((100, 200), (300, 310))
