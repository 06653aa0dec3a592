"""CURVE key files the tracer cannot use (missing, a public key where the secret one is needed,
not a key file) are said in one line naming the file and the setting: `configure()` raises it as
a ConfigError, `tracer run` prints it and exits 1 without running the program, and a program
configured from the environment logs it once and runs on untouched."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tracer
from tests.cmr.curve_support import generate
from tests.support import run_program, traced_env, write_script
from tracer.config import ConfigError

#: Nothing listens there: the key files are read before any connection.
ENDPOINT = "tcp://127.0.0.1:9"

PROGRAM = """
import tracer

@tracer.traced
def work():
    return 42

print(work(), flush=True)
"""


@pytest.fixture(name="keys", scope="module")
def fixture_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("keys")
    for name in ("repository", "client"):
        generate(root, name)
    (root / "notes.txt").write_text("not a key\n")
    return root


def unusable(keys: Path) -> list[tuple[dict[str, str], str]]:
    """(settings, what the one line says) for each kind of unusable key file."""
    server, client = str(keys / "repository.key"), str(keys / "client.key_secret")
    missing, public, notes = keys / "missing.key_secret", keys / "client.key", keys / "notes.txt"
    return [
        (
            {"curve_server_key": server, "curve_client_key": str(missing)},
            f"cannot read the CURVE key file {missing} (curve_client_key): no such file",
        ),
        (
            {"curve_server_key": server, "curve_client_key": str(public)},
            f"the CURVE key file {public} (curve_client_key) holds no secret key: give this "
            "client's NAME.key_secret file, not its public NAME.key",
        ),
        (
            {"curve_server_key": str(notes), "curve_client_key": client},
            f"the CURVE key file {notes} (curve_server_key) is not a key file (made by "
            "`cmr keys generate`)",
        ),
    ]


CASES = ["missing file", "public key only", "not a key file"]


def variables(settings: dict[str, str]) -> dict[str, str]:
    return {
        "INVOSEQ_CURVE_SERVER_KEY": settings["curve_server_key"],
        "INVOSEQ_CURVE_CLIENT_KEY": settings["curve_client_key"],
        "INVOSEQ_SPOOL_BYTES": "0",
        "INVOSEQ_FLUSH_TIMEOUT_MS": "300",
    }


@pytest.mark.parametrize("case", range(len(CASES)), ids=CASES)
def test_configure_refuses_an_unusable_key_file_in_one_line(keys: Path, case: int) -> None:
    settings, message = unusable(keys)[case]
    with pytest.raises(ConfigError) as raised:
        tracer.configure(endpoint=ENDPOINT, **settings)  # type: ignore[arg-type]
    assert str(raised.value) == message


@pytest.mark.system
@pytest.mark.parametrize("case", range(len(CASES)), ids=CASES)
def test_a_program_given_an_unusable_key_file_logs_one_line_and_runs_on(
    tmp_path: Path, keys: Path, case: int
) -> None:
    settings, message = unusable(keys)[case]
    script = write_script(tmp_path / "app.py", PROGRAM)
    result = run_program(
        [sys.executable, str(script)], env=traced_env(ENDPOINT, **variables(settings))
    )
    assert (result.returncode, result.stdout) == (0, "42\n")
    assert result.stderr == f"invoseq: {message}; nothing is sent to {ENDPOINT}\n"


@pytest.mark.system
@pytest.mark.parametrize("case", range(len(CASES)), ids=CASES)
def test_tracer_run_given_an_unusable_key_file_exits_1_in_one_line(
    tmp_path: Path, keys: Path, case: int
) -> None:
    settings, message = unusable(keys)[case]
    script = write_script(tmp_path / "app.py", PROGRAM)
    result = run_program(
        [sys.executable, "-m", "tracer", "run", str(script)],
        env=traced_env(ENDPOINT, **variables(settings)),
        cwd=tmp_path,
    )
    assert (result.returncode, result.stdout) == (1, "")  # the program never ran
    assert result.stderr == f"tracer run: error: {message}\n"
