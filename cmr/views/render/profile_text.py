"""A profile as text, the way pyinstrument prints one: the longest stacks first, one line each.

A line reads ``41.2 ms  shop.checkout  3 calls  self 3.00 ms  on-CPU 12.0 ms  off-CPU 29.2 ms
412 samples (10 self)``: total time, the name, how many calls merged into the line (when more than
one), self time, what the samples say about the CPU (when any fell there: on-CPU is the CPU time
they measured, off-CPU the rest of the time, spent waiting or sleeping) and the sample weight.
Frames estimated from samples are dim and marked ``~``, with their file and line; a
``--by-thread`` root names its thread and process. Like ``cmr show``, guides restart at the left
margin every GUIDE_BLOCK levels, so a deep recursion stays readable and fast.
"""

from __future__ import annotations

from cmr.views.model import KIND_ESTIMATED
from cmr.views.profile import KIND_THREAD, Profile, ProfileNode
from cmr.views.render.text import (
    ANSI,
    BRANCH,
    GUIDE_BLOCK,
    LAST,
    PIPE,
    PLAIN,
    SPACE,
    Palette,
    format_duration,
    plural,
    share_colour,
    short_path,
)

#: A node, its depth, the guide prefix, and whether it is the last of its siblings.
_Entry = tuple[ProfileNode, int, str, bool]


def render_profile(profile: Profile, title: str, *, color: bool = False) -> str:
    """``title`` (what was profiled), a summary line, then the tree(s); no trailing newline."""
    palette = ANSI if color else PLAIN
    lines = [f"{palette.bold}{title}{palette.reset}", _summary(profile)]
    if not profile.roots:
        lines.append("nothing to profile")
        return "\n".join(lines)
    total = sum(root.time_ns for root in profile.roots)
    for root in profile.roots:
        lines.append(_describe(root, total, palette))
        stack: list[_Entry] = []
        _push_children(stack, root, 0, "")
        while stack:
            node, depth, prefix, last = stack.pop()
            block = (depth - 1) // GUIDE_BLOCK * GUIDE_BLOCK
            marker = f"{palette.dim}[+{block}]{palette.reset} " if block else ""
            lines.append(
                marker + prefix + (LAST if last else BRANCH) + _describe(node, total, palette)
            )
            child_prefix = "" if depth % GUIDE_BLOCK == 0 else prefix + (SPACE if last else PIPE)
            _push_children(stack, node, depth, child_prefix)
    return "\n".join(lines)


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


def _push_children(stack: list[_Entry], node: ProfileNode, depth: int, prefix: str) -> None:
    children = node.children
    for position in range(len(children) - 1, -1, -1):
        stack.append((children[position], depth + 1, prefix, position == len(children) - 1))


def _describe(node: ProfileNode, total: int, palette: Palette) -> str:
    estimated = node.kind == KIND_ESTIMATED
    time = format_duration(node.time_ns)
    if estimated:
        time = "~" + time
    else:
        colour = share_colour(node.time_ns, total, palette)
        time = colour + time + (palette.reset if colour else "")
    name = node.name
    if node.kind == KIND_THREAD:
        name = f"{palette.bold}{name}{palette.reset}"
    parts = [time, name]
    if estimated and node.frame is not None:
        parts.append(f"{short_path(node.frame[0])}:{node.frame[2]}")
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
