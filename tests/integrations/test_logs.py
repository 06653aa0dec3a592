"""Log records name their sequence: the record factory ``instrument()`` chains in, what it puts
on every record and on the invocation that logged at WARNING or above, its bounds, that it
leaves the program's logging alone and comes out exactly, and ``cmr show`` drawing the records."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import tracer
from tests.support import cmr, cmr_json, cmr_server, run_traced, write_script
from tracer._core import recorder
from tracer._patching import logs
from tracer.propagation import continue_with
from tracer.testing import Capture, CapturedInvocation, capture

FORMAT = "%(invoseq_seq)s %(invoseq_iid)s %(message)s"
LOGGER = "tests.app.pricing"


@pytest.fixture(name="trace")
def _trace() -> Iterator[Capture]:
    with capture(instrument=True) as trace:
        try:
            yield trace
        finally:
            tracer.uninstrument()


@pytest.fixture(name="output")
def _output() -> Iterator[io.StringIO]:
    """What a handler of the program's, formatting with FORMAT, writes for LOGGER's records."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


log = logging.getLogger(LOGGER)


@tracer.traced
def price(item: str) -> str | None:
    log.info("pricing %s", item)
    log.warning("stock low for %s", item)
    return tracer.current_sequence()


@tracer.traced
def run(body: Callable[[], Any]) -> Any:
    return body()


def only(trace: Capture) -> CapturedInvocation:
    [invocation] = trace.invocations()
    return invocation


def test_a_record_names_the_sequence_and_invocation_it_was_made_in(
    trace: Capture, output: io.StringIO
) -> None:
    seq = price("apple")
    invocation = only(trace)
    assert seq == invocation.seq
    assert output.getvalue().splitlines() == [
        f"{seq} {invocation.iid:016x} pricing apple",
        f"{seq} {invocation.iid:016x} stock low for apple",
    ]


def test_outside_any_sequence_a_record_carries_the_placeholder(
    trace: Capture, output: io.StringIO
) -> None:
    log.warning("idle")
    assert output.getvalue() == "- - idle\n"
    assert trace.invocations() == []


def test_with_only_a_hand_off_pending_a_record_has_the_sequence_but_no_invocation(
    trace: Capture, output: io.StringIO
) -> None:
    seq = bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736")
    with continue_with((seq, 0, 0x00F067AA0BA902B7)):
        log.warning("before the first call")
    assert output.getvalue() == f"{seq.hex()} - before the first call\n"
    assert trace.invocations() == []


def test_warnings_are_recorded_on_the_invocation_and_info_is_not(trace: Capture) -> None:
    prices: dict[str, int] = {}

    def body() -> None:
        log.debug("debug")
        log.info("info")
        log.warning("stock low for %s", "apple")
        log.error("price missing for %d items", 2)
        try:
            prices["pear"]
        except LookupError:
            log.exception("lookup failed")

    run(body)
    assert only(trace).attributes == {
        "log.0": f"WARNING {LOGGER}: stock low for apple",
        "log.1": f"ERROR {LOGGER}: price missing for 2 items",
        "log.2": f"ERROR {LOGGER}: lookup failed [KeyError]",
    }


def test_each_invocation_has_its_own_records(trace: Capture) -> None:
    @tracer.traced
    def outer() -> None:
        log.warning("outer before")
        price("pear")
        log.warning("outer after")

    outer()
    by_name = {i.name.rpartition(".")[2]: i.attributes for i in trace.invocations()}
    assert by_name == {
        "outer": {
            "log.0": f"WARNING {LOGGER}: outer before",
            "log.1": f"WARNING {LOGGER}: outer after",
        },
        "price": {"log.0": f"WARNING {LOGGER}: stock low for pear"},
    }


