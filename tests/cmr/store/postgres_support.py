"""What the PostgreSQL store's tests share: work released in several threads at once (nodes on
one database), the tables of a test's schema, and the day partition of the test clock's now."""

from __future__ import annotations

import threading
from collections.abc import Callable

from cmr.store.postgres.connect import connect
from cmr.store.postgres.partitions import DAY_NS
from tests.cmr.conftest import CLOCK_OFFSET_NS

TODAY = CLOCK_OFFSET_NS // DAY_NS
JOIN_TIMEOUT_S = 60


def run_together(*work: Callable[[], None]) -> None:
    """Run each callable in a thread of its own, released at once; re-raise the first error."""
    barrier = threading.Barrier(len(work))
    failures: list[BaseException] = []

    def run(job: Callable[[], None]) -> None:
        try:
            barrier.wait(timeout=JOIN_TIMEOUT_S)
            job()
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads)
    if failures:
        raise failures[0]


def tables(url: str) -> set[str]:
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {str(name) for (name,) in rows}
