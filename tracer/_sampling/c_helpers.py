"""The sampler's two C helpers, loaded with the C accelerator (on Linux): the main thread sampling
itself where it is (``_main_ticks.c``, for ``main_thread``) and the sampler thread taking its turn
at the GIL (``_gil_turn.c``, for ``sampler``); None each without it.

More in docs/architecture.md, "tracer/_sampling/sampler.py".
"""

from __future__ import annotations

from types import ModuleType

from tracer._core import accel

#: The main thread samples itself at the sampler's request (``tracer/_sampling/_main_ticks.c``):
#: with the C accelerator, on Linux; otherwise the sampler thread reads it as it reads the others.
_main_ticks: ModuleType | None = None
#: The sampler thread takes its turn at the GIL when its tick is due
#: (``tracer/_sampling/_gil_turn.c``), rather than wait for a holder that releases it only for
#: moments; likewise with the accelerator.
_gil_turn: ModuleType | None = None
if accel.speedups is not None:
    try:
        from tracer._sampling import _main_ticks
    except ImportError:  # pragma: no cover - built with the accelerator
        _main_ticks = None
    try:
        from tracer._sampling import _gil_turn
    except ImportError:  # pragma: no cover - built with the accelerator
        _gil_turn = None
