"""Folding hand-offs that ran nothing traced: less noise in every tree.

When work is handed to another thread or task and the callable is not traced, the tracer times
the callable itself as a call of its own (so a slow untraced task still shows). Most such calls
are noise: the thread ``asyncio.run`` starts for ``_do_shutdown`` at the end of every run, a
``to_thread(sum, ...)``. ``fold_empty_hops`` leaves out those that ran no traced call, ended,
did not raise and hold no stack sample, and counts them on the call that handed them off
(``SequenceData.folded``): ``cmr show`` says so on that call's line, ``--json`` gives the count,
and ``--all`` shows them.

Such a call is recognised by its method: the tracer names it with the hand-off's own method id,
while a traced function that continues a hand-off carries its own (decorator) method id, never
the hand-off's. Its time becomes its submitter's self time, as for any code not traced.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from cmr.store.base import InvocationRecord, SequenceData
from cmr.store.columns import handed_off


def fold_empty_hops(data: SequenceData) -> SequenceData:
    """``data`` without the calls of untraced callables that ran nothing traced (ended, no
    error), each counted on the call that handed it off; ``data`` itself when there are none."""
    handoffs = data.handoffs
    if not handoffs:
        return data
    hops = [
        r
        for r in handed_off(data.invocations)  # a few records, even of a million
        if r.end_ns is not None
        and r.error is None
        and (h := handoffs.get(r.hid)) is not None
        and h.puid == r.puid
        and h.method == r.method
    ]
    if not hops:
        return data
    callers = {(r.puid, r.parent) for r in data.invocations if r.parent}
    callers.update((h.puid, h.parent) for h in handoffs.values())
    present = {(r.puid, r.iid) for r in data.invocations}
    sampled = {(sample.puid, sample.tid) for sample in data.samples}
    empty = {
        (r.puid, r.iid)
        for r in hops
        if (r.puid, r.iid) not in callers
        # its submitter is here to count it (never fold a call with no caller to hold it)
        and (handoffs[r.hid].puid, handoffs[r.hid].parent) in present
        and ((r.puid, r.tid) not in sampled or not _sampled_within(data, r))
    }
    if not empty or len(empty) == len(present):
        return data
    folded = Counter(
        (handoffs[r.hid].puid, handoffs[r.hid].parent) for r in hops if (r.puid, r.iid) in empty
    )
    kept = [r for r in data.invocations if (r.puid, r.iid) not in empty]
    threads = frozenset((r.puid, r.tid) for r in hops if (r.puid, r.iid) in empty)
    return dataclasses.replace(data, invocations=kept, folded=dict(folded), folded_threads=threads)


def _sampled_within(data: SequenceData, record: InvocationRecord) -> bool:
    """Whether a sample of the call's thread fell in its window: then the samples show what the
    untraced code ran, and the call stays to hold them."""
    end = record.end_ns if record.end_ns is not None else record.start_ns
    return any(
        s.puid == record.puid and s.tid == record.tid and record.start_ns <= s.t_ns <= end
        for s in data.samples
    )
