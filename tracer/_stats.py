"""``tracer.stats()``'s answer, ``TracerStats``: loaded when first asked for, not at import."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TracerStats:
    sent_events: int  # acknowledged by the repository
    dropped_events: int  # this process's own, dropped past the queue and the spool: the count
    # the repository is told (`cmr stats`)
    spooled_batches: int  # batches that went to the disk spool
    spooled_events: int  # this process's events in the spool, not yet sent (after shutdown: left
    # for the next run of the program)
    acked_batches: int
    resent_batches: int
    buffered_events: int  # recorded, not yet taken by the sender
    internal_errors: int
    # A spool file cut short by a crash is replayed up to its last whole record; the cut record
    # is lost: its events when its header survived, else the record alone (its count unknown).
    spool_lost_events: int = 0
    spool_lost_records: int = 0
    # Per repository node (endpoint): the batches it acknowledged first (several nodes listed in
    # `endpoint` share the work; a node that died acknowledges nothing more).
    acked_by_endpoint: dict[str, int] = field(default_factory=dict)
