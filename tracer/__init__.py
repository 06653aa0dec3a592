"""invoseq tracer: the library inside the traced program.

    from tracer import traced

    @traced
    def checkout(cart): ...

Every call of a traced function becomes an invocation of a sequence; the sequences stream to the
repository (``cmr serve``, or the one ``tracer run`` embeds). See docs/guide.md.
"""

from tracer._core.context import current_sequence
from tracer._core.traced import traced
from tracer._patching import instrument, uninstrument
from tracer._runtime import TracerStats, configure, flush, shutdown, stats
from tracer.config import Config, ConfigError, Settings
from tracer.propagation import SequenceContext, continue_from, extract, inject

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
