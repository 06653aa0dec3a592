"""Fixtures for the reliability suite: every process a test starts is stopped after it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.harness import Program, Repository, free_endpoint, program_env


class Launcher:
    """Starts repositories and traced programs under one test's ``tmp_path`` and cleans them up:
    programs still running are killed, repositories stopped, pipes closed."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.spool_dir = tmp_path / "spool"
        self._repositories: list[Repository] = []
        self._programs: list[Program] = []

    def repository(self, name: str = "cmr") -> Repository:
        """A repository (not started) on a fixed free TCP endpoint, stored in ``name``.sqlite."""
        repository = Repository(self.tmp_path / f"{name}.sqlite", free_endpoint())
        self._repositories.append(repository)
        return repository

    def program(self, script: Path, *args: str, endpoint: str, **settings: str) -> Program:
        """``python script args`` traced to ``endpoint``, spooling under ``tmp_path/spool``."""
        program = Program(
            [sys.executable, str(script), *args],
            program_env(endpoint, self.spool_dir, **settings),
            self.tmp_path / f"program-{len(self._programs) + 1}.err",
        )
        self._programs.append(program)
        return program

    def close(self) -> None:
        for program in self._programs:
            program.close()
        for repository in self._repositories:
            repository.stop()


@pytest.fixture(name="launch")
def fixture_launch(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()
