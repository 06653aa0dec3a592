"""`cmr export --format firefox`: the Firefox Profiler's processed profile (version 57), checked
against a JSON schema written from the profiler's documented types and for what the profiler
reads beyond it: a thread per traced thread, a marker per measured call, every sample weighted,
an idle stretch spread over its duration, every index in range."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from cmr.cli import main
from cmr.exports import BY_NAME, export_sequence
from cmr.store.base import SampleRecord
from cmr.views.pipeline import sequence_tree
from cmr.views.render.firefox import render_firefox, spread
from tests.cmr.export_support import SEQ as SHOP_SEQ
from tests.cmr.export_support import filled, load
from tests.cmr.otlp.test_export import fixture_shop, walk  # noqa: F401 -- shared run
from tests.cmr.views.conftest import SequenceBuilder
from tests.support import cmr, cmr_json

MS = 1_000_000
T0 = 1_700_000_000 * 1_000_000_000  # a wall-clock origin, as recorded
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "data" / "firefox-processed-profile-v57.schema.json")
    .read_text()
)  # fmt: skip


class Profile:
    """A parsed export, checked: the schema, then what the profiler reads beyond it."""

    def __init__(self, text: str | bytes) -> None:
        self.document: dict[str, Any] = json.loads(text)
        jsonschema.validate(self.document, SCHEMA)
        self.meta = self.document["meta"]
        self.strings: list[str] = self.document["shared"]["stringArray"]
        self.threads: list[dict[str, Any]] = self.document["threads"]
        for thread in self.threads:
            self._check(thread)

    def _check(self, thread: dict[str, Any]) -> None:
        tables = ("samples", "markers", "stackTable", "frameTable", "funcTable")
        for table in (thread[name] for name in (*tables, "resourceTable", "nativeSymbols")):
            for column, values in table.items():
                if isinstance(values, list):
                    assert len(values) == table["length"], column
        stacks, frames, funcs = thread["stackTable"], thread["frameTable"], thread["funcTable"]
        for at, (frame, prefix) in enumerate(zip(stacks["frame"], stacks["prefix"], strict=True)):
            assert 0 <= frame < frames["length"]
            assert prefix is None or 0 <= prefix < at  # a prefix comes before its stacks
        categories = len(self.meta["categories"])
        for func, category in zip(frames["func"], frames["category"], strict=True):
            assert 0 <= func < funcs["length"]
            assert 0 <= category < categories
        for name, file in zip(funcs["name"], funcs["fileName"], strict=True):
            assert 0 <= name < len(self.strings)
            assert file is None or 0 <= file < len(self.strings)
        samples = thread["samples"]
        assert all(s is None or 0 <= s < stacks["length"] for s in samples["stack"])
        assert samples["time"] == sorted(samples["time"])
        markers = thread["markers"]
        assert all(0 <= name < len(self.strings) for name in markers["name"])
        assert all(0 <= category < categories for category in markers["category"])
        schemas = {schema["name"] for schema in self.meta["markerSchema"]}
        assert all(data["type"] in schemas for data in markers["data"])
        for start, end in zip(markers["startTime"], markers["endTime"], strict=True):
            assert 0 <= start <= end

    def thread(self, name: str, pid: str | None = None) -> dict[str, Any]:
        [found] = [
            t for t in self.threads if t["name"] == name and (pid is None or t["pid"] == pid)
        ]
        return found

    def markers(self, thread: dict[str, Any]) -> list[tuple[str, float, float, dict[str, Any]]]:
        m = thread["markers"]
        return [
            (self.strings[m["name"][i]], m["startTime"][i], m["endTime"][i], m["data"][i])
            for i in range(m["length"])
        ]

    def samples(self, thread: dict[str, Any]) -> list[tuple[float, list[tuple[str, str]], int]]:
        """(time, stack outermost first as (function, category name), weight) per sample."""
        s = thread["samples"]
        return [
            (s["time"][i], self.stack(thread, s["stack"][i]), s["weight"][i])
            for i in range(s["length"])
        ]

    def stack(self, thread: dict[str, Any], at: int | None) -> list[tuple[str, str]]:
        stacks, frames = thread["stackTable"], thread["frameTable"]
        names = thread["funcTable"]["name"]
        found = []
        while at is not None:
            frame = stacks["frame"][at]
            category = self.meta["categories"][frames["category"][frame]]["name"]
            found.append((self.strings[names[frames["func"][frame]]], category))
            at = stacks["prefix"][at]
        return found[::-1]


def built() -> SequenceBuilder:
    """main (0-100 ms) calls work (10-60 ms) on thread T1; samples inside work, inside main,
    a collapsed idle stretch of 4 ticks (50-90 ms) across work's end, one outside every call."""
    b = SequenceBuilder()
    b.call("app.main", 1, start=T0, end=T0 + 100 * MS, line=10)
    b.call("app.work", 2, 1, start=T0 + 10 * MS, end=T0 + 60 * MS, line=20)
    b.frame(1, "main", line=10)
    b.frame(2, "work", line=20)
    b.frame(3, "spin", line=30, file="lib.py")
    b.sample(T0 + 20 * MS, [1, 2, 3], duration=5 * MS, cpu=5 * MS, lines=[11, 21, 33])
    b.sample(T0 + 70 * MS, [1], duration=5 * MS, cpu=1 * MS)
    b.sample(T0 + 50 * MS, [1, 2], weight=4, duration=40 * MS, cpu=2 * MS)
    b.sample(T0 + 200 * MS, [1], duration=5 * MS)  # after main returned: no call holds it
    return b


