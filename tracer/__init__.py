"""invoseq tracer: the library inside the traced program.

    from tracer import traced

    @traced
    def checkout(cart): ...

Every call of a traced function becomes an invocation of a sequence; the sequences stream to the
repository (``cmr serve``, or the one ``tracer run`` embeds). See docs/guide.md.
"""

from tracer.config import Config, ConfigError
from tracer.context import current_sequence
from tracer.decorator import traced
from tracer.patching import instrument, uninstrument
from tracer.propagation import continue_from, extract, inject
from tracer.runtime import configure, flush, shutdown, stats

__all__ = [
    "Config",
    "ConfigError",
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
