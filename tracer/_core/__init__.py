"""The hot path and what it stands on: the context (``context``), ids, the per-thread event lists
(``recorder``), the memory bound (``budget``), the traced wrappers (``decorator``), hand-offs
(``handoff``), OpenTelemetry adoption, the C accelerator (``accel``, ``_speedups.c``), the wrapper
registry (``wrapper_frames``) and the runtime's services for the layers below it (``lifecycle``).
Private: the public API is ``tracer``."""
