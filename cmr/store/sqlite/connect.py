"""Opening the SQLite repository's file: for writing (created with its directory when missing)
or read-only (never created: a wrong path fails clearly), and checking it is a database at all.
The schema is ``SQLiteStore``'s business once the connection is open.

Reading needs no write access. A read-only connection (``mode=ro``) to a WAL database still
needs the ``-shm`` file beside it, and creates it when it is missing, which fails where the
directory cannot be written (a read-only mount, another user's directory). With no ``-wal``
file either (the last writer closed cleanly: everything is in the database file), nothing is
missing from the file itself, so the reader opens it ``immutable``: no ``-shm``, no locks (a
writer that starts meanwhile, through another mount, is not seen by this reader). A ``-wal``
file beside it holds commits the database file may lack: ``mode=ro`` reads them through an
existing ``-shm``; without one it cannot, and the error says so.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.parse import quote

from cmr.store.base import StoreError


def connect(path: str, readonly: bool, busy_timeout_ms: int) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), usable from any thread
    under the caller's lock, waiting up to ``busy_timeout_ms`` for another writer."""
    try:
        if readonly:
            if not os.path.isfile(path):
                raise StoreError(missing(path))
            return _open_readonly(path, busy_timeout_ms)
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except OSError as exc:
        raise StoreError(f"cannot create repository {path}: {exc.strerror}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open repository {path}: {exc}") from exc
    return _checked(conn, path, busy_timeout_ms)


#: SQLite's result code for a file it could not open (the ``-shm`` of a read-only directory).
_SQLITE_CANTOPEN = 14


def _open_readonly(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """``mode=ro``; where that cannot make the ``-shm`` file and no ``-wal`` file exists,
    ``immutable`` (the module's docstring says why that is safe)."""
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
    try:
        return _checked(_connect_uri(uri), path, busy_timeout_ms)
    except _CannotOpenError as exc:
        if os.path.exists(path + "-wal"):
            raise StoreError(
                f"cannot read repository {path}: its write-ahead log ({path}-wal) needs a "
                f"{path}-shm file, which cannot be created there ({exc}); open it where the "
                "directory can be written, or run `cmr serve` on it once to fold the log in"
            ) from exc
    return _checked(_connect_uri(uri + "&immutable=1"), path, busy_timeout_ms)


def _connect_uri(uri: str) -> sqlite3.Connection:
    return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)


class _CannotOpenError(StoreError):
    """SQLite opened the file but could not open what it needs beside it."""


def _checked(conn: sqlite3.Connection, path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """``conn`` once it has read the schema table: the file is a database."""
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_CANTOPEN:
            raise _CannotOpenError(str(exc)) from exc
        raise StoreError(f"{path} is not an invoseq repository ({exc})") from exc
    return conn


def missing(path: str) -> str:
    return f"no repository at {path} (run `cmr serve` or `tracer run` first)"
