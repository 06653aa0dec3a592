"""From a stored sequence to the tree the commands show: load, build, merge samples, cut.

``view_sequence`` is the tree ``cmr show`` prints, ``render_sequence`` its text (``tracer run``'s
report prints it too), and ``sequence_tree`` the whole tree the exports and the HTML report use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cmr.gc_paused import paused_gc
from cmr.views.model import SequenceTree, walk
from cmr.views.render.links import linked_seq
from cmr.views.render.text import render_text
from cmr.views.tree.bigtree import longer_tree, shown_tree
from cmr.views.tree.budget import DEFAULT_MAX_NODES
from cmr.views.tree.calltree import build_tree
from cmr.views.tree.hops import fold_empty_hops
from cmr.views.tree.processors import drop_shorter_than, limit_depth

if TYPE_CHECKING:
    from cmr.store.base import SequenceData, Store

__all__ = ["render_sequence", "sequence_tree", "view_sequence"]


def render_sequence(
    store: Store,
    seq: bytes,
    *,
    depth: int | None = None,
    min_duration_ns: int = 0,
    color: bool = False,
    samples: bool = False,
    max_nodes: int = DEFAULT_MAX_NODES,
    all_calls: bool = False,
) -> str:
    """One sequence's tree as ``cmr show`` prints it (without a trailing newline); ``samples``
    merges the stack samples in, as ``cmr show --samples`` does; ``max_nodes`` bounds its lines
    as ``--max-nodes`` does (0: no limit); ``all_calls`` keeps what ``views.tree.hops`` folds."""
    if depth is None and min_duration_ns and not samples:  # the calls that lasted: only theirs
        with paused_gc():  # are made nodes (the end-of-run report's tree)
            data = _loaded(store, seq, samples=False, all_calls=all_calls)
            longer = longer_tree(data, min_duration_ns)
            tree = (
                drop_shorter_than(build_tree(data), min_duration_ns) if longer is None else longer
            )
            del data
        return render_text(tree, color=color, max_nodes=max_nodes, link_ids=link_ids(store, tree))
    if depth is not None or min_duration_ns or samples or not max_nodes:
        tree = view_sequence(
            store, seq, depth, min_duration_ns, samples=samples, all_calls=all_calls
        )
        return render_text(tree, color=color, max_nodes=max_nodes, link_ids=link_ids(store, tree))
    with paused_gc():  # a plain view: a big tree is built only as far as it is shown
        data = _loaded(store, seq, samples=False, all_calls=all_calls)
        shown = shown_tree(data, max_nodes)
        if shown is None:
            tree = build_tree(data)
            return render_text(
                tree, color=color, max_nodes=max_nodes, link_ids=link_ids(store, tree)
            )
        del data  # a million records need not outlive the nodes drawn from them
        tree, selection = shown
        return render_text(
            tree,
            color=color,
            max_nodes=max_nodes,
            selection=selection,
            link_ids=link_ids(store, tree),
        )


def link_ids(store: Store, tree: SequenceTree) -> dict[bytes, str]:
    """The prefix to print of each sequence a call of ``tree`` is linked from, unique in the
    repository (``Store.short_ids``), as ``cmr ls`` prints it."""
    linked = {
        seq
        for node, _ in walk(tree.root)
        if node.attributes and (seq := linked_seq(node.attributes)) is not None
    }
    return store.short_ids(sorted(linked)) if linked else {}


def view_sequence(
    store: Store,
    seq: bytes,
    depth: int | None,
    min_duration_ns: int,
    *,
    samples: bool = False,
    all_calls: bool = False,
) -> SequenceTree:
    """The tree ``cmr show`` prints. Samples are read and merged only when asked for, so a plain
    ``cmr show`` never pays for them. Hand-offs that ran nothing traced are folded unless
    ``all_calls`` (``views.tree.hops``). The garbage collector waits meanwhile: a big sequence is
    millions of objects that all stay alive, which it would scan over and over."""
    with paused_gc():
        data = _loaded(store, seq, samples=samples, all_calls=all_calls)
        tree = build_tree(data)
        if samples:
            from cmr.views.samples.merge import merge_samples  # loaded with samples alone

            tree = merge_samples(tree, data)
        if depth is not None:
            tree = limit_depth(tree, depth)
        return drop_shorter_than(tree, min_duration_ns)


def _loaded(store: Store, seq: bytes, *, samples: bool, all_calls: bool) -> SequenceData:
    """The sequence as the store gives it, its hand-offs that ran nothing traced folded unless
    ``all_calls`` (``views.tree.hops``)."""
    data = store.load_sequence(seq, samples=samples)
    return data if all_calls else fold_empty_hops(data)


def sequence_tree(data: SequenceData) -> SequenceTree:
    """The whole tree of a sequence, with its samples merged in when it has any."""
    tree = build_tree(data)
    if not data.samples:
        return tree
    from cmr.views.samples.merge import merge_samples  # loaded with samples alone

    return merge_samples(tree, data)
