"""Checking and upgrading the PostgreSQL repository's schema when a store opens.

The migrations (``MIGRATIONS``, each version's statements from ``postgres_schema``) that have
run are rows of ``schema_migrations``. A writer applies the missing ones in order
(``cmr.store.migrations``, the runner SQLite's upgrades share), all in one transaction, under an
advisory lock, so two ``cmr serve`` nodes starting together on a fresh database migrate it
once: the second waits for the first, then finds nothing to do. A reader never changes
anything: it fails clearly when the schema is missing, older or newer than this code.
"""

from __future__ import annotations

from typing import Final

from cmr.store import migrations
from cmr.store.base import StoreError
from cmr.store.migrations import Step, latest
from cmr.store.postgres import schema
from cmr.store.postgres.connect import Conn


def _move_legacy_rows(conn: Conn) -> None:
    from cmr.store.postgres.legacy import move_legacy_rows  # loaded for an upgrade only

    move_legacy_rows(conn)


def _compute_listing_lines(conn: Conn) -> None:
    from cmr.store.postgres import summaries  # loaded for an upgrade only

    summaries.backfill(conn)


#: Every schema version in order: a new version is one entry at the end. A data function runs
#: right after its version's statements (``cmr.store.migrations``): the rows moved into batches,
#: then the listing lines computed once the root's exception has its column.
MIGRATIONS: Final = (
    Step(1, "processes, events partitioned by day, samples, counters", schema.CORE),
    Step(2, "invocation attributes", schema.ATTRIBUTES),
    Step(3, "batches stored as they arrived, listing lines", schema.PACKED, _move_legacy_rows),
    Step(
        4,
        "the exception the root raised, in listing lines",
        schema.ROOT_ERROR,
        _compute_listing_lines,
    ),
    Step(5, "listing keys on each sequence, indexed", schema.LISTING_KEYS),
    Step(6, "the sampler's paced interval in its report", schema.SAMPLER_INTERVALS),
    Step(7, "the methods each sequence ran, on its batch_seqs row", schema.BATCH_METHODS),
    Step(8, "the time windows of drops whose sequences were not named", schema.LOST_WINDOWS),
    Step(9, "the samples the sampler dropped, in its report", schema.SAMPLER_DROPS),
    Step(10, "request-shaped sequences stored as one row each", schema.SINGLE_ROWS),
    Step(11, "single rows listed by their blocks", schema.SINGLE_BLOCKS),
)
SCHEMA_VERSION: Final = latest(MIGRATIONS)
#: The advisory lock migrations run under (``pg_advisory_xact_lock``); "ivsq" "migr".
MIGRATION_LOCK: Final = 0x69767371_6D696772


def applied_version(conn: Conn) -> int | None:
    """The latest migration applied, 0 for none; None when there is no invoseq schema."""
    (table,) = _one(conn, "SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not table:
        return None
    (version,) = _one(conn, "SELECT coalesce(max(version), 0) FROM schema_migrations")
    return int(str(version))


def check_readable(conn: Conn, name: str) -> None:
    """A reader's check: the schema is there, at this code's version."""
    version = applied_version(conn)
    if not version:
        raise StoreError(f"no invoseq repository in {name} (run `cmr serve --db URL` first)")
    _refuse_newer(version, name)
    if version < SCHEMA_VERSION:
        raise StoreError(
            f"{name} has repository schema version {version}, older than this invoseq uses "
            f"({SCHEMA_VERSION}): run `cmr serve` on it once to upgrade it"
        )


def migrate(conn: Conn, name: str, *, upto: int = SCHEMA_VERSION) -> int:
    """Apply the migrations missing up to version ``upto`` (tests stop early to make an old
    schema); returns the version the schema is at. One transaction, one node at a time."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(schema.MIGRATIONS_TABLE)
        version = applied_version(conn) or 0
        _refuse_newer(version, name)
        if version > 0 and version not in {step.version for step in MIGRATIONS}:
            raise StoreError(f"{name} has an unknown repository schema version {version}")
        return migrations.upgrade(
            conn, MIGRATIONS, version, execute=_execute, record=_record, upto=upto
        )


def _execute(conn: Conn, statement: str) -> None:
    conn.execute(statement)  # psycopg's parameter types reject a plain str where mypy looks


def _record(conn: Conn, step: Step) -> None:
    conn.execute(
        "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (step.version, step.name)
    )


def _refuse_newer(version: int, name: str) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{name} has repository schema version {version}, newer than this invoseq "
            f"understands ({SCHEMA_VERSION}): upgrade invoseq"
        )


def _one(conn: Conn, query: str) -> tuple[object, ...]:
    row = conn.execute(query).fetchone()
    if row is None:  # pragma: no cover - an aggregate always returns a row
        raise StoreError("the repository gave no answer")
    return row
