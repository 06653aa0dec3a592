"""The service map over stored sequences (``cmr.views.analyses.services``), on every store: the
services as nodes, the hand-offs between processes as edges with their kind, counts, errors,
latency and queue wait; and what a process's service is."""

from __future__ import annotations

import pytest

from cmr.store.base import ProcessRecord, SequenceQuery
from cmr.views.analyses.services import map_fields, service_map, service_of
from tests.cmr.services_scenario import MS, QUEUED, SEQS, write_orders
from tests.cmr.store.conftest import fixture_pg_url, fixture_store

__all__ = ["fixture_pg_url", "fixture_store"]  # the stores of tests/cmr/store, each in turn


def test_the_map_of_three_orders_has_each_hand_off_between_services(store, make_batch):
    write_orders(store, make_batch)

    found = map_fields(service_map(store, SequenceQuery()))

    assert (found["sequences"], found["bounded"]) == (3, False)
    nodes = {
        (n["name"], n["program"], n["processes"], n["entries"], n["depth"]) for n in found["nodes"]
    }
    assert nodes == {
        ("client", "client", 1, 3, 0),
        ("storefront", "gunicorn", 1, 0, 1),
        ("pricing", "uvicorn", 1, 0, 2),
        ("report", "report", 1, 0, 2),
        ("tasks", "celery", 1, 0, 3),
    }
    edges = {(e["source"], e["target"], e["kind"]): e for e in found["edges"]}
    # pricing's hand-off to a thread of its own stays inside the service: no edge
    assert set(edges) == {
        ("client", "storefront", "http"),
        ("storefront", "pricing", "http"),
        ("storefront", "report", "process"),
        ("pricing", "tasks", "queue"),
    }
    assert (found["edges"][0]["source"], found["edges"][0]["target"]) == ("client", "storefront")
    for edge in edges.values():
        assert edge["count"] == 3
        assert edge["sequences"] == [seq.hex() for seq in reversed(SEQS)]  # newest first
    task = edges["pricing", "tasks", "queue"]
    assert (task["errors"], task["p50_ns"], task["p99_ns"]) == (1, 4 * MS, 6 * MS)
    assert task["queued_p50_ns"] == QUEUED
    served = edges["client", "storefront", "http"]
    assert (served["errors"], served["p50_ns"], served["queued_p50_ns"]) == (0, 88 * MS, 1 * MS)


def test_the_map_reads_the_newest_sequences_up_to_its_limit_and_says_so(store, make_batch):
    write_orders(store, make_batch)

    found = service_map(store, SequenceQuery(), limit=2)

    assert found.bounded
    assert [line.seq for line in found.sequences] == [SEQS[2], SEQS[1]]
    assert {edge.count for edge in found.edges.values()} == {2}
    unbounded = service_map(store, SequenceQuery(), limit=3)
    assert not unbounded.bounded


def test_a_query_that_selects_nothing_makes_an_empty_map(store, make_batch):
    write_orders(store, make_batch)

    found = service_map(store, SequenceQuery(root="nothing.*"))

    assert (found.sequences, found.nodes, found.edges) == ([], {}, {})


def _process(*argv: str) -> ProcessRecord:
    return ProcessRecord(1, 2, "host", "platform", argv, False, 0, 0)


@pytest.mark.parametrize(
    ("argv", "name", "program"),
    [
        (("/srv/shop/app.py", "--port", "80"), "app", "app"),
        (("-m", "shop.app"), "shop.app", "shop.app"),
        (("/usr/bin/gunicorn", "-b", "127.0.0.1:80", "shop.web:app"), "shop.web", "gunicorn"),
        (("/usr/bin/gunicorn", "-b", "localhost:80"), "gunicorn", "gunicorn"),  # no application
        (("/v/uvicorn/__main__.py", "--factory", "pricing:create()"), "pricing", "uvicorn"),
        (("/v/celery/__main__.py", "-A", "tasks", "worker"), "tasks", "celery"),
        (("/usr/bin/celery", "--app=shop.tasks:app", "worker"), "shop.tasks", "celery"),
        (("/usr/bin/celery", "-Ashop", "worker"), "shop", "celery"),
    ],
)
def test_a_process_s_service_is_the_application_its_launcher_serves(argv, name, program):
    service = service_of(_process(*argv))
    assert (service.name, service.program) == (name, program)
