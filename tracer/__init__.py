"""invoseq tracer: the library inside the traced program.

    from tracer import traced

    @traced
    def checkout(cart): ...

More in docs/architecture.md, "tracer/__init__.py".
"""

from __future__ import annotations

from tracer._core.context import current_sequence
from tracer._core.traced import traced
from tracer._patching import instrument, uninstrument
from tracer._runtime import configure, flush, shutdown, stats

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from typing import Any, Final

    from tracer._stats import TracerStats
    from tracer.config import Config, ConfigError, Settings
    from tracer.propagation import SequenceContext, continue_from, extract, inject

#: Loaded when first asked for (PEP 562): the settings load with the first ``configure()`` or
#: traced call, the counters with ``stats()``, the propagation (W3C Trace Context) with the
#: first ``inject``, ``extract`` or ``continue_from`` the program takes from here.
_LAZY: Final = {
    "Config": "tracer.config",
    "ConfigError": "tracer.config",
    "Settings": "tracer.config",
    "TracerStats": "tracer._stats",
    "SequenceContext": "tracer.propagation",
    "continue_from": "tracer.propagation",
    "extract": "tracer.propagation",
    "inject": "tracer.propagation",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tracer' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "Config",
    "ConfigError",
    "SequenceContext",
    "Settings",
    "TracerStats",
    "configure",
    "continue_from",
    "current_sequence",
    "extract",
    "flush",
    "inject",
    "instrument",
    "shutdown",
    "stats",
    "traced",
    "uninstrument",
]
