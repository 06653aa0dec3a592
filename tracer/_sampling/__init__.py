"""The stack sampler: a thread of its own that reads, at every tick, the stacks of the threads
inside traced calls (``sampler``), which threads those are (``active``), each reader's samples in
the making (``readings``), its pacing to hold its cost near 1 % (``pacing``), and the two C helpers
it stands on: the main thread sampling itself where it is (``_main_ticks.c``) and the sampler
thread taking its turn at the GIL (``_gil_turn.c``), both waiting as ``_waits.h`` says.

More in docs/architecture.md, "tracer/_sampling/__init__.py".
"""
