"""invoseq tracer: the library inside the traced program.

    from tracer import traced

    @traced
    def checkout(cart): ...

Every call of a traced function becomes an invocation of a sequence; the sequences stream to the
repository (``cmr serve``, or the one ``tracer run`` embeds). See docs/guide.md.
"""

from typing import TYPE_CHECKING, Any, Final

from tracer._core.context import current_sequence
from tracer._core.traced import traced
from tracer._patching import instrument, uninstrument
from tracer._runtime import configure, flush, shutdown, stats
from tracer.propagation import SequenceContext, continue_from, extract, inject

if TYPE_CHECKING:
    from tracer._stats import TracerStats
    from tracer.config import Config, ConfigError, Settings

#: Loaded when first asked for (PEP 562): the settings load with the first ``configure()`` or
#: traced call, the counters with ``stats()``.
_LAZY: Final = {
    "Config": "tracer.config",
    "ConfigError": "tracer.config",
    "Settings": "tracer.config",
    "TracerStats": "tracer._stats",
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
