"""Strings interned into one table, each referred to by its index: the Firefox profile's string
array (``render.firefox``), the HTML report's names (``cmr.report.model``)."""

from __future__ import annotations


class Interned:
    """Each string once, in the order first seen (``table``); calling it with a string gives the
    string's index there."""

    __slots__ = ("_index", "table")

    def __init__(self) -> None:
        self.table: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.table)
            self.table.append(text)
        return found
