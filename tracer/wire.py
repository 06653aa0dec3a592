"""The wire protocol, as ``tracer.wire``: every name of ``invoseq.wire``, where it lives.

Kept for programs that import the protocol through the tracer; ``cmr`` and the tracer itself
import ``invoseq.wire``, which runs nothing of the tracer (docs/architecture.md).
"""

from invoseq.wire import *  # noqa: F403
from invoseq.wire import __all__  # noqa: F401  (the same names)
