"""Links between sequences: a queued task that runs as the root of a sequence of its own, linked to
the invocation that queued it (``task_sequences="linked"``, ``INVOSEQ_TASK_SEQUENCES=linked``).

More in docs/architecture.md, "tracer/_patching/integrations/_links.py".
"""

from __future__ import annotations

import string
from typing import Final

from tracer._core import context, ids, lifecycle

SEQ: Final = "link.seq"
IID: Final = "link.iid"
PUID: Final = "link.puid"
KIND: Final = "link.kind"

_HEX: Final = frozenset(string.hexdigits.lower())
#: The hex digits of each part of a link: sequence, invocation, process.
_WIDTHS: Final = (32, 16, 16)


def linked() -> bool:
    """Whether queued tasks start sequences of their own, linked to the call that queued them."""
    return lifecycle.config().task_sequences == "linked"


def link_from(current: context.Current | None) -> str | None:
    """The link to the invocation of ``current`` (a context value) in this process; None outside
    any sequence (or in a call run untraced past the memory bound)."""
    if current is None or len(current[0]) != 16:
        return None
    seq, iid = current[0], current[1]
    return f"{seq.hex()}-{iid:016x}-{ids.identity().puid:016x}"


def link_attributes(link: object, kind: str) -> dict[str, str | int | float | bool] | None:
    """The attributes a linked root records for ``link`` (a message's value), or None when it is
    not a link this module wrote."""
    if not isinstance(link, str) or len(link) != sum(_WIDTHS) + 2:
        return None
    parts = link.lower().split("-")
    if [len(part) for part in parts] != list(_WIDTHS) or not all(_HEX.issuperset(p) for p in parts):
        return None
    seq, iid, puid = parts
    return {SEQ: seq, IID: iid, PUID: puid, KIND: kind}
