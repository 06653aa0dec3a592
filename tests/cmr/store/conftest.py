"""The store every contract test runs against: each backend in turn, reading with the test's
clock (``clock`` comes from tests/cmr/conftest.py).

PostgreSQL runs when INVOSEQ_TEST_PG names a server (``.ci/postgres.sh`` starts one on
loopback): each test gets a schema of its own, dropped afterwards. Without the variable, or
without a server behind it, the PostgreSQL tests are skipped, saying why.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from cmr.store import open_store
from cmr.store.base import Store
from tests.cmr.conftest import FakeClock

#: The environment variable naming the PostgreSQL server tests may use (a libpq URI).
PG_ENV = "INVOSEQ_TEST_PG"

_unreachable: dict[str, str] = {}


def postgres_server() -> str:
    """The server's URL, or a skip saying why there is none."""
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(
            f"PostgreSQL tests: {PG_ENV} is not set (run .ci/postgres.sh and set {PG_ENV}="
            "postgresql://invoseq:invoseq@127.0.0.1:5432/invoseq)"
        )
    if url not in _unreachable:
        import psycopg

        try:
            psycopg.connect(url, connect_timeout=5).close()
            _unreachable[url] = ""
        except psycopg.Error as exc:
            _unreachable[url] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if _unreachable[url]:
        pytest.skip(f"PostgreSQL tests: {PG_ENV} is unreachable: {_unreachable[url]}")
    return url


def in_schema(url: str, schema: str) -> str:
    """``url`` with every connection's search_path set to ``schema``."""
    options = quote(f"-csearch_path={schema}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={options}"


@pytest.fixture(name="pg_url")
def fixture_pg_url() -> Iterator[str]:
    """A repository URL of its own: a fresh schema on the test server, dropped afterwards."""
    import psycopg

    server = postgres_server()
    schema = f"test_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield in_schema(server, schema)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(name="store", params=["memory", "sqlite", "postgres"])
def fixture_store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Store]:
    """Each backend. The SQLite file sits in its own folder, clear of the tests that open one of
    their own at ``tmp_path / "cmr.sqlite"``."""
    if request.param == "memory":
        store = open_store(memory=True, clock=clock)
    elif request.param == "sqlite":
        store = open_store(str(tmp_path / "repo" / "cmr.sqlite"), clock=clock)
    else:
        store = open_store(request.getfixturevalue("pg_url"), clock=clock)
    yield store
    store.close()
