"""Two sequences compared call path by call path: what got slower, what is new, what is gone.

A call's path is the chain of names from the root to it, joined by ``/``
(``checkout/fetch/parse``). A name a caller calls more than once is numbered among its siblings
from the second call on, in start order (``checkout/fetch``, ``checkout/fetch#2``), so the
first call of A meets the first call of B, the second the second, and a call B made once more
than A is a path of B alone. Each path's time is its call's duration (a call not ended has
none). The rows come largest change first (a path in one sequence only changes by its whole
time).
"""

from __future__ import annotations

from dataclasses import dataclass

from cmr.views.model import Node


@dataclass(frozen=True, slots=True)
class PathDelta:
    """One call path: its time in A and in B (None: not there, or not ended), and B - A
    (a missing or unended side counting 0)."""

    path: str
    a_ns: int | None
    b_ns: int | None
    in_a: bool
    in_b: bool

    @property
    def delta_ns(self) -> int:
        return (self.b_ns or 0) - (self.a_ns or 0)


def call_paths(root: Node) -> dict[str, int | None]:
    """Every call's path, with its duration, in preorder."""
    paths: dict[str, int | None] = {}
    stack: list[tuple[Node, str]] = [(root, root.name)]
    while stack:
        node, path = stack.pop()
        paths[path] = node.duration_ns
        seen: dict[str, int] = {}
        named: list[tuple[Node, str]] = []
        for child in sorted(node.children, key=lambda child: child.start_ns):
            count = seen[child.name] = seen.get(child.name, 0) + 1
            suffix = f"#{count}" if count > 1 else ""
            named.append((child, f"{path}/{child.name}{suffix}"))
        stack.extend(reversed(named))
    return paths


def diff_paths(a: Node, b: Node) -> list[PathDelta]:
    """The rows of A against B, largest change first (then by path)."""
    in_a, in_b = call_paths(a), call_paths(b)
    rows = [
        PathDelta(path, in_a.get(path), in_b.get(path), path in in_a, path in in_b)
        for path in in_a.keys() | in_b.keys()
    ]
    rows.sort(key=lambda row: (-abs(row.delta_ns), row.path))
    return rows