def export(b: SequenceBuilder) -> Profile:
    data = b.data()
    return Profile(render_firefox(sequence_tree(data), data))


def test_the_calls_are_interval_markers_in_milliseconds_from_the_start_time() -> None:
    profile = export(built())
    assert profile.meta["preprocessedProfileVersion"] == 57
    assert profile.meta["startTime"] == T0 / 1e6
    [thread] = profile.threads
    calls = [(name, start, end) for name, start, end, data in profile.markers(thread)]
    assert [c for c in calls if c[0].startswith("app.")] == [
        ("app.main", 0.0, 100.0),
        ("app.work", 10.0, 60.0),
    ]
    [main, work] = [data for name, _s, _e, data in profile.markers(thread) if name[:4] == "app."]
    assert main == {"type": "InvoseqCall", "iid": 1, "status": "ok"}
    assert work["iid"] == 2


def test_samples_are_weighted_and_stacked_under_the_call_they_were_taken_under() -> None:
    b = built()
    profile = export(b)
    [thread] = profile.threads
    traced, python = "Traced", "Python"
    assert profile.samples(thread) == [
        (20.0, [("app.main", traced), ("app.work", traced), ("spin", python)], 1),
        # the idle stretch (50-90 ms, 4 ticks): a tick each 10 ms, under the call holding it
        (50.0, [("app.main", traced), ("app.work", traced)], 1),
        (60.0, [("app.main", traced), ("work", python)], 1),
        (70.0, [("app.main", traced)], 1),
        (70.0, [("app.main", traced), ("work", python)], 1),
        (80.0, [("app.main", traced), ("work", python)], 1),
        (200.0, [("main", python)], 1),  # held by no call: its own stack
    ]
    assert thread["samples"]["weightType"] == "samples"
    assert sum(thread["samples"]["weight"]) == sum(s.weight for s in b.samples) == 7
    frames = thread["frameTable"]
    spin = frames["func"].index(thread["funcTable"]["name"].index(profile.strings.index("spin")))
    assert frames["line"][spin] == 33  # the line it was running


