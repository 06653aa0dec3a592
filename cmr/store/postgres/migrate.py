"""Checking and upgrading the PostgreSQL repository's schema when a store opens.

The migrations (``postgres_schema.MIGRATIONS``) that have run are rows of ``schema_migrations``.
A writer applies the missing ones in order, all in one transaction, under an advisory lock, so
two ``cmr serve`` nodes starting together on a fresh database migrate it once: the second waits
for the first, then finds nothing to do. A reader never changes anything: it fails clearly when
the schema is missing, older or newer than this code.
"""

from __future__ import annotations

from typing import Final

from cmr.store.base import StoreError
from cmr.store.postgres import summaries
from cmr.store.postgres.connect import Conn
from cmr.store.postgres.legacy import move_legacy_rows
from cmr.store.postgres.schema import (
    MIGRATIONS,
    MIGRATIONS_TABLE,
    PACKED_VERSION,
    ROOT_ERROR_VERSION,
    SCHEMA_VERSION,
)

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
        conn.execute(MIGRATIONS_TABLE)
        version = applied_version(conn) or 0
        _refuse_newer(version, name)
        known = {migration.version for migration in MIGRATIONS}
        if version and version not in known:
            raise StoreError(f"{name} has an unknown repository schema version {version}")
        for migration in MIGRATIONS:
            if version < migration.version <= upto:
                for statement in migration.statements:
                    conn.execute(statement)
                if migration.version == PACKED_VERSION:
                    move_legacy_rows(conn)
                if migration.version == ROOT_ERROR_VERSION:
                    summaries.backfill(conn)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                version = migration.version
    return version


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
