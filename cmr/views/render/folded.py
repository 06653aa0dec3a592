"""A call tree as folded stacks: the input of flamegraph.pl, inferno and speedscope's importer.

One line per distinct stack, ``root;caller;callee <weight>``, sorted, frames named as in
``cmr show``. The stack of a call is its path from the sequence's root, across threads and
processes (a call handed off to a worker hangs under the call that submitted it, as in the tree).
Several calls with the same path add up, and a stack with no weight is left out.

Two weights:

- ``samples``: each call's self sample weight, so measured calls and the estimated ones merged
  from samples below them make the flame graph a CPU/wall profile. The default when the sequence
  has samples.
- ``time``: each call's self time in whole microseconds (summed per stack, then rounded), for a
  sequence without samples; calls still open have no self time and count nothing.

``;`` separates frames and a line ends at its newline, so those characters in a name become ``:``
and a space.
"""

from __future__ import annotations

from typing import Final

from cmr.views.model import Node, SequenceTree, walk

WEIGHT_SAMPLES: Final = "samples"
WEIGHT_TIME: Final = "time"
WEIGHTS: Final = (WEIGHT_SAMPLES, WEIGHT_TIME)

_SAFE: Final = str.maketrans({";": ":", "\n": " ", "\r": " "})


def has_samples(tree: SequenceTree) -> bool:
    """Whether any call of the tree carries sample weight (samples were merged into it)."""
    return any(node.samples or node.self_samples for node, _ in walk(tree.root))


def default_weight(tree: SequenceTree) -> str:
    return WEIGHT_SAMPLES if has_samples(tree) else WEIGHT_TIME


def folded_stacks(tree: SequenceTree, weight: str) -> dict[str, int]:
    """Each distinct stack (frames joined by ``;``) and its weight, zero weights left out.

    The path is one list, extended on the way down and cut on the way up, and joined only for a
    call with weight: a deep chain of calls without weight costs no quadratic string building."""
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {', '.join(WEIGHTS)}, not {weight!r}")
    by_samples = weight == WEIGHT_SAMPLES
    totals: dict[str, int] = {}
    path: list[str] = []
    for node, depth in walk(tree.root):
        del path[depth:]
        path.append(frame_name(node))
        value = node.self_samples if by_samples else node.self_ns or 0
        if value:
            key = ";".join(path)
            totals[key] = totals.get(key, 0) + value
    if not by_samples:
        totals = {key: round(ns / 1_000) for key, ns in totals.items()}
    return {key: value for key, value in totals.items() if value}


def render_folded(tree: SequenceTree, weight: str | None = None) -> str:
    """The folded lines, sorted, without a trailing newline; ``weight`` None: samples when the
    tree has them, else time."""
    totals = folded_stacks(tree, weight or default_weight(tree))
    return "\n".join(f"{key} {value}" for key, value in sorted(totals.items()))


def frame_name(node: Node) -> str:
    return node.name.translate(_SAFE)
