"""The call tree as text for a terminal, drawn with box guides the way pyinstrument draws its own.

One line per call: duration (or "running"/"incomplete" when there is none yet, an incomplete call
saying why: its process ended, or was lost and when it was last heard from), the method name, its
self time, the thread, the process (``host:pid``: on every line when the sequence spans several
processes, else on the root's only), a hop mark when the call was handed off to it
(``→ thread "pool-0_1", queued 3.20 ms``), a mark when the call raised, and the first few of its
attributes when it has any (an OpenTelemetry span's: ``{http.method=GET, …}``); beneath it, the
call that queued it when it is the root of a linked sequence (``↪ linked from 4a1b2c3d4e5f:…``,
``cmr.views.render.links``) and a line for each log record the tracer recorded on the call
(``⚠ WARNING app.pricing: stock low``, ``cmr.views.render.logs``). Once samples are merged in, a
call says how many fell in it, and the frames estimated from them are drawn apart: dim, marked
``~``, with their file and line (``~8.00 ms  parse  shop/io.py:12  self 2.00 ms  12 samples``).
Lines are built iteratively and joined once, so a 100,000-call tree or a 10,000-deep chain renders
quickly and without recursion.
"""

from __future__ import annotations

from collections.abc import Mapping

from cmr.store.base import PROCESS_ENDED, PROCESS_LOST
from cmr.views.model import (
    KIND_ESTIMATED,
    KIND_SYNTHETIC,
    STATUS_ERROR,
    STATUS_INCOMPLETE,
    STATUS_RUNNING,
    Handoff,
    Node,
    ProcessRef,
    SequenceTree,
)
from cmr.views.render.links import is_link_key, link_lines
from cmr.views.render.logs import is_log_key, log_lines, severe
from cmr.views.render.notes import header_notes
from cmr.views.render.terms import (
    ANSI,
    PLAIN,
    Palette,
    format_duration,
    format_time_of_day,
    plural,
    printable,
)
from cmr.views.tree.budget import Fold, Selection, choose, fits

#: Guides are drawn for this many levels; deeper lines restart at the left margin, marked with
#: the depth they continue from ("[+32] ├─ ..."), so a 10,000-deep chain stays small and fast.
GUIDE_BLOCK = 32

#: Box guides: a child, the last child, and the indents beneath a child and a last child.
BRANCH = "├─ "
LAST = "└─ "
PIPE = "│  "
SPACE = "   "
#: Marks how often a name repeats in a fold line (``app.price`` times ``9,000``).
TIMES = "\N{MULTIPLICATION SIGN}"


def render_header(tree: SequenceTree, palette: Palette = PLAIN) -> str:
    """The sequence's id, status, duration and counts; for a lossy sequence, a second line
    naming the processes that dropped some of its events."""
    word = tree.shown_status
    status = _status_colour(word, palette) + word + palette.reset
    parts = [f"{palette.bold}{tree.seq.hex()}{palette.reset}", status]
    if tree.root.duration_ns is not None:
        parts.append(format_duration(tree.root.duration_ns))
    counts = [
        plural(tree.invocations, "call"),
        plural(tree.threads, "thread"),
        plural(tree.processes, "process"),
    ]
    if tree.hidden:
        counts.append(f"{tree.hidden} hidden")
    if tree.root.samples or tree.samples_skipped:
        sampled = plural(tree.root.samples, "sample")
        if tree.samples_skipped:
            sampled += f" ({tree.samples_skipped} skipped)"
        counts.append(sampled)
    parts.append(" · ".join(counts))
    return "\n".join(["  ".join(parts), *header_notes(tree, palette)])


