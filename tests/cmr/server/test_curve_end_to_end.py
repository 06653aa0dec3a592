"""Traced programs → `cmr serve` with CURVE, all real processes, sockets and keys: the program
with an allowed key gets everything stored; one with an unknown key, a revoked key, no CURVE at
all or another repository's public key gets nothing stored, its refused handshakes are counted,
and it says so in one warning naming the endpoint and the likely cause."""

from __future__ import annotations

import selectors
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


def client_settings(
    keys: Keys, client: str | None, spool: Path, server: str = "repository"
) -> dict[str, str]:
    """The environment of a traced program using client pair ``client`` (None: no CURVE) and
    the public key of pair ``server`` as the repository's. Each run spools on its own, so no run
    replays what another one could not send. A refused program waits only briefly for
    acknowledgements that never come; an allowed one waits for them, as long as a loaded machine
    takes."""
    flush_timeout_ms = "60000" if client == "allowed" and server == "repository" else "300"
    settings = {"INVOSEQ_SPOOL_DIR": str(spool), "INVOSEQ_FLUSH_TIMEOUT_MS": flush_timeout_ms}
    if client is not None:
        settings["INVOSEQ_CURVE_SERVER_KEY"] = str(keys.public(server))
        settings["INVOSEQ_CURVE_CLIENT_KEY"] = str(keys.secret(client))
    return settings


def auth_refusals(db: Path) -> int:
    refused: int = cmr_json(db, "stats")["rejected"].get("auth", 0)
    return refused


def read_error_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    """One line of the process's stderr, waiting at most ``timeout_s`` (no sleeping)."""
    assert process.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise AssertionError(f"nothing on stderr of {process.args!r} within {timeout_s} s")
    return process.stderr.readline()


def run_refused_program(script: Path, endpoint: str, db: Path, settings: dict[str, str]) -> str:
    """Run the program until the repository has refused its handshake and the program said so,
    then let it end; what it wrote on stderr, which must be that one line (the tracer says a
    refusal once, however often ZeroMQ tries again meanwhile)."""
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
        warning = read_error_line(program, 60)
        out, err = program.communicate("\n", timeout=60)
    finally:
        if program.poll() is None:
            program.kill()
            program.communicate(timeout=10)
    assert program.returncode == 0, warning + err
    assert (out, err) == ("", "")  # the program's own output alone, and nothing more said
    return warning


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


#: case -> (client pair or None, the pair whose public key it takes for the repository's, what
#: its warning gives as the likely cause). Without CURVE the client may see the mismatch itself
#: (a protocol error) or only the repository hanging up: both warnings say CURVE is required.
REFUSED = {
    "unknown key": ("stranger", "repository", "refused this process's CURVE key"),
    "revoked key": ("revoked", "repository", "refused this process's CURVE key"),
    "no CURVE": (None, "repository", "requires CURVE"),
    "wrong repository key": (
        "allowed",
        "stranger",
        "is not the public key of the repository's --curve-secret",
    ),
}


@pytest.mark.parametrize(("client", "server", "cause"), REFUSED.values(), ids=REFUSED.keys())
def test_a_program_without_an_allowed_key_gets_nothing_stored_and_says_why_once(
    tmp_path: Path, keys: Keys, client: str | None, server: str, cause: str
) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "app.py", PROGRAM)
    other = write_script(tmp_path / "other.py", PROGRAM)

    with curve_server(db, keys) as (endpoint, _):
        settings = client_settings(keys, client, tmp_path / "a", server)
        warning = run_refused_program(script, endpoint, db, settings)
        # A program that starts after the refused one ended is served: what the refused one
        # sent had every chance to arrive first.
        run_traced(other, endpoint, None, **client_settings(keys, "allowed", tmp_path / "b"))
        stats: dict[str, Any] = cmr_json(db, "stats")
        listing = cmr_json(db, "ls")

    assert stats["events"] == 2 * CALLS  # the allowed program's, and nothing else
    assert [p["argv"][0] for p in stats["processes"]] == [str(other)]
    assert len(listing) == 1
    assert set(stats["rejected"]) == {"auth"}
    assert warning.startswith(f"invoseq: the repository at {endpoint} "), warning
    assert cause in warning
    assert warning.endswith("; nothing this process sends there is stored\n")
