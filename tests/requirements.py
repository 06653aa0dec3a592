"""What a test needs beyond Python, and what happens when it is missing.

A developer without PostgreSQL or Chromium still runs the suite: the tests that need them skip,
saying what is missing and how to get it. CI provides both, so there a missing one is a broken
machine, not a reason to skip: ``INVOSEQ_REQUIRE`` lists what must be there (comma-separated:
``postgres``, ``browser``), and a test that needs a listed requirement fails instead, with the same
explanation. ``.ci/run`` sets ``INVOSEQ_REQUIRE=postgres,browser,redis``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn
from urllib.parse import quote

import pytest

ENV_REQUIRE = "INVOSEQ_REQUIRE"
#: Every requirement ``INVOSEQ_REQUIRE`` may name, with what provides it.
REQUIREMENTS = {
    "postgres": "a PostgreSQL server named by INVOSEQ_TEST_PG (.ci/postgres.sh starts one)",
    "browser": "Debian's chromium (.ci/chromium.sh) and the playwright package",
    "redis": "Debian's redis-server (.ci/redis.sh installs it; the tests start their own)",
}

#: The environment variable naming the PostgreSQL server tests may use (a libpq URI).
ENV_TEST_PG = "INVOSEQ_TEST_PG"
PG_HINT = (
    f"run .ci/postgres.sh and set {ENV_TEST_PG}=postgresql://invoseq:invoseq@127.0.0.1:5432/invoseq"
)
CHROMIUM = Path("/usr/bin/chromium")
REDIS_SERVER = "redis-server"


def required() -> frozenset[str]:
    """The requirements ``INVOSEQ_REQUIRE`` lists; a name it does not know is a usage error
    (a misspelt requirement would otherwise let its tests skip unnoticed)."""
    names = {name.strip() for name in os.environ.get(ENV_REQUIRE, "").split(",")} - {""}
    unknown = sorted(names - REQUIREMENTS.keys())
    if unknown:
        raise pytest.UsageError(
            f"{ENV_REQUIRE} names unknown requirements {unknown}: choose from "
            + ", ".join(f"{name} ({what})" for name, what in REQUIREMENTS.items())
        )
    return frozenset(names)


def unavailable(requirement: str, reason: str) -> NoReturn:
    """End the current test because ``requirement`` is missing (``reason`` says why and how to
    get it): a skip, or a failure when ``INVOSEQ_REQUIRE`` lists the requirement."""
    assert requirement in REQUIREMENTS, requirement
    if requirement in required():
        pytest.fail(f"{ENV_REQUIRE} lists {requirement!r}, but {reason}", pytrace=False)
    pytest.skip(reason)


_pg_unreachable: dict[str, str] = {}


def postgres_server() -> str:
    """The URL of the PostgreSQL server tests may use, once it answered; else the test ends
    through ``unavailable``."""
    url = os.environ.get(ENV_TEST_PG, "")
    if not url:
        unavailable("postgres", f"{ENV_TEST_PG} is not set ({PG_HINT})")
    if url not in _pg_unreachable:
        import psycopg

        try:
            psycopg.connect(url, connect_timeout=5).close()
            _pg_unreachable[url] = ""
        except psycopg.Error as exc:
            _pg_unreachable[url] = str(exc).strip().splitlines()[0] if str(exc) else repr(exc)
    if _pg_unreachable[url]:
        unavailable("postgres", f"{ENV_TEST_PG} is unreachable: {_pg_unreachable[url]}")
    return url


@contextlib.contextmanager
def postgres_database(prefix: str = "test") -> Iterator[str]:
    """A repository URL of its own on the test server (``postgres_server``): a fresh schema that
    every connection through the URL searches, dropped afterwards."""
    import psycopg

    server = postgres_server()
    schema = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    options = quote(f"-csearch_path={schema}", safe="")
    try:
        yield f"{server}{'&' if '?' in server else '?'}options={options}"
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def chromium() -> Path:
    """Debian's chromium, with Playwright to drive it; else the test ends through
    ``unavailable``."""
    if not os.access(CHROMIUM, os.X_OK):
        unavailable("browser", f"no Chromium at {CHROMIUM}: run .ci/chromium.sh (as root)")
    if importlib.util.find_spec("playwright") is None:
        unavailable("browser", "the playwright package is missing: pip install -e '.[test]'")
    return CHROMIUM


def redis_server() -> str:
    """The path of Debian's ``redis-server``; else the test ends through ``unavailable``."""
    import shutil

    found = shutil.which(REDIS_SERVER)
    if found is None:
        unavailable("redis", "no redis-server on PATH: run .ci/redis.sh (as root)")
    return found