def render_text(
    tree: SequenceTree,
    *,
    color: bool = False,
    max_nodes: int = 0,
    selection: Selection | None = None,
    link_ids: Mapping[bytes, str] | None = None,
) -> str:
    """The header line, then the tree; no trailing newline.

    ``max_nodes`` (0: no limit) bounds the tree's lines: a bigger tree shows its longest calls
    first, folds the others of each caller into one line (``cmr.views.tree.budget``) and ends with a
    line telling how many calls are hidden and how to see them. A tree that fits prints in full.
    ``selection``: the budget's choice made already (``bigtree``, for a tree built only as far
    as it is shown). ``link_ids``: the prefixes to print of the sequences calls are linked from
    (``views.pipeline.link_ids``)."""
    if max_nodes < 0:
        raise ValueError(f"max_nodes must be >= 0, got {max_nodes}")
    palette = ANSI if color else PLAIN
    if selection is None and max_nodes and not fits(tree.root, max_nodes):
        selection = choose(tree.root, max_nodes)
    total = tree.root.duration_ns or 0
    every_process = tree.processes > 1
    lines = [render_header(tree, palette), _describe(tree.root, None, total, palette, True)]
    stack: list[_Entry] = []
    _push_children(stack, tree.root, 0, "", selection)
    _append_logs(lines, tree.root, "", bool(stack), palette, link_ids=link_ids)
    while stack:
        item, depth, prefix, last, caller = stack.pop()
        block = (depth - 1) // GUIDE_BLOCK * GUIDE_BLOCK
        marker = f"{palette.dim}[+{block}]{palette.reset} " if block else ""
        guide = marker + prefix + (LAST if last else BRANCH)
        if isinstance(item, int):
            noun = "call" if item == 1 else "calls"
            lines.append(f"{guide}{palette.dim}… {item} {noun} hidden{palette.reset}")
            continue
        if isinstance(item, Fold):
            lines.append(f"{guide}{palette.dim}{describe_fold(item)}{palette.reset}")
            continue
        labelled = every_process or caller.process != item.process
        lines.append(guide + _describe(item, caller.process, total, palette, labelled))
        # A new block of levels starts flush left again, so a line never outgrows the screen.
        child_prefix = "" if depth % GUIDE_BLOCK == 0 else prefix + (SPACE if last else PIPE)
        pending = len(stack)
        _push_children(stack, item, depth, child_prefix, selection)
        if item.attributes:  # its log lines go where its children's guides do
            block = depth // GUIDE_BLOCK * GUIDE_BLOCK
            marker = f"{palette.dim}[+{block}]{palette.reset} " if block else ""
            more = len(stack) > pending
            _append_logs(lines, item, marker + child_prefix, more, palette, link_ids=link_ids)
    if selection is not None:
        lines.append(f"{palette.dim}{_closing_line(selection, max_nodes)}{palette.reset}")
    return "\n".join(lines)


def _append_logs(
    lines: list[str],
    node: Node,
    prefix: str,
    more: bool,
    palette: Palette,
    *,
    link_ids: Mapping[bytes, str] | None = None,
) -> None:
    """The node's link to the call that queued it, then its log records, a line each under it;
    ``more``: its children's lines follow, so the guide goes on down to them."""
    if not node.attributes:
        return
    indent = prefix + (PIPE if more else SPACE)
    for line in link_lines(node.attributes, link_ids):
        lines.append(f"{indent}{palette.cyan}{line}{palette.reset}")
    for line in log_lines(node.attributes):
        colour = palette.dim if line[0] == "…" else palette.red if severe(line) else palette.yellow
        lines.append(f"{indent}{colour}{line}{palette.reset}")


def describe_fold(fold: Fold) -> str:
    """The calls of one caller that the line budget left out, and the names that repeat among
    them: ``… 9,990 more calls, total 12.3 s: app.price`` times 9,000 ``(11.0 s)``."""
    text = f"… {fold.calls:,} more {'call' if fold.calls == 1 else 'calls'}"
    total = f"total {format_duration(fold.total_ns)}"
    if fold.running:
        total += f" + {fold.running:,} not ended"
    text += f", {total}"
    if fold.beneath:
        text += f", {fold.beneath:,} more beneath them"
    if fold.repeated:
        names = ", ".join(
            f"{printable(name)} {TIMES}{calls:,} ({format_duration(spent)})"
            for name, calls, spent in fold.repeated
        )
        text += f": {names}"
    return text


