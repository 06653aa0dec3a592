"""The store every contract test runs against: each backend in turn, reading with the test's
clock (``clock`` comes from tests/cmr/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cmr.store import open_store
from cmr.store.base import Store
from tests.cmr.conftest import FakeClock


@pytest.fixture(name="store", params=["memory", "sqlite"])
def fixture_store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Store]:
    """Each backend. The SQLite file sits in its own folder, clear of the tests that open one of
    their own at ``tmp_path / "cmr.sqlite"``."""
    if request.param == "memory":
        store = open_store(memory=True, clock=clock)
    else:
        store = open_store(str(tmp_path / "repo" / "cmr.sqlite"), clock=clock)
    yield store
    store.close()
