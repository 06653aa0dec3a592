"""Connecting to PostgreSQL and saying what went wrong in one line, never with the password.

A repository URL is a libpq connection URI (``postgresql://user:password@host:port/dbname``,
with any libpq parameter in the query string, e.g. ``?options=-csearch_path%3Dinvoseq`` to keep
the repository in a schema of its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, TypeAlias

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow

from cmr.store.base import StoreError
from cmr.store.postgres.binary import column

Conn: TypeAlias = psycopg.Connection[TupleRow]

#: Seconds to wait for the server before giving up, unless the URL says otherwise.
CONNECT_TIMEOUT_S: Final = 10


def where(url: str) -> str:
    """The URL as messages name it: user, host, port and database, without the password."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        return "postgresql://?"
    user = params.get("user")
    host = params.get("host") or "localhost"
    port = params.get("port") or 5432
    database = params.get("dbname") or user or ""
    return f"postgresql://{f'{user}@' if user else ''}{host}:{port}/{database}"


def arrays(rows: Iterable[Sequence[object]]) -> list[object]:
    """``rows`` as the column arrays a statement over ``unnest(%b::type[], ...)`` binds, each
    packed in binary form where it can be (``binary.column``)."""
    return [column(values) for values in zip(*rows, strict=True)]


def connect(url: str) -> Conn:
    """An autocommit connection (transactions are explicit). Raises StoreError in one line."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise StoreError(f"invalid PostgreSQL URL: {one_line(exc, url)}") from None
    extra: dict[str, str | int] = {}
    if "connect_timeout" not in params:
        extra["connect_timeout"] = CONNECT_TIMEOUT_S
    if "application_name" not in params:
        extra["application_name"] = "invoseq"
    try:
        return psycopg.connect(make_conninfo(url, **extra), autocommit=True)
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to {where(url)}: {one_line(exc, url)}") from None


def one_line(exc: BaseException, url: str) -> str:
    """The first line of a driver message, with the URL's password (if any) blotted out."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    try:
        password = conninfo_to_dict(url).get("password")
    except psycopg.Error:
        password = None
    if password:
        text = text.replace(str(password), "***")
    return text
