"""Several repository endpoints: how they are given, checked, and passed on to child processes
(`tracer run` and the subprocess patch), so a whole process tree spreads over the same nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracer
from tests.reliability.cluster import cmr_json, nodes
from tests.support import write_script
from tests.tracer.run.test_run import run
from tracer import _runtime as runtime
from tracer.config import ENV_ENDPOINT, ConfigError, resolve

A, B = "tcp://127.0.0.1:7401", "ipc:///tmp/invoseq-b.sock"


@pytest.mark.parametrize(
    "given",
    [f"{A},{B}", f" {A} , {B} ", [A, B], (A, B)],
)
def test_endpoints_are_given_as_a_comma_separated_string_or_a_list(given: object) -> None:
    config = resolve({"endpoint": given}, {})
    assert config.endpoint == f"{A},{B}"
    assert config.endpoints == (A, B)


def test_one_endpoint_is_one_node() -> None:
    assert resolve({"endpoint": A}, {}).endpoints == (A,)
    assert resolve({}, {ENV_ENDPOINT: B}).endpoints == (B,)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (f"{A},localhost:7311", "expected a ZeroMQ endpoint like .* got 'localhost:7311'"),
        (f"{A},,{B}", "an empty endpoint"),
        (f"{A},", "an empty endpoint"),
        (f"{A},{A}", "listed twice"),
        ([], "one or more endpoint strings"),
        ([A, 7311], "one or more endpoint strings"),
    ],
)
def test_a_bad_endpoint_in_the_list_is_a_clear_error(given: object, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^configure\\(endpoint=\\.\\.\\.\\): .*{message}"):
        tracer.configure(endpoint=given)


def test_a_bad_endpoint_list_in_the_environment_names_the_variable_or_falls_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {ENV_ENDPOINT: f"{A},{A}"}
    with pytest.raises(ConfigError, match=f"environment variable {ENV_ENDPOINT}: .*listed twice"):
        resolve({}, env)
    assert resolve({}, env, strict=False).endpoints == resolve({}, {}).endpoints
    assert ENV_ENDPOINT in caplog.text


def test_child_processes_are_given_every_endpoint(tmp_path: Path) -> None:
    endpoints = [f"ipc://{tmp_path}/a.sock", f"ipc://{tmp_path}/b.sock"]  # nobody listens
    tracer.configure(endpoint=endpoints, flush_timeout_ms=100, sample_interval_ms=0)
    assert runtime.child_settings()[ENV_ENDPOINT] == ",".join(endpoints)
    assert resolve({}, runtime.child_settings()).endpoints == tuple(endpoints)


#: Run by `tracer run`: a traced function starts a child Python process with an environment of
#: its own (no tracer settings), so the subprocess patch must hand the endpoints on.
PARENT = """
import os, subprocess, sys

def launch():
    env = {"PATH": os.environ.get("PATH", ""), "INVOSEQ_SPOOL_DIR": os.environ["INVOSEQ_SPOOL_DIR"]}
    child = subprocess.run(
        [sys.executable, "child.py"], env=env, capture_output=True, text=True, check=True
    )
    print(child.stdout, end="")

launch()
"""

CHILD = """
import dataclasses, json, os
import tracer

@tracer.traced
def work(n):
    return n

# Batches go to the nodes it is connected to: on a loaded machine a node's connection may
# take a while, so it goes on (at most 500 flushes) until each node has acknowledged one.
for n in range(10_000):
    work(n)
    if n % 20 == 19:
        assert tracer.flush(timeout_s=60)
        if n >= 199 and min(tracer.stats().acked_by_endpoint.values()) > 0:
            break
acknowledged = tracer.shutdown()
print(json.dumps({
    "endpoint": os.environ.get("INVOSEQ_ENDPOINT"),
    "acknowledged": acknowledged,
    "acked_by_endpoint": tracer.stats().acked_by_endpoint,
}))
"""


@pytest.mark.system
def test_tracer_run_and_its_child_processes_spread_over_every_node(tmp_path: Path) -> None:
    write_script(tmp_path / "app.py", PARENT)
    write_script(tmp_path / "child.py", CHILD)
    files = [str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")]
    with nodes(files, tmp_path) as (a, b):
        listed = f"{a.endpoint},{b.endpoint}"
        spool = str(tmp_path / "spool")
        result = run(
            tmp_path,
            "--endpoint",
            listed,
            "app.py",
            INVOSEQ_SPOOL_DIR=spool,
            INVOSEQ_RESEND_MS="600000",
        )
    assert result.returncode == 0, result.stderr
    child = json.loads(result.stdout)
    assert child["endpoint"] == listed
    assert child["acknowledged"]
    assert set(child["acked_by_endpoint"]) == {a.endpoint, b.endpoint}
    assert min(child["acked_by_endpoint"].values()) > 0, child
    # Both processes reached the nodes: together the two files hold each one's events.
    pids = [{p["pid"] for p in cmr_json(file, "stats")["processes"]} for file in files]
    assert len(pids[0] | pids[1]) == 2
