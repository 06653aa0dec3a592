"""Opening the SQLite repository's file: for writing (created with its directory when missing)
or read-only (never created: a wrong path fails clearly), and checking it is a database at all.
The schema is ``SQLiteStore``'s business once the connection is open.
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
            uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        else:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except OSError as exc:
        raise StoreError(f"cannot create repository {path}: {exc.strerror}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open repository {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"{path} is not an invoseq repository ({exc})") from exc
    return conn


def missing(path: str) -> str:
    return f"no repository at {path} (run `cmr serve` or `tracer run` first)"