def test_a_warning_in_a_pool_thread_lands_on_the_invocation_there(trace: Capture) -> None:
    with ThreadPoolExecutor(1) as pool:
        seq = run(lambda: pool.submit(price, "fig").result())
    invocations = {i.name.rpartition(".")[2]: i for i in trace.invocations()}
    assert invocations["price"].seq == seq
    assert invocations["price"].handoff == "thread"
    assert invocations["price"].attributes == {"log.0": f"WARNING {LOGGER}: stock low for fig"}
    assert invocations["run"].attributes is None


def test_records_per_invocation_are_bounded_in_count_and_size(trace: Capture) -> None:
    def body() -> None:
        log.warning("x" * 5000)
        for i in range(1, logs.MAX_RECORDS + 5):
            log.warning("warning %d", i)

    run(body)
    attributes = only(trace).attributes
    assert attributes is not None
    assert sorted(attributes) == sorted(
        [f"log.{n}" for n in range(logs.MAX_RECORDS)] + ["log.dropped"]
    )
    assert attributes["log.0"] == f"WARNING {LOGGER}: " + "x" * (logs.MAX_MESSAGE - 1) + "…"
    assert attributes[f"log.{logs.MAX_RECORDS - 1}"] == f"WARNING {LOGGER}: warning 7"
    assert attributes["log.dropped"] == 5


def test_the_counts_are_kept_for_a_bounded_number_of_invocations(
    trace: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "MAX_TRACKED", 3)
    monkeypatch.setattr(logs, "_counts", {})
    for _ in range(10):
        run(lambda: log.warning("again"))
    assert len(logs._counts) <= 3
    assert [i.attributes for i in trace.invocations()] == [
        {"log.0": f"WARNING {LOGGER}: again"}
    ] * 10


