"""What the tracer's hot path needs of the protocol, without the protocol's code: the event
tags, the hand-off kinds and the attribute limits. ``invoseq.wire`` defines the messages with
msgspec and re-exports these; the tracer's core imports them from here, so ``import tracer``
loads no msgspec (it loads when the sender starts).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Final, Literal, TypeAlias

#: Event tags: the first element of every event array.
TAG_START: Final = 0
TAG_END: Final = 1
TAG_ERROR: Final = 2
TAG_HANDOFF: Final = 3
TAG_ATTRS: Final = 4

#: Hand-off kinds: where the work went.
HandoffKind: TypeAlias = 'Literal["thread", "task", "process", "remote"]'
HANDOFF_KINDS: Final[tuple[HandoffKind, ...]] = ("thread", "task", "process", "remote")

#: Attributes of one invocation (``wire.Attrs``): at most this many, each value cut to this long.
MAX_ATTRIBUTES: Final = 128
MAX_ATTRIBUTE_VALUE: Final = 4096

#: The module of the invocations that root a *service* sequence (``cmr ls --kind service``):
#: what a process does to serve rather than a request it serves (an ASGI lifespan, a server's
#: start-up). ``cmr`` leaves them out of its listings unless asked.
SERVICE_MODULE: Final = "invoseq.service"
