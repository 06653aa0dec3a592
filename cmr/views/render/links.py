"""Where a call came from, when its tree alone does not say it, as lines of their own (for the
text renderer): the link to the call that queued it, and a parent that is approximate.

A task queued with ``task_sequences="linked"`` (``INVOSEQ_TASK_SEQUENCES=linked``) runs as the
root of a sequence of its own; the tracer records on that root which invocation queued it, as
attributes: ``link.seq`` (the producer's sequence, 32 hex digits), ``link.iid`` (its invocation,
16 hex digits), ``link.puid`` (its process) and ``link.kind`` (the integration: ``celery``). They
stay in the attributes (``--json``); ``cmr show`` draws them under their call, the sequence cut
to the prefix ``cmr ls`` prints (which ``cmr show`` accepts)::

    4.10 ms  tasks.charge  MainThread (1)
       ↪ linked from 4a1b2c3d4e5f:00000000000000a7 (celery)

A call whose context reached it without a hand-off of the tracer's (copied by code it does not
patch, inside a call nested in a root) has that root, or the strand it ran in, for parent: an
ancestor of the exact parent. The tracer marks it ``invoseq.parent = approximate``
(docs/architecture.md, "The invocation stack"), drawn as::

       ≈ parent approximate (the context came without a hand-off)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from cmr.views.render.terms import printable

SEQ: Final = "link.seq"
IID: Final = "link.iid"
PUID: Final = "link.puid"
KIND: Final = "link.kind"
PARENT: Final = "invoseq.parent"
APPROXIMATE: Final = "approximate"
KEYS: Final = frozenset({SEQ, IID, PUID, KIND, PARENT})
MARK: Final = "↪"
#: The characters of the sequence drawn: the prefix ``cmr ls`` prints (``tables.SEQ_PREFIX_LEN``,
#: which imports this module through ``text``).
SEQ_PREFIX_LEN: Final = 12
#: Characters of a link's invocation id or kind drawn at most (a well-formed id has 16).
_WIDTH: Final = 32


def is_link_key(key: str) -> bool:
    """Whether an attribute is part of a link the tracer wrote."""
    return key in KEYS


def linked_seq(attributes: dict[str, str | int | float | bool]) -> bytes | None:
    """The id of the sequence a call is linked from, when its attributes carry a well-formed
    one."""
    seq = attributes.get(SEQ)
    if not isinstance(seq, str) or len(seq) != 32:
        return None
    try:
        return bytes.fromhex(seq)
    except ValueError:
        return None


def link_lines(
    attributes: dict[str, str | int | float | bool], short_ids: Mapping[bytes, str] | None = None
) -> list[str]:
    """``↪ linked from 4a1b2c3d4e5f:00000000000000a7 (celery)`` for a call that carries a link,
    ``≈ parent approximate …`` for one whose parent is approximate; else []. ``short_ids``:
    the prefix to print of a linked id (``Store.short_ids``: unique in the repository), else
    its first SEQ_PREFIX_LEN digits."""
    lines = []
    if attributes.get(PARENT) == APPROXIMATE:
        lines.append("≈ parent approximate (the context came without a hand-off)")
    seq = attributes.get(SEQ)
    if not isinstance(seq, str) or not seq:
        return lines
    linked = linked_seq(attributes)
    shown = None if linked is None or short_ids is None else short_ids.get(linked)
    text = f"{MARK} linked from {_clean(shown or seq[:SEQ_PREFIX_LEN])}"
    iid = attributes.get(IID)
    if isinstance(iid, str) and iid:
        text += f":{_clean(iid)}"
    kind = attributes.get(KIND)
    if isinstance(kind, str) and kind:
        text += f" ({_clean(kind)})"
    return [*lines, text]


def _clean(text: str) -> str:
    """At most ``_WIDTH`` characters, escaped (``terms.printable``)."""
    return printable(text[:_WIDTH])
