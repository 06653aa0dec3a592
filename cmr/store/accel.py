"""The repository's C accelerator (``cmr/store/_columns.c`` and ``_pack.c``), or None.

``INVOSEQ_PURE=1`` (as for the tracer's hot path), or no compiler at install time, leaves it
out: the stores then read sequences with ``stored_batches.unpack`` and index batches with Python's
pass."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Final

_ENV_PURE: Final = "INVOSEQ_PURE"


def _load() -> ModuleType | None:
    if os.environ.get(_ENV_PURE, "").strip() == "1":
        return None
    try:
        from cmr.store import _columns
    except ImportError:
        return None
    return _columns


#: The extension module when it is built and wanted, else None.
accelerator: Final = _load()
