"""Three orders across five processes, as their tracers send them: what the service map tests
read (``cmr.views.analyses.services``, ``cmr map``, ``cmr ui``'s map page).

Per order: ``client.py`` calls the storefront (gunicorn ``storefront:app``) over HTTP, which
calls pricing (uvicorn ``pricing:app``) over HTTP and starts ``report.py`` as a subprocess;
pricing hands a step to a thread of its own (no edge: one process) and queues a Celery task
(``celery -A tasks``), which waits ``QUEUED`` in the queue and runs for ``TASK_TOOK[n]``; the
last order's task raises.
"""

from __future__ import annotations

from collections.abc import Callable

from cmr.store.base import Store
from invoseq import wire
from tests.cmr.store.records import seq_id

MS = 1_000_000
ORDERS = 3
QUEUED = 3 * MS
TASK_TOOK = (2 * MS, 4 * MS, 6 * MS)
SEQS = tuple(seq_id(f"0{n + 1}de") for n in range(ORDERS))

CLIENT = ("/srv/shop/client.py",)
STOREFRONT = ("/venv/bin/gunicorn", "-w", "2", "-b", "127.0.0.1:8000", "storefront:app")
PRICING = ("/venv/lib/python3.11/site-packages/uvicorn/__main__.py", "pricing:app")
TASKS = ("/venv/lib/python3.11/site-packages/celery/__main__.py", "-A", "tasks", "worker")
REPORT = ("/srv/shop/report.py", "--daily")

HTTP = {"http.request.method": "GET"}
TASK = {"celery.task.name": "tasks.tax"}


def _hid(n: int, hop: int) -> int:
    return 0x7000_0000 + 16 * n + hop


def write_orders(store: Store, make_batch: Callable[..., wire.Batch]) -> None:
    """Store the three orders, one batch per process."""
    events: dict[int, list[wire.Event]] = {puid: [] for puid in range(1, 6)}
    for n, seq in enumerate(SEQS):
        t = n * 1_000 * MS
        i = 10 * n  # each order's iids, per process
        took = TASK_TOOK[n]
        h1, h2, h3, h4, h5 = (_hid(n, hop) for hop in range(1, 6))
        events[1] += [
            wire.Start(i + 1, 0, 0, 1, t, seq),
            wire.Handoff(h1, i + 1, "remote", 9, t + 1 * MS, seq),
            wire.End(i + 1, t + 100 * MS),
        ]
        events[2] += [
            wire.Start(i + 1, 0, h1, 1, t + 2 * MS, seq),
            wire.Attrs(i + 1, HTTP),
            wire.Handoff(h2, i + 1, "remote", 9, t + 3 * MS, seq),
            wire.Handoff(h5, i + 1, "process", 8, t + 4 * MS, seq),
            wire.End(i + 1, t + 90 * MS),
        ]
        events[3] += [
            wire.Start(i + 1, 0, h2, 1, t + 4 * MS, seq),
            wire.Attrs(i + 1, HTTP),
            wire.Handoff(h3, i + 1, "thread", 7, t + 5 * MS, seq),
            wire.Start(i + 2, 0, h3, 2, t + 6 * MS, seq),
            wire.End(i + 2, t + 7 * MS),
            wire.Handoff(h4, i + 1, "remote", 9, t + 10 * MS, seq),
            wire.End(i + 1, t + 50 * MS),
        ]
        ran = t + 10 * MS + QUEUED
        end = wire.Error(i + 1, ran + took, "TaxError") if n == 2 else wire.End(i + 1, ran + took)
        events[4] += [wire.Start(i + 1, 0, h4, 1, ran, seq), wire.Attrs(i + 1, TASK), end]
        events[5] += [wire.Start(i + 1, 0, h5, 1, t + 8 * MS, seq), wire.End(i + 1, t + 9 * MS)]
    argvs = {1: CLIENT, 2: STOREFRONT, 3: PRICING, 4: TASKS, 5: REPORT}
    names = {
        1: {1: "client.order", 9: "GET storefront"},
        2: {1: "storefront.checkout", 8: "subprocess report.py", 9: "GET pricing"},
        3: {1: "pricing.quote", 2: "pricing.rates", 7: "pricing.rates", 9: "celery.task tax"},
        4: {1: "tasks.tax"},
        5: {1: "report.main"},
    }
    for puid, argv in argvs.items():
        store.ingest(
            make_batch(puid, 1, {1: events[puid]}, methods=names[puid], argv=argv, pid=100 + puid),
            0,
        )
