"""Rules every backend applies the same way, kept in one place so the backends cannot drift.

The sequences a batch reports lossy, parsing a sequence-id prefix, the one-line lookup errors, how a
sequence's root is chosen, when a process counts as lost and how a sequence's status is derived:
the contract tests check each backend against these, and both backends call them rather than
restating them (SQL backends restate them in SQL, next to which the rule is named).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cmr.store.base import (
    REMOTE_PARENT,
    AmbiguousSequenceError,
    SequenceSummary,
    StoreError,
    UnknownSequenceError,
    unique_prefix,
)

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

    from cmr.store.base import InvocationRecord, Neighbours, OnStep, SequenceData
    from invoseq.wire import Batch

SEQ_HEX_DIGITS: Final = 32
#: How many matches an ambiguous prefix lookup names in its message.
SHOWN_MATCHES: Final = 5

#: A process that promised a heartbeat (``ProcessInfo.heartbeat_ms`` > 0) is lost once the
#: repository has heard nothing from it for longer than MISSED_HEARTBEATS intervals plus
#: LOST_GRACE_MS: one late batch is not a death, and the grace covers a slow network, a busy
#: repository and a sender retrying after a lost acknowledgement.
MISSED_HEARTBEATS: Final = 3
LOST_GRACE_MS: Final = 1_000

RUNNING: Final = "running"
INCOMPLETE: Final = "incomplete"
COMPLETE: Final = "complete"

#: (hid, seq, puid, parent, kind, method, submitted_ns) — column order of the ``handoffs`` table.
HandoffRow = tuple[int, bytes, int, int, str, int, int]


#: (seq, puid) — column order of the ``lost_seqs`` table: process puid dropped events of seq.
LostRow = tuple[bytes, int]


def lost_rows(batch: Batch) -> list[LostRow]:
    """The sequences the batch's process reports it dropped events of, each once."""
    return [(seq, batch.puid) for seq in sorted(set(batch.lost_seqs))]


#: (puid, first_ns, last_ns) — column order of the ``lost_windows`` table, wall clock: process
#: puid dropped events of sequences it could not name between those times.
LostWindowRow = tuple[int, int, int]


def lost_window_rows(batch: Batch) -> list[LostWindowRow]:
    """The batch's windows of unnamed drops (``Batch.lost_windows``) in wall-clock time, each
    once."""
    offset, puid = batch.process.clock_offset_ns, batch.puid
    return sorted({(puid, w.first_ns + offset, w.last_ns + offset) for w in batch.lost_windows})


def overlaps_window(window: tuple[int, int], start_ns: int, end_ns: int | None) -> bool:
    """Whether a sequence from ``start_ns`` (its earliest Start) to ``end_ns`` (its root's end;
    None: not ended, so on until now) meets the window: it is lossy by it."""
    return window[0] <= (end_ns if end_ns is not None else window[0]) and window[1] >= start_ns


@dataclass(frozen=True, slots=True)
class SeqRange:
    """The half-open range of 16-byte sequence ids that start with a hex prefix."""

    prefix: str  # normalised: lower case
    lo: bytes
    hi: bytes | None  # None when the range runs to the largest id

    def contains(self, seq: bytes) -> bool:
        return self.lo <= seq and (self.hi is None or seq < self.hi)


def seq_range(prefix: str) -> SeqRange:
    """Parse a user-given id prefix; odd lengths work ('abc' covers abc000… up to abd000…)."""
    text = prefix.strip().lower()
    if not 1 <= len(text) <= SEQ_HEX_DIGITS or any(c not in "0123456789abcdef" for c in text):
        raise UnknownSequenceError(
            f"'{prefix}' is not a sequence id: give 1 to {SEQ_HEX_DIGITS} hex digits"
        )
    shift = 4 * (SEQ_HEX_DIGITS - len(text))
    value = int(text, 16)
    lo = (value << shift).to_bytes(16, "big")
    upper = (value + 1) << shift
    hi = upper.to_bytes(16, "big") if upper < 2**128 else None
    return SeqRange(text, lo, hi)


def pick_match(wanted: SeqRange, count: int, first: list[bytes]) -> bytes:
    """The single match of a prefix lookup, or the one-line error the user sees.

    ``count`` is how many sequences matched; ``first`` the smallest few of them, ascending."""
    if count == 0:
        raise UnknownSequenceError(f"no sequence matches '{wanted.prefix}'")
    if count == 1:
        return first[0]
    listed = first[:SHOWN_MATCHES]
    before: list[bytes | None] = [None, *listed[:-1]]
    after: list[bytes | None] = [*listed[1:], None]
    shown = ", ".join(
        unique_prefix(seq, around) + "…"
        for seq, around in zip(listed, zip(before, after, strict=True), strict=True)
    )
    more = ", …" if count > SHOWN_MATCHES else ""
    raise AmbiguousSequenceError(
        f"'{wanted.prefix}' matches {count} sequences: {shown}{more}; give more digits"
    )


def neighbours_in(ordered: Sequence[bytes], seqs: Iterable[bytes]) -> dict[bytes, Neighbours]:
    """``Store.neighbours`` over ``ordered``, every id stored in ascending order (a store that
    holds them in memory): two bisections per id."""
    found: dict[bytes, Neighbours] = {}
    for seq in seqs:
        below = bisect.bisect_left(ordered, seq)
        above = bisect.bisect_right(ordered, seq)
        found[seq] = (
            ordered[below - 1] if below else None,
            ordered[above] if above < len(ordered) else None,
        )
    return found


