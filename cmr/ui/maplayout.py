"""Where the service map's boxes and arrows go: a deterministic layout, no library.

Services stand in columns, left to right by their hops from the entry services
(``ServiceMap.depths``), each column's boxes one under the other in name order, the columns
centred on the tallest. A column is as wide as its widest box and the gap between columns
leaves room for the edges' labels, so no two boxes overlap (a test measures them in a browser).
An edge is a quadratic curve between the two boxes, bent to its left: the edges of one pair of
services in both directions bend apart, and several kinds of one direction bend further each.
Its ends lie on the boxes' borders, on the line from each box's centre to the curve's control
point, so the arrowhead shows. A hand-off from a service to itself is a loop above its box.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Final

from cmr.views.analyses.services import Edge, ServiceMap

#: Box and gap sizes, in SVG units (pixels at 1:1).
BOX_HEIGHT: Final = 46
MIN_BOX_WIDTH: Final = 120
CHAR_WIDTH: Final = 8  # a generous width per character of a label in the page's font
COLUMN_GAP: Final = 190
ROW_GAP: Final = 70
MARGIN: Final = 40
BEND: Final = 36  # the first edge's bend; each further edge of one pair bends this much more


@dataclass(frozen=True, slots=True)
class Box:
    name: str
    program: str
    x: float  # top left corner
    y: float
    width: float
    height: float = BOX_HEIGHT
    entry: bool = False  # sequences started in it

    @property
    def centre(self) -> tuple[float, float]:
        return self.x + self.width / 2, self.y + self.height / 2


@dataclass(frozen=True, slots=True)
class Curve:
    edge: Edge
    path: str  # the SVG path's d
    label_x: float
    label_y: float


@dataclass(frozen=True, slots=True)
class Layout:
    boxes: dict[str, Box]
    curves: list[Curve]
    width: float
    height: float


def box_width(name: str, program: str) -> float:
    return max(MIN_BOX_WIDTH, CHAR_WIDTH * max(len(name), len(program) + 2) + 24)


def layout(found: ServiceMap) -> Layout:
    """The boxes of ``found``'s services and the curves of its edges."""
    depth = found.depths()
    columns: dict[int, list[str]] = defaultdict(list)
    for name in sorted(found.nodes):
        columns[depth[name]].append(name)
    tallest = max((len(names) for names in columns.values()), default=0)
    full_height = tallest * BOX_HEIGHT + max(0, tallest - 1) * ROW_GAP
    boxes: dict[str, Box] = {}
    x = float(MARGIN)
    for column in sorted(columns):
        names = columns[column]
        width = max(box_width(n, found.nodes[n].program) for n in names)
        height = len(names) * BOX_HEIGHT + (len(names) - 1) * ROW_GAP
        y = MARGIN * 2 + (full_height - height) / 2  # room above for loops
        for name in names:
            node = found.nodes[name]
            boxes[name] = Box(
                name, node.program, x, y, box_width(name, node.program), entry=node.entries > 0
            )
            y += BOX_HEIGHT + ROW_GAP
        x += width + COLUMN_GAP
    curves = _curves(found.ordered_edges(), boxes)
    width = max(x - COLUMN_GAP + MARGIN, 2 * MARGIN)
    return Layout(boxes, curves, width, full_height + MARGIN * 3)


def _curves(edges: list[Edge], boxes: dict[str, Box]) -> list[Curve]:
    seen: dict[tuple[str, str], int] = defaultdict(int)
    curves = []
    for edge in edges:
        nth = seen[edge.source, edge.target]
        seen[edge.source, edge.target] += 1
        if edge.source == edge.target:
            curves.append(_loop(edge, boxes[edge.source], nth))
        else:
            curves.append(_arc(edge, boxes[edge.source], boxes[edge.target], BEND * (nth + 1)))
    return curves


def _arc(edge: Edge, source: Box, target: Box, bend: float) -> Curve:
    (x0, y0), (x1, y1) = source.centre, target.centre
    length = math.hypot(x1 - x0, y1 - y0) or 1.0
    # the left of the direction of travel (SVG's y points down): A→B and B→A bend apart
    nx, ny = (y1 - y0) / length, -(x1 - x0) / length
    cx, cy = (x0 + x1) / 2 + nx * bend * 2, (y0 + y1) / 2 + ny * bend * 2
    sx, sy = _border(source, cx, cy)
    ex, ey = _border(target, cx, cy)
    path = f"M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}"
    # the curve's midpoint (t = 1/2)
    return Curve(edge, path, (sx + 2 * cx + ex) / 4, (sy + 2 * cy + ey) / 4)


def _border(box: Box, towards_x: float, towards_y: float) -> tuple[float, float]:
    """Where the line from the box's centre towards a point leaves the box."""
    x, y = box.centre
    dx, dy = towards_x - x, towards_y - y
    scales = [s for s in (box.width / 2 / abs(dx) if dx else None,
                          box.height / 2 / abs(dy) if dy else None) if s is not None]  # fmt: skip
    scale = min(scales, default=0.0)
    return x + dx * scale, y + dy * scale


def _loop(edge: Edge, box: Box, nth: int) -> Curve:
    x, top = box.centre[0], box.y
    rise = BEND * (nth + 1)
    path = (
        f"M{x - 20:.1f},{top:.1f} C{x - 40:.1f},{top - rise:.1f} "
        f"{x + 40:.1f},{top - rise:.1f} {x + 20:.1f},{top:.1f}"
    )
    return Curve(edge, path, x, top - rise * 0.75 - 4)
