"""A new sequence id starts with the second it was drawn in (modulo 65,536) and is random after
that: a repository's index by id is appended to, and the id stays a W3C trace-id."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from benchmarks import synthetic
from tracer._core import accel, ids
from tracer.testing import capture

DRAWS: list[tuple[str, Callable[[], bytes]]] = [("python", ids.new_seq)]
if accel.speedups is not None:
    DRAWS.append(("c", accel.speedups.new_seq))


@pytest.mark.parametrize("draw", [d for _, d in DRAWS], ids=[name for name, _ in DRAWS])
def test_a_sequence_id_starts_with_the_second_it_was_drawn_in(draw: Callable[[], bytes]) -> None:
    before = time.time()
    drawn = [draw() for _ in range(64)]
    after = time.time()
    # the C draw reads the coarse clock, which may be a tick behind time.time()
    seconds = {second & 0xFFFF for second in range(int(before) - 1, int(after) + 1)}
    assert {int.from_bytes(seq[:2], "big") for seq in drawn} <= seconds
    assert all(len(seq) == 16 for seq in drawn)


@pytest.mark.parametrize("draw", [d for _, d in DRAWS], ids=[name for name, _ in DRAWS])
def test_every_bit_after_the_second_is_random_but_the_one_that_keeps_it_nonzero(
    draw: Callable[[], bytes],
) -> None:
    drawn = [int.from_bytes(draw(), "big") for _ in range(256)]
    random_bits = 128 - ids.SECOND_BITS
    varying = {bit for bit in range(random_bits) if len({(d >> bit) & 1 for d in drawn}) == 2}
    assert varying == set(range(random_bits)) - {ids.NONZERO_BIT.bit_length() - 1}
    assert all(d & ids.NONZERO_BIT for d in drawn)


def test_the_python_draw_follows_the_clock_forward_and_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # it makes a second's bits once and reuses them while the clock stays in that second
    readings = iter([70_000.25, 70_000.75, 70_001.0, 69_999.5])
    monkeypatch.setattr(ids, "_time", lambda: next(readings))
    seconds = [int.from_bytes(ids.new_seq()[:2], "big") for _ in range(4)]
    assert seconds == [70_000 & 0xFFFF, 70_000 & 0xFFFF, 70_001 & 0xFFFF, 69_999 & 0xFFFF]


def test_synthetic_traffic_draws_its_ids_as_the_tracer_does() -> None:
    # benchmarks.synthetic keeps its own copy of the layout (it loads nothing of the tracer)
    assert (synthetic.SECOND_BITS, synthetic.NONZERO_BIT) == (ids.SECOND_BITS, ids.NONZERO_BIT)
    clock_ns = 5 * 10**9
    seq = int.from_bytes(synthetic.sequence_id(clock_ns), "big")
    second = (synthetic.CLOCK_OFFSET_NS + clock_ns) // 10**9
    assert seq >> (128 - ids.SECOND_BITS) == second & 0xFFFF
    assert seq & ids.NONZERO_BIT


def test_a_measured_request_draws_its_sequence_from_the_traced_calls_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request, a task or the service's start (``measured.begin``) draws a new sequence the way
    a traced root does: the accelerator's generator when it is there, a test's replacement of
    ``decorator._new_seq`` when there is one."""
    from tracer._core import decorator, measured

    with capture(sample_interval_ms=0):
        call = measured.begin(None)
        assert call is not None
        call.finish(measured.method("tests", "request"))
        assert int.from_bytes(call.seq[:2], "big") in {
            second & 0xFFFF for second in range(int(time.time()) - 2, int(time.time()) + 1)
        }
        monkeypatch.setattr(decorator, "_new_seq", lambda: (7).to_bytes(16, "big"))
        call = measured.begin(None)
        assert call is not None
        call.finish(measured.method("tests", "request"))
        assert call.seq == (7).to_bytes(16, "big")