def test_an_idle_stretch_is_spread_over_its_duration_so_a_selection_counts_its_share() -> None:
    profile = export(built())
    [thread] = profile.threads

    def selected(start: float, end: float) -> int:
        """The weight the profiler counts for a range selection: the samples it holds."""
        times, weights = thread["samples"]["time"], thread["samples"]["weight"]
        return sum(w for t, w in zip(times, weights, strict=True) if start <= t < end)

    # the stretch's 4 ticks at 50, 60, 70 and 80 ms, and the single sample at 70 ms
    assert selected(50.0, 90.0) == 4 + 1
    assert selected(50.0, 70.0) == 2  # the first half of the stretch: half of its weight
    assert selected(80.0, 90.0) == 1
    idle = [m for m in profile.markers(thread) if m[3]["type"] == "InvoseqIdle"]
    assert idle == [
        (
            "idle: 4 samples",
            50.0,
            90.0,
            {"type": "InvoseqIdle", "weight": 4, "duration": 40.0, "cpu": 2.0},
        )
    ]


def test_a_long_stretch_is_spread_into_at_most_the_limit_its_weight_kept() -> None:
    long = SampleRecord(1, 1, T0, 2_500, 25_000 * MS, 7 * MS, (1,), (10,))
    parts = spread(long, limit=1_000)
    assert len(parts) == 1_000
    assert sum(p.weight for p in parts) == 2_500
    assert {p.weight for p in parts} == {2, 3}
    assert sum(p.cpu_ns for p in parts) == 7 * MS
    steps = {b.t_ns - a.t_ns for a, b in itertools.pairwise(parts)}
    assert steps == {25 * MS}  # even steps from the stretch's first instant
    assert parts[0].t_ns == T0
    short = SampleRecord(1, 1, T0, 3, 30 * MS, 0, (1,), (10,))
    assert [(p.t_ns - T0, p.weight) for p in spread(short)] == [(0, 1), (10 * MS, 1), (20 * MS, 1)]


def test_ticks_collapsed_at_one_instant_stay_one_sample_with_their_marker() -> None:
    b = built()
    b.sample(T0 + 95 * MS, [1], weight=3, duration=0)  # three ticks, no span to spread them on
    profile = export(b)
    [thread] = profile.threads
    assert (95.0, [("app.main", "Traced")], 3) in profile.samples(thread)
    idle = [(m[0], m[1], m[2]) for m in profile.markers(thread) if m[3]["type"] == "InvoseqIdle"]
    assert ("idle: 3 samples", 95.0, 95.0) in idle


def test_the_same_records_give_the_same_file() -> None:
    assert export(built()).document == export(built()).document


def test_processes_sharing_a_pid_and_host_stay_apart() -> None:
    b = SequenceBuilder()
    b.process(0xA, pid=4242, host="box")
    b.process(0xB, pid=4242, host="box")  # a reused pid
    b.process(0xC, pid=77, host="box")
    b.call("app.first", 1, start=T0, end=T0 + MS, puid=0xA)
    b.call("app.second", 1, start=T0 + 2 * MS, end=T0 + 3 * MS, puid=0xB)
    b.call("app.third", 1, start=T0 + 4 * MS, end=T0 + 5 * MS, puid=0xC)
    profile = export(b)
    assert [t["pid"] for t in profile.threads] == ["4242@box#a", "4242@box#b", "77"]
    assert [t["isMainThread"] for t in profile.threads] == [True, True, True]


# -- through the command, on a stored sequence ---------------------------------------------


@pytest.fixture(name="repo")
def fixture_repo(tmp_path) -> str:
    return filled(str(tmp_path / "repo.sqlite"))


def test_one_thread_per_traced_thread_of_every_process(repo, capsys) -> None:
    assert main(["--db", repo, "export", SHOP_SEQ.hex()[:8], "--format", "firefox"]) == 0
    out, err = capsys.readouterr()
    profile = Profile(out)
    assert err == ""
    assert [(t["pid"], t["name"], t["tid"], t["isMainThread"]) for t in profile.threads] == [
        ("4242@web-1", "thread-1", 1001, True),  # two hosts, one OS pid: told apart
        ("4242@web-1", "thread-2", 1002, False),
        ("4242@db-1", "thread-1", 1001, True),
    ]
    assert {t["processName"] for t in profile.threads} == {"app"}
    web = profile.thread("thread-1", "4242@web-1")
    calls = {name: (start, end, data) for name, start, end, data in profile.markers(web)}
    assert calls["shop.checkout"][:2] == (0.0, 20.0)
    assert calls["shop.audit"][2]["error"] == "ValueError"
    pool = profile.thread("thread-2")
    charge = {name: data for name, _s, _e, data in profile.markers(pool)}["shop.charge"]
    assert (charge["handoff"], charge["queued"]) == ("thread", 0.5)
    db = profile.thread("thread-1", "4242@db-1")
    lock = {name: (start, end, data) for name, start, end, data in profile.markers(db)}
    assert lock["stock.lock"] == (7.0, 20.0, {"type": "InvoseqCall", "iid": 2,
                                              "status": "incomplete"})  # fmt: skip
    assert sum(len(profile.samples(t)) for t in profile.threads) == 4


