"""Pausing Python's cyclic garbage collector while a big tree is built or read.

Building a 1,000,000-call tree allocates millions of container objects that all stay alive. Each
allocation burst triggers collections that scan every young object, and the full collections
rescan the whole heap: with the collector on, building such a tree takes several times longer.
Nothing built here forms reference cycles worth collecting, so the collector waits until the work
is done (reference counting still frees everything that goes out of scope).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector for the block; re-enable it after, only if it was on (nested
    pauses and callers that turned it off themselves keep their setting)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
