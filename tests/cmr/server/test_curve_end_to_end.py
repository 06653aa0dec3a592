"""Traced programs → `cmr serve` with CURVE, all real processes, sockets and keys: the program
with an allowed key gets everything stored; one with an unknown key, a revoked key or no CURVE at
all gets nothing stored, and its refused handshakes are counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cmr.curve_support import Keys, curve_server, make_keys
from tests.support import cmr_json, read_line, run_traced, traced_env, wait_for, write_script

pytestmark = pytest.mark.system

CALLS = 6  # invocations of one run of PROGRAM

PROGRAM = """
import sys
import tracer

@tracer.traced
def handle(n):
    return n * 2

@tracer.traced
def serve_requests():
    return sum(handle(n) for n in range(5))

serve_requests()
print("called", flush=True)
if "--wait" in sys.argv:
    sys.stdin.readline()
"""


@pytest.fixture(name="keys", scope="module")
def fixture_keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("keys"))


def client_settings(keys: Keys, client: str | None, spool: Path) -> dict[str, str]:
    """The environment of a traced program using client pair ``client`` (None: no CURVE). Each
    run spools on its own, so no run replays what another one could not send. A refused program
    waits only briefly for acknowledgements that never come; an allowed one waits for them, as
    long as a loaded machine takes."""
    flush_timeout_ms = "60000" if client == "allowed" else "300"
    settings = {"INVOSEQ_SPOOL_DIR": str(spool), "INVOSEQ_FLUSH_TIMEOUT_MS": flush_timeout_ms}
    if client is not None:
        settings["INVOSEQ_CURVE_SERVER_KEY"] = str(keys.public("repository"))
        settings["INVOSEQ_CURVE_CLIENT_KEY"] = str(keys.secret(client))
    return settings


def auth_refusals(db: Path) -> int:
    refused: int = cmr_json(db, "stats")["rejected"].get("auth", 0)
    return refused


def run_refused_program(script: Path, endpoint: str, db: Path, settings: dict[str, str]) -> None:
    """Run the program until the repository has refused its handshake, then let it end."""
    program = subprocess.Popen(
        [sys.executable, str(script), "--wait"],
        env=traced_env(endpoint, **settings),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert read_line(program, 60) == "called\n"
        wait_for(lambda: auth_refusals(db) >= 1, timeout_s=60)
        _, err = program.communicate("\n", timeout=60)
    finally:
        if program.poll() is None:
            program.kill()
            program.communicate(timeout=10)
    assert program.returncode == 0, err
    assert "Traceback" not in err


def test_a_program_with_an_allowed_key_gets_everything_stored(tmp_path: Path, keys: Keys) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "app.py", PROGRAM)

    with curve_server(db, keys) as (endpoint, _):
        run_traced(script, endpoint, None, **client_settings(keys, "allowed", tmp_path / "spool"))
        stats = cmr_json(db, "stats")
        listing = cmr_json(db, "ls")

    assert (stats["events"], stats["rejected"]) == (2 * CALLS, {})
    assert [p["dropped"] for p in stats["processes"]] == [0]
    assert [(s["root"], s["invocations"], s["status"]) for s in listing] == [
        ("__main__.serve_requests", CALLS, "complete")
    ]


REFUSED = {"unknown key": "stranger", "revoked key": "revoked", "no CURVE": None}


@pytest.mark.parametrize("client", REFUSED.values(), ids=REFUSED.keys())
def test_a_program_without_an_allowed_key_gets_nothing_stored(
    tmp_path: Path, keys: Keys, client: str | None
) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "app.py", PROGRAM)
    other = write_script(tmp_path / "other.py", PROGRAM)

    with curve_server(db, keys) as (endpoint, _):
        run_refused_program(script, endpoint, db, client_settings(keys, client, tmp_path / "a"))
        # A program that starts after the refused one ended is served: what the refused one
        # sent had every chance to arrive first.
        run_traced(other, endpoint, None, **client_settings(keys, "allowed", tmp_path / "b"))
        stats: dict[str, Any] = cmr_json(db, "stats")
        listing = cmr_json(db, "ls")

    assert stats["events"] == 2 * CALLS  # the allowed program's, and nothing else
    assert [p["argv"][0] for p in stats["processes"]] == [str(other)]
    assert len(listing) == 1
    assert set(stats["rejected"]) == {"auth"}
