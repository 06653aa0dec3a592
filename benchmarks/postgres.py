"""A scratch PostgreSQL schema for a benchmark variant: on the server ``INVOSEQ_TEST_PG`` names
(a libpq URI, as for the tests), created for one measurement and dropped after it."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final
from urllib.parse import quote

#: Without it the PostgreSQL variants are skipped with a note.
PG_ENV: Final = "INVOSEQ_TEST_PG"


def server() -> str | None:
    """The server to measure against, if one is given."""
    return os.environ.get(PG_ENV) or None


@contextmanager
def scratch_schema(url: str) -> Iterator[str]:
    """A repository URL on a fresh schema of ``url``'s database, dropped on exit."""
    import psycopg

    name = f"bench_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
    try:
        options = quote(f"-csearch_path={name}", safe="")
        yield f"{url}{'&' if '?' in url else '?'}options={options}"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {name} CASCADE")
