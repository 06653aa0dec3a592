"""Hypothesis strategies for batches of events whose ids and times collide often: repeated
Starts and Ends, equal times, Ends before their Starts, Errors, Attrs and Handoffs mixed in."""

from __future__ import annotations

from hypothesis import strategies as st

from invoseq import wire

SEQ = bytes(range(16))
OTHER = bytes(range(1, 17))
PUIDS = (3, 7)

iids = st.integers(1, 6)
times = st.integers(-5, 5)  # few values: equal start times and reordered ends happen
starts = st.builds(
    wire.Start,
    iids,
    st.integers(0, 6),
    st.sampled_from([0, 0, 9]),
    st.integers(1, 3),
    times,
    st.sampled_from([SEQ, SEQ, OTHER]),
)
ends = st.builds(wire.End, iids, times)
errors = st.builds(wire.Error, iids, times, st.sampled_from(["ValueError", "KeyError"]))
values = st.integers(-3, 3) | st.text(max_size=3) | st.booleans() | st.floats(allow_nan=False)
attrs = st.builds(wire.Attrs, iids, st.dictionaries(st.sampled_from("ab"), values, max_size=2))
handoffs = st.builds(
    wire.Handoff, st.integers(1, 3), iids, st.just("thread"), st.integers(1, 3), times, st.just(SEQ)
)
events = st.one_of(starts, starts, ends, ends, errors, attrs, handoffs)
chunks = st.builds(wire.ThreadChunk, st.integers(1, 3), st.lists(events, max_size=12))
batches = st.lists(st.lists(chunks, min_size=1, max_size=3), min_size=1, max_size=3)
processes = st.dictionaries(st.sampled_from(PUIDS), batches, min_size=1)