def lost_after_ns(heartbeat_ms: int) -> int:
    """How long a process that promised ``heartbeat_ms`` may stay silent before it is lost."""
    return (MISSED_HEARTBEATS * heartbeat_ms + LOST_GRACE_MS) * 1_000_000


def is_lost(*, ended: bool, heartbeat_ms: int, last_seen_ns: int, now_ns: int) -> bool:
    """Lost: it promised heartbeats and has been silent past the bound at ``now_ns``. Computed at
    every read, so a batch from a process thought lost makes it alive again. A process that
    ended, or never promised a heartbeat (``heartbeat_ms`` 0), is never lost."""
    return not ended and heartbeat_ms > 0 and now_ns - last_seen_ns > lost_after_ns(heartbeat_ms)


def root_rank(parent: int, hid: int, start_ns: int, puid: int, iid: int) -> tuple[int, ...]:
    """Sort key choosing a sequence's root: the earliest invocation with no parent and no hand-off;
    failing that (its Start has not arrived yet, or the sequence came from a foreign system) the
    earliest parentless invocation, then the earliest of all. SQL backends order the same way."""
    return (parent != 0, hid != 0, start_ns, puid, iid)


@dataclass(frozen=True, slots=True)
class RootCandidate:
    """The first invocation by ``root_rank``: its links, display name and end."""

    parent: int
    hid: int
    name: str
    end_ns: int | None
    error: str | None = None  # the exception type it raised, if it did


@dataclass(frozen=True, slots=True)
class RemoteEntries:
    """The invocations that continue a hand-off nobody here recorded (``hid`` ≠ 0, no Handoff
    with that hid in the repository, ``parent`` 0): how many, how many are still open, and the
    latest end among them."""

    count: int
    open: int
    latest_end_ns: int | None


def summary_root(best: RootCandidate, remote: RemoteEntries) -> tuple[str, int | None, str | None]:
    """The root name, end and exception a listing shows, agreeing with the tree ``cmr show``
    builds.

    Precedence: a true root (no parent, no hand-off) is the root; without one, a sequence with
    remote entries was started by a foreign system and is rooted at REMOTE_PARENT, which ends when
    all of them have; otherwise (events were lost) the best candidate is named, as the best
    guess there is."""
    if best.parent == 0 and best.hid == 0:
        return best.name, best.end_ns, best.error
    if remote.count:
        return REMOTE_PARENT, None if remote.open else remote.latest_end_ns, None
    return best.name, best.end_ns, best.error


def sequence_status(end_ns: int | None, open_alive: Iterable[bool]) -> str:
    """A sequence's status follows its root, the one a listing names (``summary_root``): it is
    complete once that root has ended (``end_ns``), whatever still runs beneath it (a thread,
    task or process it started and did not wait for, a generator it left suspended: detached
    work); before that it is running while one of the root's open invocations (the true root,
    the open entries of a remote parent, or the candidate named when the root was lost) may
    still end, its process alive (``open_alive``: one flag each), and incomplete when none will."""
    if end_ns is not None:
        return COMPLETE
    return RUNNING if any(open_alive) else INCOMPLETE


def qualified_name(module: str | None, qualname: str | None, method: int) -> str:
    """The display name of a method; a placeholder when its MethodInfo never arrived."""
    if qualname is None:
        return f"<unknown method {method}>"
    return f"{module}.{qualname}" if module else qualname


def check_limit(limit: int) -> None:
    if limit < 0:
        raise StoreError(f"limit must be 0 or more, not {limit}")


def summarize(data: SequenceData, start_ns: int) -> SequenceSummary:
    """A listing's line for a sequence, from its records (``processes`` read as of now): the
    rules above applied to the invocations themselves."""
    invocations = data.invocations
    first = min(invocations, key=lambda r: root_rank(r.parent, r.hid, r.start_ns, r.puid, r.iid))
    method = data.methods.get((first.puid, first.method))
    best = RootCandidate(
        parent=first.parent,
        hid=first.hid,
        name=qualified_name(
            method.module if method else None, method.qualname if method else None, first.method
        ),
        end_ns=first.end_ns,
        error=first.error,
    )
    remote = RemoteEntries(0, 0, None)
    entries: list[InvocationRecord] = []
    if best.parent or best.hid:  # no true root: look for remote entries
        entries = [r for r in invocations if r.parent == 0 and r.hid and r.hid not in data.handoffs]
        ends = [r.end_ns for r in entries if r.end_ns is not None]
        remote = RemoteEntries(len(entries), len(entries) - len(ends), max(ends, default=None))
    root, root_end_ns, root_error = summary_root(best, remote)
    # The root's invocations still open: the status waits on them (``sequence_status``).
    waiting = [r for r in (entries if remote.count else [first]) if r.end_ns is None]
    return SequenceSummary(
        seq=data.seq,
        root=root,
        start_ns=start_ns,
        end_ns=root_end_ns,
        invocations=len(invocations),
        threads=len({(r.puid, r.tid) for r in invocations}),
        processes=len({r.puid for r in invocations}),
        status=sequence_status(root_end_ns, [not data.processes[r.puid].finished for r in waiting]),
        lossy=bool(data.lost_by),
        error=root_error,
    )


def step_counter(on_step: OnStep | None, total: int) -> Callable[[], None]:
    """A long operation's ``step()``, called after each of its ``total`` steps: tells ``on_step``
    how far it has gone (``Store.prune``'s progress)."""
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if on_step is not None:
            on_step(done, total)

    return step
