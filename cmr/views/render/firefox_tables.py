"""The tables of one thread of a Firefox Profiler processed profile (``firefox``'s module
docstring): stacks, frames and functions each once, samples and markers as added, every string in
the profile's one string array."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from cmr.views.render.interned import Interned

FuncKey = tuple[str, str, int | None]  # (name, file, first line)
INTERVAL: Final = 1  # a marker's phase: from startTime to endTime


@dataclass
class ThreadTables:
    """One thread's tables, filled as its markers and samples are added."""

    strings: Interned
    origin: int
    index: dict[Hashable, int] = field(default_factory=dict)  # stacks, frames, funcs: each once
    stacks: dict[str, list[Any]] = field(default_factory=lambda: columns("frame", "prefix"))
    frames: dict[str, list[Any]] = field(
        default_factory=lambda: columns(
            "address", "inlineDepth", "category", "subcategory", "func", "nativeSymbol",
            "innerWindowID", "line", "column",
        )
    )  # fmt: skip
    funcs: dict[str, list[Any]] = field(
        default_factory=lambda: columns(
            "name", "isJS", "relevantForJS", "resource", "fileName", "lineNumber", "columnNumber"
        )
    )
    samples: list[tuple[int, int | None, int]] = field(default_factory=list)  # (t, stack, w)
    markers: list[tuple[int, int, int, int, dict[str, Any]]] = field(default_factory=list)

    def ms(self, ns: int) -> float:
        return (ns - self.origin) / 1e6

    def stack(self, frames: Iterable[tuple[FuncKey, int | None, int]]) -> int | None:
        """The stack of ``frames`` (function, line, category), outermost first."""
        prefix: int | None = None
        for (name, file, first_line), line, category in frames:
            func = self._row(
                self.funcs, ("func", name, file, first_line), name=self.strings(name),
                isJS=False, relevantForJS=False, resource=-1,
                fileName=self.strings(file) if file else None, lineNumber=first_line,
                columnNumber=None,
            )  # fmt: skip
            frame = self._row(
                self.frames, ("frame", func, line, category), address=-1, inlineDepth=0,
                category=category, subcategory=0, func=func, nativeSymbol=None, innerWindowID=0,
                line=line, column=None,
            )  # fmt: skip
            prefix = self._row(self.stacks, ("stack", prefix, frame), frame=frame, prefix=prefix)
        return prefix

    def _row(self, table: dict[str, list[Any]], key: Hashable, **row: Any) -> int:
        """The index of the row ``key`` names in ``table``, appended when new."""
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(table[next(iter(table))])
            for column, value in row.items():
                table[column].append(value)
        return found

    def marker(self, name: str, start: int, end: int, category: int, data: dict[str, Any]) -> None:
        self.markers.append((start, end, self.strings(name), category, data))

    def tables(self) -> dict[str, Any]:
        self.samples.sort(key=lambda row: row[0])
        self.markers.sort(key=lambda row: (row[0], -row[1]))
        return {
            "samples": {
                "stack": [row[1] for row in self.samples],
                "time": [self.ms(row[0]) for row in self.samples],
                "weight": [row[2] for row in self.samples],
                "weightType": "samples",
                "length": len(self.samples),
            },
            "markers": {
                "data": [row[4] for row in self.markers],
                "name": [row[2] for row in self.markers],
                "startTime": [self.ms(row[0]) for row in self.markers],
                "endTime": [self.ms(row[1]) for row in self.markers],
                "phase": [INTERVAL] * len(self.markers),
                "category": [row[3] for row in self.markers],
                "length": len(self.markers),
            },
            "stackTable": sealed(self.stacks),
            "frameTable": sealed(self.frames),
            "funcTable": sealed(self.funcs),
            "resourceTable": sealed(columns("lib", "name", "host", "type")),
            "nativeSymbols": sealed(columns("libIndex", "address", "name", "functionSize")),
        }


def columns(*names: str) -> dict[str, list[Any]]:
    return {name: [] for name in names}


def sealed(table: dict[str, list[Any]]) -> dict[str, Any]:
    lengths = {len(column) for column in table.values()}
    return {**table, "length": lengths.pop() if lengths else 0}
