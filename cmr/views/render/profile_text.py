"""A profile as text, the way pyinstrument prints one: the longest stacks first, one line each.

A line reads ``41.2 ms  shop.checkout  3 calls  self 3.00 ms  on-CPU 12.0 ms  off-CPU 29.2 ms
412 samples (10 self)``: total time, the name, how many calls merged into the line (when more than
one), self time, what the samples say about the CPU (when any fell there: on-CPU is the CPU time
they measured, off-CPU the rest of the time, spent waiting or sleeping) and the sample weight.
Frames estimated from samples are dim and marked ``~``, with their file and line; a
``--by-thread`` root names its thread and process. Like ``cmr show``, guides restart at the left
margin every GUIDE_BLOCK levels, so a deep recursion stays readable and fast.

A big profile is cut to ``max_nodes`` lines as ``cmr show`` cuts a tree: the longest lines first,
across the whole profile (a line is shown only under its caller's), and the rest of each caller's
lines folded into one (``… 12 more, total 3.20 ms, 340 more beneath them``); a last line says how
many are hidden. A profile that fits prints in full.
"""

from __future__ import annotations

import heapq
import itertools

from cmr.views.analyses.profile import KIND_THREAD, Profile, ProfileNode
from cmr.views.model import KIND_ESTIMATED
from cmr.views.render.terms import ANSI, PLAIN, Palette, format_duration, plural, printable
from cmr.views.render.text import BRANCH, GUIDE_BLOCK, LAST, PIPE, SPACE, share_colour, short_path
from cmr.views.tree.budget import count_beneath

#: A node (or the lines of a caller left out), its depth, the guide prefix, and whether it is the
#: last of its siblings.
_Entry = tuple[ProfileNode | list[ProfileNode], int, str, bool]


def render_profile(profile: Profile, title: str, *, color: bool = False, max_nodes: int = 0) -> str:
    """``title`` (what was profiled), a summary line, then the tree(s), within ``max_nodes``
    lines of tree (0: no limit); no trailing newline."""
    palette = ANSI if color else PLAIN
    lines = [f"{palette.bold}{printable(title)}{palette.reset}", _summary(profile)]
    if not profile.roots:
        lines.append("nothing to profile")
        return "\n".join(lines)
    shown = _choose(profile.roots, max_nodes) if max_nodes else None
    total = sum(root.time_ns for root in profile.roots)
    hidden = 0
    for root in profile.roots:
        lines.append(_describe(root, total, palette))
        stack: list[_Entry] = []
        _push_children(stack, root, 0, "", shown)
        while stack:
            node, depth, prefix, last = stack.pop()
            block = (depth - 1) // GUIDE_BLOCK * GUIDE_BLOCK
            marker = f"{palette.dim}[+{block}]{palette.reset} " if block else ""
            guide = marker + prefix + (LAST if last else BRANCH)
            if isinstance(node, list):  # the lines of a caller that were left out
                folded, beneath = len(node), count_beneath(node)
                hidden += folded + beneath
                lines.append(guide + palette.dim + _describe_fold(node, beneath) + palette.reset)
                continue
            lines.append(guide + _describe(node, total, palette))
            child_prefix = "" if depth % GUIDE_BLOCK == 0 else prefix + (SPACE if last else PIPE)
            _push_children(stack, node, depth, child_prefix, shown)
    if hidden and shown is not None:
        lines.append(
            f"{palette.dim}… {hidden:,} of {len(shown) + hidden:,} lines hidden to keep within "
            f"{max_nodes:,} (longest first): --max-nodes 0 shows them all, --json writes every "
            f"one{palette.reset}"
        )
    return "\n".join(lines)


def _choose(roots: list[ProfileNode], max_lines: int) -> dict[int, int]:
    """How many children (the longest, as they are sorted) of each shown line to show: the
    longest lines first across the profile, each under its caller's, until ``max_lines`` lines
    (the fold lines counted) are spent. Every root is shown."""
    shown: dict[int, int] = {}
    lines = 0
    tiebreak = itertools.count()
    heap: list[tuple[int, int, ProfileNode, int]] = []  # (-time, tiebreak, caller, position)
    for root in roots:
        shown[id(root)] = 0
        lines += 2 if root.children else 1  # its line, and its fold while no child is shown
        if root.children:
            heap.append((-root.children[0].time_ns, next(tiebreak), root, 0))
    heapq.heapify(heap)
    while heap:
        _, _, caller, position = heapq.heappop(heap)
        children = caller.children
        child = children[position]
        last = position + 1 == len(children)  # the caller's fold line goes away
        cost = (2 if child.children else 1) - last
        if lines + cost > max_lines:
            break
        lines += cost
        shown[id(caller)] = position + 1
        shown[id(child)] = 0
        if not last:
            heapq.heappush(
                heap, (-children[position + 1].time_ns, next(tiebreak), caller, position + 1)
            )
        if child.children:
            heapq.heappush(heap, (-child.children[0].time_ns, next(tiebreak), child, 0))
    return shown


def _describe_fold(folded: list[ProfileNode], beneath: int) -> str:
    text = f"… {len(folded):,} more, total {format_duration(sum(n.time_ns for n in folded))}"
    if beneath:
        text += f", {beneath:,} more beneath them"
    return text


def _summary(profile: Profile) -> str:
    parts = [plural(profile.sequences, "sequence")]
    samples = sum(root.samples for root in profile.roots)
    sampled = plural(samples, "sample")
    if profile.samples_skipped:
        sampled += f" ({profile.samples_skipped} skipped: their frames were not found)"
    parts.append(sampled)
    if profile.by_thread:
        parts.append(plural(len(profile.roots), "thread"))
    return " · ".join(parts)


def _push_children(
    stack: list[_Entry], node: ProfileNode, depth: int, prefix: str, shown: dict[int, int] | None
) -> None:
    """Push in reverse so the first child pops first; the fold of what is left out last."""
    children = node.children
    count = len(children) if shown is None else shown.get(id(node), 0)
    if count < len(children):
        stack.append((children[count:], depth + 1, prefix, True))
    for position in range(count - 1, -1, -1):
        last = position == len(children) - 1
        stack.append((children[position], depth + 1, prefix, last))


def _describe(node: ProfileNode, total: int, palette: Palette) -> str:
    estimated = node.kind == KIND_ESTIMATED
    time = format_duration(node.time_ns)
    if estimated:
        time = "~" + time
    else:
        colour = share_colour(node.time_ns, total, palette)
        time = colour + time + (palette.reset if colour else "")
    name = printable(node.name)
    if node.kind == KIND_THREAD:
        name = f"{palette.bold}{name}{palette.reset}"
    parts = [time, name]
    if estimated and node.frame is not None:
        parts.append(f"{printable(short_path(node.frame[0]))}:{node.frame[2]}")
    if node.calls > 1 and node.kind != KIND_THREAD:
        parts.append(plural(node.calls, "call"))
    details = []
    if node.kind != KIND_THREAD:
        details.append(f"self {format_duration(node.self_ns)}")
    if node.cpu_ns is not None:
        details.append(f"on-CPU {format_duration(node.cpu_ns)}")
        details.append(f"off-CPU {format_duration(node.off_cpu_ns or 0)}")
    if node.samples:
        sampled = plural(node.samples, "sample")
        if node.self_samples:
            sampled += f" ({node.self_samples} self)"
        details.append(sampled)
    if estimated:
        return palette.dim + "  ".join(parts + details) + palette.reset
    if details:
        parts.append(palette.dim + "  ".join(details) + palette.reset)
    return "  ".join(parts)
