"""The types of the report model (``cmr.report.model``): what the page and ``cmr ui``'s JSON read.

The docstring of ``cmr.report.model`` says what each field means; these say what each holds. Bars
and flame nodes are columns: one list per field, index = bar (or flame node).
"""

from __future__ import annotations

from typing import Literal, TypeAlias, TypedDict

__all__ = ["Arrow", "Bars", "Flame", "Lane", "ReportModel", "Summary"]

AttributeValue: TypeAlias = str | int | float | bool


class Summary(TypedDict):
    seq: str
    root: str
    status: str  # running, incomplete, complete or error (cmr.store.base.shown_status)
    origin_ns: int
    origin: str  # origin_ns as a decimal string: a browser's numbers lose its last digits
    origin_iso: str
    end_ns: int
    invocations: int
    threads: int
    processes: int
    lossy: bool
    samples_skipped: int


class Lane(TypedDict):
    process: str  # host:pid, "" for a made-up root's lane
    host: str
    pid: int
    puid: str | None  # hex; None for a made-up root's lane
    thread: str
    tid: int
    state: str  # alive | ended | lost, "" for a made-up root's lane
    rows: int


class Bars(TypedDict):
    name: list[int]  # index into ReportModel.names
    kind: list[int]  # index into ReportModel.kinds
    status: list[int]  # index into ReportModel.statuses
    lane: list[int]
    row: list[int]
    depth: list[int]
    parent: list[int]  # -1 for the root
    start: list[int]
    end: list[int]
    open: list[bool]
    self: list[int | None]
    error: list[str | None]
    iid: list[str | None]
    handoff: list[str | None]
    detached: list[bool]  # it outlived its caller (``calltree.outlives``)
    samples: list[int]
    cpu: list[int | None]
    frame: list[list[str | int] | None]
    # An estimated bar's [start min, start max, end min, end max] (relative; end max None: open)
    bounds: list[list[int | None] | None]
    attributes: list[dict[str, AttributeValue] | None]


Arrow = TypedDict(
    "Arrow",
    {"from": int, "to": int, "kind": str, "submitted": int, "start": int, "queued": int | None},
)


class Flame(TypedDict):
    weight: Literal["samples", "time"]
    name: list[int]
    kind: list[int]
    parent: list[int]
    depth: list[int]
    value: list[int]
    time: list[int]
    self: list[int | None]
    samples: list[int]
    calls: list[int]


class ReportModel(TypedDict):
    version: int
    summary: Summary
    names: list[str]
    kinds: list[str]
    statuses: list[str]
    lanes: list[Lane]
    bars: Bars
    arrows: list[Arrow]
    critical: list[int]  # bar indexes of the critical path, in its order
    flame: Flame
