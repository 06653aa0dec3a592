"""The store every contract test runs against: each backend in turn, reading with the test's
clock (``clock`` comes from tests/cmr/conftest.py).

PostgreSQL runs when INVOSEQ_TEST_PG names a server (``.ci/postgres.sh`` starts one on
loopback): each test gets a schema of its own, dropped afterwards. Without the variable, or
without a server behind it, the PostgreSQL tests are skipped, saying why (they fail instead when
INVOSEQ_REQUIRE lists ``postgres``: tests/requirements.py). They carry the ``postgres`` marker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cmr.store import open_store
from cmr.store.base import Store
from tests.cmr.conftest import FakeClock
from tests.requirements import postgres_database


@pytest.fixture(name="pg_url")
def fixture_pg_url() -> Iterator[str]:
    """A repository URL of its own: a fresh schema on the test server, dropped afterwards."""
    with postgres_database() as url:
        yield url


@pytest.fixture(
    name="store", params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
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