def test_a_message_that_does_not_format_raises_nothing(
    trace: Capture, output: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in production, where a handler reports the error and goes on (pytest's would fail).
    monkeypatch.setattr(logging, "raiseExceptions", False)
    errors = recorder.internal_errors()
    run(lambda: log.warning("%d items of %s", "two"))  # noqa: PLE1206 (the point of the test)
    assert only(trace).attributes == {
        "log.0": f"WARNING {LOGGER}: %d items of %s (arguments did not format: TypeError)"
    }
    assert recorder.internal_errors() == errors


def test_a_message_that_logs_while_the_tracer_formats_it_is_not_recorded_twice(
    trace: Capture, output: io.StringIO
) -> None:
    class Noisy:
        logged = False

        def __str__(self) -> str:
            if not self.logged:  # the first time: the tracer's reading of the message
                self.logged = True
                log.warning("formatting")
            return "noisy"

    run(lambda: log.warning("%s", Noisy()))
    assert only(trace).attributes == {"log.0": f"WARNING {LOGGER}: noisy"}
    assert output.getvalue().splitlines()[0].endswith(" formatting")  # still logged


def test_a_failure_of_the_tracer_is_counted_and_the_record_goes_on(
    trace: Capture, output: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(record: logging.LogRecord) -> str:
        raise RuntimeError("broken")

    monkeypatch.setattr(logs, "describe", broken)
    errors = recorder.internal_errors()

    def body() -> str | None:
        log.warning("still logged")
        return tracer.current_sequence()

    seq = run(body)
    # Once, or twice when it is the first: the error's own report is a record it fails on too.
    assert recorder.internal_errors() in (errors + 1, errors + 2)
    assert output.getvalue().endswith(f"{seq} {only(trace).iid:016x} still logged\n")


def test_uninstrument_restores_exactly_the_previous_factory() -> None:
    original = logging.getLogRecordFactory()

    def theirs(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return original(*args, **kwargs)

    logging.setLogRecordFactory(theirs)
    try:
        with capture(instrument=True):
            try:
                assert logging.getLogRecordFactory() is not theirs
                tracer.instrument()  # again: still one factory of ours on top of theirs
                ours = logging.getLogRecordFactory()
                logs.install()
                assert logging.getLogRecordFactory() is ours
                assert getattr(ours, "previous", None) is theirs
            finally:
                tracer.uninstrument()
            assert logging.getLogRecordFactory() is theirs
            tracer.uninstrument()  # again: nothing more to undo
            assert logging.getLogRecordFactory() is theirs
    finally:
        logging.setLogRecordFactory(original)


def test_a_factory_chained_on_top_of_ours_survives_uninstrument(output: io.StringIO) -> None:
    original = logging.getLogRecordFactory()
    try:
        with capture(instrument=True):
            try:
                ours = logging.getLogRecordFactory()

                def theirs(*args: Any, **kwargs: Any) -> logging.LogRecord:
                    record = ours(*args, **kwargs)
                    record.__dict__["team"] = "pricing"
                    return record

                logging.setLogRecordFactory(theirs)
            finally:
                tracer.uninstrument()
            assert logging.getLogRecordFactory() is theirs
            record = log.makeRecord(LOGGER, logging.WARNING, __file__, 1, "late", (), None)
            assert record.__dict__["team"] == "pricing"
            assert "invoseq_seq" not in record.__dict__  # ours only passes it through now
            tracer.instrument()  # ours again, on top of theirs
            try:
                record = log.makeRecord(LOGGER, logging.WARNING, __file__, 1, "again", (), None)
                assert record.__dict__["team"] == "pricing"
                assert record.__dict__["invoseq_seq"] == logs.PLACEHOLDER
            finally:
                tracer.uninstrument()
            assert logging.getLogRecordFactory() is theirs
    finally:
        logging.setLogRecordFactory(original)


def test_the_programs_logging_configuration_is_left_alone(output: io.StringIO) -> None:
    def configuration() -> list[Any]:
        root = logging.getLogger()
        loggers = {
            name: (logger.level, list(logger.handlers), logger.propagate)
            for name, logger in logging.Logger.manager.loggerDict.items()
            if isinstance(logger, logging.Logger)
        }
        formatters = [handler.formatter for handler in root.handlers]
        return [root.level, list(root.handlers), formatters, loggers, logging.getLoggerClass()]

    before = configuration()
    with capture(instrument=True) as trace:
        try:
            price("kiwi")
            assert configuration() == before
            assert only(trace).attributes is not None
        finally:
            tracer.uninstrument()
    assert configuration() == before


SCRIPT = """
import logging
import sys

import tracer

tracer.configure(instrument=True)
logging.basicConfig(
    stream=sys.stdout, level=logging.INFO, format="%(invoseq_seq)s %(invoseq_iid)s %(message)s"
)
log = logging.getLogger("app.pricing")

@tracer.traced
def price(item):
    if item == "apple":
        log.warning("stock low for %s", item)
    return 3

@tracer.traced
def checkout():
    log.info("checking out")
    return sum(price(item) for item in ("apple", "pear"))

checkout()
"""


def test_cmr_show_draws_a_warning_under_its_call(tmp_path: Path) -> None:
    db = tmp_path / "cmr.sqlite"
    script = write_script(tmp_path / "shop.py", SCRIPT)
    with cmr_server(db) as endpoint:
        program = run_traced(script, endpoint)
    [summary] = cmr_json(db, "ls")
    seq = summary["seq"]
    # The program's own log lines name it too.
    assert re.fullmatch(rf"{seq} [0-9a-f]{{16}} checking out", program.stdout.splitlines()[0])

    lines = cmr(db, "show", seq).stdout.splitlines()
    [at] = [n for n, line in enumerate(lines) if "__main__.price" in line][:1]
    assert "__main__.checkout" in lines[1]
    assert lines[at + 1] == "│     ⚠ WARNING app.pricing: stock low for apple"
    assert "__main__.price" in lines[at + 2]
    assert "{" not in lines[at]  # not in the attributes on the call's line

    root = cmr_json(db, "show", seq)["root"]
    [apple, pear] = root["children"]
    assert apple["attributes"] == {"log.0": "WARNING app.pricing: stock low for apple"}
    assert pear["attributes"] is None
    assert root["attributes"] is None  # INFO is not recorded
