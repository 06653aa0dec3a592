"""Time the sampler did not tick (its gaps) while a sequence ran: measured within the sequence
and said in the header, unless it is a short part of it."""

from __future__ import annotations

import dataclasses

from cmr.store.base import SampleRecord
from cmr.views.render.text import render_header
from cmr.views.samples.merge import merge_samples
from cmr.views.tree.calltree import build_tree
from tests.cmr.views.conftest import two_tasks as _two_tasks


def _gap(t: int, duration: int) -> SampleRecord:
    """A sampler gap of process 1 (``invoseq.wire.GAP_TID``): no thread read from ``t``."""
    return SampleRecord(1, 0, t, max(1, duration // 10), duration, 0, (), ())


def test_time_the_sampler_did_not_tick_is_measured_within_the_sequence_and_said(builder):
    _two_tasks(builder)  # main runs 0-100
    data = dataclasses.replace(
        builder.data(), gaps=[_gap(-50, 60), _gap(5, 20), _gap(60, 60)]
    )  # 10 before-and-into, 5-25 (overlapping the first), 60-100 (cut at main's end)

    tree = merge_samples(build_tree(data), data)

    assert tree.unsampled_ns == 10 + 15 + 40
    assert "≈ 65 ns of this sequence passed without a tick of the sampler" in render_header(tree)


def test_a_short_gap_is_not_said(builder):
    _two_tasks(builder)
    data = dataclasses.replace(builder.data(), gaps=[_gap(50, 9)])

    tree = merge_samples(build_tree(data), data)

    assert tree.unsampled_ns == 9  # under a tenth of the sequence's 100 ns
    assert "without a tick of the sampler" not in render_header(tree)
