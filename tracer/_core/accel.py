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


#: The C accelerator's interface this source expects (``_speedups.INTERFACE``, from
#: ``SPEEDUPS_INTERFACE`` in ``_speedups.c``): raised with every change to what the module's
#: functions and types take or give, in both places at once. A module built from other sources
#: (an editable checkout not rebuilt since) is then left unused, with a warning, rather than
#: failing at import or recording wrongly.
INTERFACE: Final = 4

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
    built = getattr(_speedups, "INTERFACE", None)
    if built != INTERFACE:
        why_pure = (
            f"the C accelerator was built from other sources (its interface {built}, this code's"
            f" {INTERFACE}): rebuild it (pip install -e ., or python setup.py build_ext --inplace)"
        )
        log.warning("invoseq: %s; the hot path is pure Python until then", why_pure)
        return None
    return _speedups


speedups: Final = _load()
#: "c" when the C accelerator records events, "python" otherwise.
IMPLEMENTATION: Final = "python" if speedups is None else "c"
