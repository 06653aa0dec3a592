"""The migration runner both SQL stores share: steps applied in order above the stored version,
each recorded; data functions in their place or after every statement."""

from __future__ import annotations

import pytest

from cmr.store.base import StoreError
from cmr.store.migrations import Step, latest, upgrade


def _steps(log: list[str]) -> tuple[Step, ...]:
    return (
        Step(1, "one", ("s1",)),
        Step(2, "two", ("s2a", "s2b"), lambda conn: log.append("data2")),
        Step(3, "three", ("s3",), lambda conn: log.append("data3")),
        Step(4, "four", ("s4",)),
    )


def _run(stored: int, *, upto: int | None = None, data_last: bool = False) -> tuple[int, list[str]]:
    log: list[str] = []
    reached = upgrade(
        None,
        _steps(log),
        stored,
        execute=lambda _conn, statement: log.append(statement),
        record=lambda _conn, step: log.append(f"v{step.version}"),
        upto=upto,
        data_last=data_last,
    )
    return reached, log


def test_the_steps_above_the_stored_version_run_in_order_each_recorded() -> None:
    assert _run(1) == (4, ["s2a", "s2b", "data2", "v2", "s3", "data3", "v3", "s4", "v4"])


def test_data_last_runs_the_data_functions_once_every_statement_has() -> None:
    assert _run(1, data_last=True) == (
        4,
        ["s2a", "s2b", "v2", "s3", "v3", "s4", "v4", "data2", "data3"],
    )


def test_upto_stops_early_and_a_current_schema_runs_nothing() -> None:
    assert _run(0, upto=2) == (2, ["s1", "v1", "s2a", "s2b", "data2", "v2"])
    assert _run(4) == (4, [])


def test_an_unknown_stored_version_is_refused() -> None:
    with pytest.raises(StoreError, match="unknown repository schema version 5"):
        _run(5)


def test_steps_must_be_numbered_from_one_in_order() -> None:
    assert latest(_steps([])) == 4
    with pytest.raises(ValueError, match="not numbered 1 to 2"):
        latest((Step(1, "one", ()), Step(3, "three", ())))


def test_upgrading_an_existing_repository_says_so_once_and_creating_one_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="cmr.store"):
        _run(0)
        assert caplog.messages == []
        _run(2)
        _run(4)
    assert caplog.messages == [
        "upgrading the repository from schema version 2 to 4 (three; four): one transaction, "
        "run once; a large repository takes a while"
    ]