def _closing_line(selection: Selection, max_nodes: int) -> str:
    shown, hidden = selection.nodes, selection.hidden
    return (
        f"… {hidden:,} of {shown + hidden:,} calls hidden to keep within {max_nodes:,} lines "
        "(longest calls first): --max-nodes 0 shows them all, --json writes every call"
    )


#: A node, a hidden count or a fold; its depth, the guide prefix, last among its siblings, the
#: caller.
_Entry = tuple[Node | int | Fold, int, str, bool, Node]


def _push_children(
    stack: list[_Entry], node: Node, depth: int, prefix: str, selection: Selection | None
) -> None:
    """Push in reverse so the first child pops first; the hidden count comes out last, after
    the fold of the calls the budget left out."""
    if node.hidden:
        stack.append((node.hidden, depth + 1, prefix, True, node))
    if selection is None:
        children = node.children
    else:
        children = selection.shown[id(node)]
        fold = selection.folds.get(id(node))
        if fold is not None:
            stack.append((fold, depth + 1, prefix, not node.hidden, node))
    trailing = bool(node.hidden) or (selection is not None and id(node) in selection.folds)
    last_index = len(children) - 1
    for position in range(last_index, -1, -1):
        is_last = position == last_index and not trailing
        stack.append((children[position], depth + 1, prefix, is_last, node))


def _describe(
    node: Node, caller: ProcessRef | None, total: int, palette: Palette, labelled: bool
) -> str:
    """One call's line; ``labelled``: name its process (``host:pid``)."""
    if node.kind == KIND_ESTIMATED:
        return _describe_estimated(node, palette)
    parts: list[str] = []
    if node.duration_ns is None:
        status = _status_colour(node.status, palette) + node.status + palette.reset
        reason = incomplete_reason(node)
        if reason:
            status += f" {palette.dim}({reason}){palette.reset}"
        parts.append(status)
    else:
        colour = share_colour(node.duration_ns, total, palette)
        parts.append(colour + format_duration(node.duration_ns) + (palette.reset if colour else ""))
    parts.append(printable(node.name))
    if node.self_ns is not None:
        parts.append(f"{palette.dim}self {format_duration(node.self_ns)}{palette.reset}")
    if node.kind != KIND_SYNTHETIC:  # a made-up root ran on no thread
        thread = f"{printable(node.thread.name)} ({node.thread.tid})"
        if labelled:
            thread += f" {printable(node.process.host)}:{node.process.pid}"
        parts.append(f"{palette.dim}{thread}{palette.reset}")
    if node.samples:
        parts.append(f"{palette.dim}{plural(node.samples, 'sample')}{palette.reset}")
    return "  ".join(parts + _marks(node, palette))


def _marks(node: Node, palette: Palette) -> list[str]:
    """What a call's line says after its thread: its hop, that it outlived its caller, its
    exception, the hand-offs folded under it, its attributes."""
    marks: list[str] = []
    if node.handoff is not None:
        marks.append(f"{palette.cyan}{hop_mark(node, node.handoff)}{palette.reset}")
    if node.detached:  # the sequence did not wait for it
        marks.append(f"{palette.yellow}detached{palette.reset}")
    if node.status == STATUS_ERROR:
        marks.append(f"{palette.red}✗ {printable(node.error or 'error')}{palette.reset}")
    if node.folded:
        hops = plural(node.folded, "untraced hand-off")
        marks.append(f"{palette.dim}+{hops} folded{palette.reset}")
    attributes = format_attributes(node.attributes) if node.attributes else ""
    if attributes:
        marks.append(f"{palette.dim}{attributes}{palette.reset}")
    return marks


