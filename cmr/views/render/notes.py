"""The lines under a sequence's header that say what its tree cannot show exactly: events its
processes dropped, samples that could not tell interleaved tasks apart, an event loop read where
it gave up the GIL, and time in which the sampler did not tick."""

from __future__ import annotations

from typing import Final

from cmr.views.model import SequenceTree
from cmr.views.render.terms import (
    Palette,
    format_duration,
    format_time_of_day,
    plural,
    printable,
)


def header_notes(tree: SequenceTree, palette: Palette) -> list[str]:
    """The notes that apply to ``tree``, in the order the header shows them."""
    notes = []
    if tree.lossy:
        notes.append(_lossy_note(tree, palette))
    if tree.samples_between_tasks:
        notes.append(_between_tasks_note(tree, palette))
    if tree.loop_busy_samples and tree.loop_busy_samples * LOOP_BUSY_SHARE >= tree.samples_placed:
        notes.append(_loop_busy_note(tree, palette))
    duration = tree.root.duration_ns
    if tree.unsampled_ns and (duration is None or tree.unsampled_ns * UNSAMPLED_SHARE >= duration):
        notes.append(_unsampled_note(tree, palette))
    return notes


#: Time without a tick of the sampler is said when it is at least a tenth of the sequence's.
UNSAMPLED_SHARE: Final = 10


def _unsampled_note(tree: SequenceTree, palette: Palette) -> str:
    """A header line: the sampler did not tick for part of the sequence (``merge.unsampled``)."""
    return (
        f"{palette.yellow}≈ {format_duration(tree.unsampled_ns)} of this sequence passed "
        "without a tick of the sampler (kept from the GIL by a thread that gives it up only "
        "for moments, or off the CPU): nothing was sampled then, and the estimates miss it "
        "(with the C accelerator the sampler takes the GIL at each tick: docs/guide.md)"
        f"{palette.reset}"
    )


#: Samples that showed an event loop waiting while its thread was mostly on the CPU are flagged
#: when they are a tenth or more of the placed samples (by weight). A loop the sampler reads
#: where it is shows there about as often as it really is (1 sample of 45 in a traced loop of
#: 1 ms steps on another thread); one read at its GIL releases, nearly always (277 of 289). By
#: count, not time: a sample at the loop stands for a whole tick, one in a short call only for
#: the part of its tick inside that call.
LOOP_BUSY_SHARE: Final = 10


def _loop_busy_note(tree: SequenceTree, palette: Palette) -> str:
    """A header line: an event loop read where it gave up the GIL (pure Python), whose tasks'
    estimates miss what that time really was."""
    return (
        f"{palette.yellow}≈ {format_duration(tree.loop_busy_ns)} of CPU was sampled as the event "
        "loop waiting between task steps: a sampler thread that waits for the GIL sees a busy "
        "loop only where it gives the GIL up, so that time went to the tasks, which ones "
        "unknown, and their estimates miss it (with the C accelerator the sampler takes the "
        f"GIL at each tick and sees the loop where it is: docs/guide.md){palette.reset}"
    )


def _between_tasks_note(tree: SequenceTree, palette: Palette) -> str:
    """A header line: samples that could not tell which of interleaved tasks they saw (the
    guide's "asyncio" under the sampler)."""
    count = tree.samples_between_tasks
    return (
        f"{palette.dim}≈ {plural(count, 'sample')} fell among interleaved asyncio tasks "
        "without showing which (the event loop between steps, or a function several tasks "
        "run): they are under the call the tasks run under, not guessed onto one."
        f"{palette.reset}"
    )


def _lossy_note(tree: SequenceTree, palette: Palette) -> str:
    """A second header line: the tree may miss calls, and which process lost them; a process
    known by a time window (it could not name the sequences it dropped events of) says when."""
    windows = {puid: (first, last) for puid, first, last in tree.dropped_in_window}
    named = [p for p in tree.dropped_by if p.puid not in windows]
    parts = []
    if named:
        names = ", ".join(f"{printable(p.host)}:{p.pid}" for p in named)
        noun = "process" if len(named) == 1 else "processes"
        parts.append(f"some events of this sequence were dropped by {noun} {names}")
    for process in tree.dropped_by:
        if process.puid in windows:
            first, last = windows[process.puid]
            parts.append(
                f"process {printable(process.host)}:{process.pid} dropped events between "
                f"{format_time_of_day(first)} and {format_time_of_day(last)}, of sequences it "
                "could not name, and this sequence ran then"
            )
    return f"{palette.yellow}lossy: {'; '.join(parts)}{palette.reset}"
