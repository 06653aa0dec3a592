"""The JSON documents of `cmr ls` and `cmr stats`, and what samples add to them and to
`cmr show --json`."""

from __future__ import annotations

import json

from cmr.store.base import ProcessRecord, SamplerRecord, SequenceSummary, StoreStats
from cmr.views.render.json import (
    stats_to_json,
    summaries_to_json,
)


def test_ls_document_is_an_array_of_summaries():
    summaries = [
        SequenceSummary(
            bytes(range(16)), "shop.checkout", 1_000, 4_000, 12, 3, 2, "complete", error="OSError"
        ),
        SequenceSummary(b"\xff" * 16, "shop.poll", 5_000, None, 1, 1, 1, "running"),
    ]

    doc = json.loads(summaries_to_json(summaries))

    assert doc == [
        {
            "seq": "000102030405060708090a0b0c0d0e0f",
            "root": "shop.checkout",
            "start_ns": 1_000,
            "duration_ns": 3_000,
            "invocations": 12,
            "threads": 3,
            "processes": 2,
            "status": "complete",
            "lossy": False,
            "error": "OSError",
        },
        {
            "seq": "ff" * 16,
            "root": "shop.poll",
            "start_ns": 5_000,
            "duration_ns": None,
            "invocations": 1,
            "threads": 1,
            "processes": 1,
            "status": "running",
            "lossy": False,
            "error": None,
        },
    ]
    assert list(doc[0]) == [
        "seq",
        "root",
        "start_ns",
        "duration_ns",
        "invocations",
        "threads",
        "processes",
        "status",
        "lossy",
        "error",
    ]
    assert json.loads(summaries_to_json([])) == []


def test_stats_document_lists_counters_and_processes():
    ended = ProcessRecord(7, 4242, "box", "pf", ("app.py", "-v"), True, 3, 99)
    lost = ProcessRecord(8, 1, "web", "pf", (), False, 0, 50, heartbeat_ms=500, lost=True)
    alive = ProcessRecord(9, 2, "web", "pf", (), False, 0, 40, heartbeat_ms=500)
    stats = StoreStats(10, 2, 5_000, {"garbage": 1}, [ended, lost, alive])

    assert json.loads(stats_to_json(stats)) == {
        "batches": 10,
        "duplicate_batches": 2,
        "events": 5_000,
        "rejected": {"garbage": 1},
        "processes": [
            {
                "host": "box",
                "pid": 4242,
                "puid": 7,
                "platform_id": "pf",
                "argv": ["app.py", "-v"],
                "dropped": 3,
                "last_seen_ns": 99,
                "ended": True,
                "heartbeat_ms": 0,
                "state": "ended",
                "sampler": None,
            },
            {
                "host": "web",
                "pid": 1,
                "puid": 8,
                "platform_id": "pf",
                "argv": [],
                "dropped": 0,
                "last_seen_ns": 50,
                "ended": False,
                "heartbeat_ms": 500,
                "state": "lost",
                "sampler": None,
            },
            {
                "host": "web",
                "pid": 2,
                "puid": 9,
                "platform_id": "pf",
                "argv": [],
                "dropped": 0,
                "last_seen_ns": 40,
                "ended": False,
                "heartbeat_ms": 500,
                "state": "alive",
                "sampler": None,
            },
        ],
        "samples": 0,
    }


def test_stats_document_carries_samples_and_each_process_sampler_report():
    sampled = ProcessRecord(7, 4242, "box", "pf", (), False, 0, 99)
    quiet = ProcessRecord(8, 1, "web", "pf", (), False, 0, 50)
    report = SamplerRecord("cpu", 10, 6_000, 12, 45_000_000)
    stats = StoreStats(3, 0, 90, {}, [sampled, quiet], samples=1_234, samplers={7: report})

    doc = json.loads(stats_to_json(stats))

    assert doc["samples"] == 1_234
    assert [process["sampler"] for process in doc["processes"]] == [
        {
            "mode": "cpu",
            "interval_ms": 10,
            "ticks": 6_000,
            "late_ticks": 12,
            "cost_ns": 45_000_000,
            "current_interval_ns": 0,  # the tracer predates pacing
            "longest_interval_ns": 0,
            "dropped_samples": 0,
        },
        None,
    ]
    assert list(doc) == [
        "batches",
        "duplicate_batches",
        "events",
        "rejected",
        "processes",
        "samples",
    ]