def test_a_sequence_without_samples_exports_its_markers(tmp_path, capsys) -> None:
    path = filled(str(tmp_path / "unsampled.sqlite"), samples=False)
    target = tmp_path / "seq.firefox.json"
    argv = ["--db", path, "export", SHOP_SEQ.hex(), "--format", "firefox", "-o", str(target)]
    assert main(argv) == 0
    assert capsys.readouterr().err == f"cmr: wrote {target}: {BY_NAME['firefox'].open_with}\n"
    profile = Profile(target.read_text())
    assert [t["samples"]["length"] for t in profile.threads] == [0, 0, 0]
    assert sum(t["markers"]["length"] for t in profile.threads) == 7


# -- a real traced run ----------------------------------------------------------------------


@pytest.mark.system
def test_a_traced_runs_profile_has_its_threads_calls_and_samples(shop) -> None:
    db, seq = shop
    profile = Profile(cmr(db, "export", seq[:8], "--format", "firefox").stdout)
    shown = [n for n in walk(cmr_json(db, "show", seq)["root"]) if n["kind"] == "measured"]
    data = load(str(db), bytes.fromhex(seq))
    traced_threads = {(n["process"]["puid"], n["thread"]["tid"]) for n in shown}
    traced_threads |= {(s.puid, s.tid) for s in data.samples}
    assert len(profile.threads) == len(traced_threads) >= 3  # main, a pool thread, the child
    assert len({t["pid"] for t in profile.threads}) == 2  # the shop and its forked child
    for pid in {t["pid"] for t in profile.threads}:
        assert [t["isMainThread"] for t in profile.threads if t["pid"] == pid].count(True) == 1
    # meta.startTime is a double of milliseconds since the epoch: good to a microsecond or so;
    # the times relative to it are exact to the nanosecond.
    origin = min([n["start_ns"] for n in shown] + [s.t_ns for s in data.samples])
    assert profile.meta["startTime"] == pytest.approx(origin / 1e6, abs=1e-3)
    markers = Counter(
        (name, round(s, 6), round(e, 6))
        for t in profile.threads
        for name, s, e, data_ in profile.markers(t)
        if data_["type"] == "InvoseqCall"
    )
    expected = Counter(
        (
            n["name"],
            round((n["start_ns"] - origin) / 1e6, 6),
            round((n["end_ns"] - origin) / 1e6, 6),
        )
        for n in shown
    )
    assert markers == expected
    samples = [s for t in profile.threads for s in profile.samples(t)]
    assert samples, "the shop's run was sampled every 5 ms"
    assert sum(weight for *_rest, weight in samples) == sum(s.weight for s in data.samples)
    assert any(stack and stack[0][1] == "Traced" for _t, stack, _w in samples)
    collapsed = [s for s in data.samples if s.weight > 1]
    idle = [m for t in profile.threads for m in profile.markers(t) if m[3]["type"] == "InvoseqIdle"]
    assert sorted(m[3]["weight"] for m in idle) == sorted(s.weight for s in collapsed)
    for marker in idle:
        assert marker[2] - marker[1] == pytest.approx(marker[3]["duration"], abs=1e-6)


def test_export_sequence_offers_firefox(repo) -> None:
    Profile(export_sequence(load(repo), "firefox"))
