"""Which implementation records events: the C accelerator (``tracer._core._speedups``) or pure
Python.

More in docs/architecture.md, "C accelerator".
"""

from __future__ import annotations

import os

from tracer._core.log import log

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Final

#: Set to 1 to run the pure-Python implementation even when the C accelerator is built.
ENV_PURE: Final = "INVOSEQ_PURE"


#: Why the hot path is pure Python (``tracer info`` says it), or None with the C accelerator.
why_pure: str | None = None


def _load() -> ModuleType | None:
    global why_pure
    if os.environ.get(ENV_PURE, "").strip() == "1":
        log.debug("invoseq: %s=1: pure-Python hot path", ENV_PURE)
        why_pure = f"{ENV_PURE}=1"
        return None
    try:
        from tracer._core import _speedups
    except ImportError as exc:
        log.debug("invoseq: no C accelerator (%s): pure-Python hot path", exc)
        why_pure = f"the C accelerator did not import: {exc}"
        return None
    return _speedups


speedups: Final = _load()
#: "c" when the C accelerator records events, "python" otherwise.
IMPLEMENTATION: Final = "python" if speedups is None else "c"
