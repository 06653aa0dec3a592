"""`cmr map` on a repository of three orders across five processes: the edges as a table and
as JSON, `cmr ls`'s filters, its bound on the sequences read, and clear errors."""

from __future__ import annotations

import json

import pytest

from cmr.store import open_store
from tests.cmr.cli_helpers import run
from tests.cmr.services_scenario import SEQS, write_orders


@pytest.fixture(name="repo")
def fixture_repo(tmp_path, make_batch) -> str:
    path = str(tmp_path / "cmr.sqlite")
    store = open_store(path)
    try:
        write_orders(store, make_batch)
    finally:
        store.close()
    return path


def test_map_prints_one_line_per_edge(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "map")

    assert code == 0
    assert out.splitlines() == [
        "3 sequences",
        "EDGE                  KIND     CALLS  ERRORS      P50      P99  QUEUED P50",
        "client → storefront   http         3       0  88.0 ms  88.0 ms     1.00 ms",
        "storefront → pricing  http         3       0  46.0 ms  46.0 ms     1.00 ms",
        "storefront → report   process      3       0  1.00 ms  1.00 ms     4.00 ms",
        "pricing → tasks       queue        3       1  4.00 ms  6.00 ms     3.00 ms",
        "services: client, storefront (gunicorn), pricing (uvicorn), report, tasks (celery)",
    ]


def test_map_json_has_nodes_and_edges(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "map", "--json")

    assert code == 0
    found = json.loads(out)
    assert [node["name"] for node in found["nodes"]] == [
        "client",
        "storefront",
        "pricing",
        "report",
        "tasks",
    ]
    queue = [edge for edge in found["edges"] if edge["kind"] == "queue"]
    assert [(e["source"], e["target"], e["count"], e["errors"]) for e in queue] == [
        ("pricing", "tasks", 3, 1)
    ]


def test_map_takes_the_filters_of_ls_and_says_when_it_read_only_some(repo, capsys):
    code, out, _ = run(capsys, "--db", repo, "map", "--limit", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "1 sequence (the newest 1 the options select; --limit N reads more)"
    assert lines[2].startswith("client → storefront   http         1       0")

    _, out, _ = run(capsys, "--db", repo, "map", "--json", "--root", "client.*", "--limit", "2")
    found = json.loads(out)
    assert (found["sequences"], found["bounded"]) == (2, True)
    assert found["edges"][0]["sequences"] == [SEQS[2].hex(), SEQS[1].hex()]

    assert run(capsys, "--db", repo, "map", "--root", "nothing.*")[1] == "no sequence matches\n"


def test_map_explains_a_bad_filter(repo, capsys):
    code, _, err = run(capsys, "--db", repo, "map", "--min-duration", "5", "--max-duration", "1")
    assert code != 0
    assert "--min-duration is above --max-duration" in err
    code, _, err = run(capsys, "--db", repo, "map", "--status", "finished")
    assert code == 2
    assert "argument --status: invalid choice: 'finished'" in err