#: Attributes shown on a line at most, and characters of each value; ``--json`` has them all.
SHOWN_ATTRIBUTES = 4
ATTRIBUTE_WIDTH = 40
#: Keys left off the line: the span identity InvocationSpanProcessor adds (in --json); the log
#: records (``is_log_key``) and a link (``is_link_key``) have lines of their own.
_QUIET_PREFIX = "otel."


def format_attributes(attributes: dict[str, str | int | float | bool]) -> str:
    """A compact ``{http.method=GET, http.status_code=200, … 3 more}``: the first few keys,
    long values cut."""
    shown = [
        (k, v)
        for k, v in attributes.items()
        if not k.startswith(_QUIET_PREFIX) and not is_log_key(k) and not is_link_key(k)
    ]
    if not shown:
        return ""
    items = []
    for key, value in shown[:SHOWN_ATTRIBUTES]:
        text = str(value)
        if len(text) > ATTRIBUTE_WIDTH:
            text = text[: ATTRIBUTE_WIDTH - 1] + "…"
        items.append(f"{printable(key)}={printable(text)}")
    if len(shown) > SHOWN_ATTRIBUTES:
        items.append(f"… {len(shown) - SHOWN_ATTRIBUTES} more")
    return "{" + ", ".join(items) + "}"


def _describe_estimated(node: Node, palette: Palette) -> str:
    """A frame estimated from samples: all dim, so measured calls stand out."""
    estimate = f"~{format_duration(node.duration_ns or 0)}"
    spread = None if node.bounds is None else node.bounds.spread_ns()
    if spread is not None:
        estimate += f" (±{format_duration(spread)})"
    parts = [estimate, printable(node.name)]
    if node.frame is not None:
        parts.append(f"{printable(short_path(node.frame[0]))}:{node.frame[2]}")
    if node.self_ns is not None:
        parts.append(f"self {format_duration(node.self_ns)}")
    parts.append(plural(node.samples, "sample"))
    return palette.dim + "  ".join(parts) + palette.reset


def short_path(path: str) -> str:
    """The file's name and its directory's (``shop/io.py``): enough to tell files apart."""
    parts = path.replace("\\", "/").rsplit("/", 2)
    return "/".join(parts[-2:]) if len(parts) > 1 else path


def incomplete_reason(node: Node) -> str:
    """Why an incomplete call will never end, or "" for any other call."""
    if node.status != STATUS_INCOMPLETE or node.kind == KIND_SYNTHETIC:
        return ""
    process = node.process
    if process.state == PROCESS_ENDED:
        return "process ended"
    if process.state == PROCESS_LOST:
        return f"process lost, last seen {format_time_of_day(process.last_seen_ns)}"
    return ""


def hop_mark(node: Node, handoff: Handoff) -> str:
    """Where the work went and how long it waited to start there (when that is known: not for
    a remote caller this repository never heard from)."""
    if handoff.kind == "thread":
        where = f'thread "{printable(node.thread.name)}"'
    elif handoff.kind == "process":
        where = f"process {printable(node.process.host)}:{node.process.pid}"
    else:  # "task", "remote", and kinds a newer tracer may send
        where = printable(handoff.kind)
    if handoff.queued_ns is None:
        return f"→ {where}"
    return f"→ {where}, queued {format_duration(handoff.queued_ns)}"


def share_colour(duration_ns: int, total_ns: int, palette: Palette) -> str:
    """Like pyinstrument: the bigger the share of the whole sequence, the hotter the colour."""
    if total_ns <= 0:
        return ""
    share = duration_ns / total_ns
    if share >= 0.6:
        return palette.red
    if share >= 0.3:
        return palette.yellow
    if share >= 0.2:
        return palette.green
    return ""


def _status_colour(status: str, palette: Palette) -> str:
    if status == STATUS_RUNNING:
        return palette.yellow
    if status == STATUS_INCOMPLETE:
        return palette.magenta
    if status == STATUS_ERROR:
        return palette.red
    return palette.green
