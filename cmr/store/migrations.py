"""The one migration runner both SQL stores use: a schema is a linear list of versioned steps.

A ``Step`` is a version, a name, its statements and, when rows must be moved or computed, a
Python function (``data``). A store's steps are numbered 1, 2, 3, … in order, so a new schema
version is one entry at the end of its list. ``upgrade`` applies the steps above the stored
version up to the latest, in order, and records each version as it goes; the store runs it inside
one transaction, so an upgrade happens whole or not at all.

Where a step's data function runs is the store's choice (``data_last``): PostgreSQL's are
written against the schema of their own version and run right after their statements;
SQLite's are written with the store's current code (the legacy rows moved with today's index
writer, the listing lines computed with today's summaries), so they run once every statement
has, the schema being current by then.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmr.store.base import StoreError

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True): the read side
if TYPE_CHECKING:  # loads this module with the schema, and `cmr ls` loads no typing
    from collections.abc import Callable, Sequence
    from typing import Any


@dataclass(frozen=True, slots=True)
class Step:
    """One schema version: what it adds, as statements and optionally as Python (which takes the
    store's connection)."""

    version: int
    name: str
    statements: tuple[str, ...]
    #: Rows moved or computed for this version (None: the statements are all).
    data: Callable[[Any], None] | None = None


def latest(steps: Sequence[Step]) -> int:
    """The version the steps lead to; they must be numbered 1, 2, 3, … in order."""
    versions = [step.version for step in steps]
    if versions != list(range(1, len(steps) + 1)):
        raise ValueError(f"schema steps are not numbered 1 to {len(steps)} in order: {versions}")
    return len(steps)


def upgrade(
    conn: Any,
    steps: Sequence[Step],
    stored: int,
    *,
    execute: Callable[[Any, str], object],
    record: Callable[[Any, Step], object],
    upto: int | None = None,
    data_last: bool = False,
) -> int:
    """Apply the steps after version ``stored`` up to ``upto`` (default: the latest) in order,
    recording each; returns the version reached. The caller holds the transaction."""
    last = latest(steps) if upto is None else upto
    if not 0 <= stored <= latest(steps):
        raise StoreError(f"unknown repository schema version {stored}")
    pending = [step for step in steps if stored < step.version <= last]
    if pending and stored > 0:  # an existing repository: say why its opening takes a while
        import logging  # loaded for an upgrade only

        logging.getLogger("cmr.store").warning(
            "upgrading the repository from schema version %d to %d (%s): one transaction, "
            "run once; a large repository takes a while",
            stored,
            pending[-1].version,
            "; ".join(step.name for step in pending),
        )
    for step in pending:
        for statement in step.statements:
            execute(conn, statement)
        if step.data is not None and not data_last:
            step.data(conn)
        record(conn, step)
    if data_last:
        for step in pending:
            if step.data is not None:
                step.data(conn)
    return pending[-1].version if pending else stored
