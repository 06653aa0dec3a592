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

The lines of a sequence's profile (``cmr profile``: calls with the same path from the root
merged, samples grafted) are the same stacks with the same weights, summed per path: a big
sequence's stacks are drawn from them (``profile_folded_stacks``), with no node made per call.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Final

from cmr.views.analyses.profile import ProfileNode
from cmr.views.model import Node, SequenceTree, walk

WEIGHT_SAMPLES: Final = "samples"
WEIGHT_TIME: Final = "time"
WEIGHTS: Final = (WEIGHT_SAMPLES, WEIGHT_TIME)

_SAFE: Final = str.maketrans({";": ":", "\n": " ", "\r": " "})


def has_samples(tree: SequenceTree) -> bool:
    """Whether any call of the tree carries sample weight (samples were merged into it)."""
    return _any_samples(walk(tree.root))


def default_weight(tree: SequenceTree) -> str:
    return WEIGHT_SAMPLES if has_samples(tree) else WEIGHT_TIME


def folded_stacks(tree: SequenceTree, weight: str) -> dict[str, int]:
    """Each distinct stack (frames joined by ``;``) and its weight, zero weights left out.

    The path is one list, extended on the way down and cut on the way up, and joined only for a
    call with weight: a deep chain of calls without weight costs no quadratic string building."""
    return _stacks(walk(tree.root), weight)


def profile_has_samples(roots: list[ProfileNode]) -> bool:
    """Whether any line of a profile carries sample weight."""
    return _any_samples(_walk_lines(roots))


def profile_folded_stacks(roots: list[ProfileNode], weight: str) -> dict[str, int]:
    """``folded_stacks`` of the tree a profile (``Profile.roots``, not by thread) was made from:
    each line adds its calls' self weight to its path."""
    return _stacks(_walk_lines(roots), weight)


def _stacks(walked: Iterable[tuple[Node | ProfileNode, int]], weight: str) -> dict[str, int]:
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {', '.join(WEIGHTS)}, not {weight!r}")
    by_samples = weight == WEIGHT_SAMPLES
    totals: dict[str, int] = {}
    path: list[str] = []
    for node, depth in walked:
        del path[depth:]
        path.append(node.name.translate(_SAFE))
        value = node.self_samples if by_samples else node.self_ns or 0
        if value:
            key = ";".join(path)
            totals[key] = totals.get(key, 0) + value
    if not by_samples:
        totals = {key: round(ns / 1_000) for key, ns in totals.items()}
    return {key: value for key, value in totals.items() if value}


def _any_samples(walked: Iterable[tuple[Node | ProfileNode, int]]) -> bool:
    return any(node.samples or node.self_samples for node, _ in walked)


def _walk_lines(roots: list[ProfileNode]) -> Iterator[tuple[ProfileNode, int]]:
    """Every line of a profile with its depth, each before its children."""
    return itertools.chain.from_iterable(map(walk, roots))


def render_folded(tree: SequenceTree, weight: str | None = None) -> str:
    """The folded lines, sorted, without a trailing newline; ``weight`` None: samples when the
    tree has them, else time."""
    return folded_lines(folded_stacks(tree, weight or default_weight(tree)))


def folded_lines(totals: dict[str, int]) -> str:
    """The stacks and their weights as folded lines, sorted, without a trailing newline."""
    return "\n".join(f"{key} {value}" for key, value in sorted(totals.items()))
