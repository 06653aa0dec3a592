"""The charts above `cmr ui`'s list, as the server draws them: the log scale of durations, the
time axis, one mark per listed sequence, and the histogram's percentile markers (cmr top's)."""

from __future__ import annotations

import itertools
import re

import pytest

from cmr.store.base import SequenceSummary
from cmr.ui.charts import render_charts
from cmr.ui.histogram import LABEL_GAP, bands, markers, render_histogram
from cmr.ui.scales import PLOT_BOTTOM, PLOT_TOP, LogScale, log_scale, time_scale
from cmr.ui.scatter import decade_label
from cmr.views.analyses.top import TopRow, percentile

MS = 1_000_000
NOW = 1_800_000_000 * 1_000_000_000


def line(
    n: int, duration_ns: int | None, status: str = "complete", **fields: object
) -> SequenceSummary:
    start = NOW - 60_000 * MS + n * 100 * MS
    end = None if duration_ns is None else start + duration_ns
    return SequenceSummary(
        seq=n.to_bytes(16, "big"),
        root=str(fields.get("root", "shop.checkout")),
        start_ns=start,
        end_ns=end,
        invocations=1,
        threads=1,
        processes=1,
        status=status,
        error=fields.get("error"),  # type: ignore[arg-type]
    )


def test_a_log_scale_spans_whole_decades_and_gives_each_the_same_height() -> None:
    scale = log_scale([3 * MS, 70 * MS, 450_000], PLOT_TOP, PLOT_BOTTOM)
    assert (scale.low_ns, scale.high_ns) == (100_000, 100 * MS)
    assert scale.ticks() == [100_000, MS, 10 * MS, 100 * MS]
    ys = [scale.y(tick) for tick in scale.ticks()]
    assert ys[0] == PLOT_BOTTOM
    assert ys[-1] == PLOT_TOP
    steps = {round(a - b, 6) for a, b in itertools.pairwise(ys)}
    assert len(steps) == 1  # a decade is a decade, wherever it sits
    # halfway up a decade on the log scale is its geometric middle, not its arithmetic one
    assert scale.y(round(10**6.5)) == pytest.approx((scale.y(MS) + scale.y(10 * MS)) / 2)
    assert scale.y(0) == PLOT_BOTTOM  # nothing below the axis, 0 ns at its foot
    assert decade_label(100_000) == "100 µs"
    assert decade_label(10 * MS) == "10 ms"


def test_a_log_scale_is_at_least_a_decade_even_for_one_duration() -> None:
    assert log_scale([MS], 0, 100) == LogScale(MS, 10 * MS, 0, 100)
    assert log_scale([], 0, 100).ticks()[0] == 1_000  # nothing ended: 1 µs to 1 s


def test_the_time_axis_holds_every_start_and_ticks_at_round_moments() -> None:
    starts = [NOW, NOW + 2_500 * MS, NOW + 9_000 * MS]
    scale = time_scale(starts, 60, 700)
    assert all(60 < scale.x(start) < 700 for start in starts)
    ticks = scale.ticks()
    assert 2 <= len(ticks) <= 6
    assert all(scale.first_ns <= tick <= scale.last_ns for tick in ticks)
    assert len({b - a for a, b in itertools.pairwise(ticks)}) == 1
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", scale.label(tick)) for tick in ticks)
    single = time_scale([NOW], 0, 100)
    assert single.x(NOW) == 50
    assert single.last_ns - single.first_ns == 1_000 * MS


def test_one_mark_per_listed_sequence_each_linking_to_its_view() -> None:
    summaries = [
        line(1, 2 * MS),
        line(2, 40 * MS, error="ValueError"),
        line(3, None, status="running"),
        line(4, None, status="incomplete"),
        line(5, 300 * MS, root="<b>&"),
    ]
    page = render_charts(summaries, NOW, "/seq/{seq}")
    marks = re.findall(r"<a class='dot s-(\w+)' href='/seq/(\w+)' data-seq='\w+'>", page)
    assert [status for status, _ in marks].count("complete") == 2
    assert sorted(marks) == sorted(
        [
            ("complete", summaries[0].seq.hex()),
            ("error", summaries[1].seq.hex()),
            ("running", summaries[2].seq.hex()),
            ("incomplete", summaries[3].seq.hex()),
            ("complete", summaries[4].seq.hex()),
        ]
    )
    # the running one at how long it has run so far; the incomplete one, a cross in the strip
    assert re.search(r"s-running'[^>]*><circle [^>]*r='4.5'/><title>[^<]* so far · running", page)
    assert re.search(r"s-incomplete'[^>]*><path d='M[\d.]+,10.5", page)
    assert "&lt;b&gt;&amp;" in page
    assert "<b>&" not in page
    assert render_charts([], NOW, "/seq/{seq}") == "<section id='charts'></section>"


def test_the_percentiles_are_cmr_tops_and_marked_where_they_fall() -> None:
    durations = [k * MS for k in range(1, 101)] + [5_000 * MS]
    scale = log_scale(durations, PLOT_TOP, PLOT_BOTTOM)
    found = {marker.label: marker for marker in markers(durations, scale)}
    top = TopRow("x", durations=durations)
    for label, share in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert found[label].ns == top.percentile(share) == percentile(durations, share)
        assert found[label].y == scale.y(found[label].ns)
    assert (found["p50"].ns, found["p90"].ns, found["p99"].ns) == (51 * MS, 91 * MS, 100 * MS)
    # p90 and p99 are close: their labels move apart, the higher upwards; the lines stay
    assert found["p90"].label_y - found["p99"].label_y >= LABEL_GAP
    svg = render_histogram(durations, 103, scale)
    assert f"data-pct='p99' data-ns='{100 * MS}'" in svg
    assert ">p99 100 ms</text>" in svg
    assert "101 of 103 ended" in svg


def test_bands_count_every_duration_once_in_fifths_of_a_decade() -> None:
    durations = [MS, MS + 1, 1_584_000, 1_585_000, 9 * MS, 10 * MS, 0]
    scale = log_scale(durations, PLOT_TOP, PLOT_BOTTOM)
    found = bands(durations, scale)
    assert len(found) == 5 * 7  # 1 ns .. 10 ms: seven decades
    assert sum(band.count for band in found) == len(durations)
    by_low = {band.low_ns: band.count for band in found}
    assert by_low[MS] == 3  # 1 ms up to 10^6.2 ns (1.585 ms)
    assert by_low[1_584_893] == 1
    assert found[-1].count == 2  # 9 ms and 10 ms, the top band holding its upper edge
    assert found[0].count == 1  # 0 ns, drawn at the foot


def test_nothing_ended_draws_no_percentile() -> None:
    scale = log_scale([], PLOT_TOP, PLOT_BOTTOM)
    assert markers([], scale) == []
    assert "data-pct" not in render_histogram([], 2, scale)
