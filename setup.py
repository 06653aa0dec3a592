"""Only the C accelerator is configured here; everything else is in pyproject.toml.

``optional``: when the extension cannot be built (no C compiler, no Python headers), the
install still succeeds, and ``tracer/_core/accel.py`` selects the pure-Python hot path. It is built
on Linux only, where its clock, ``CLOCK_MONOTONIC``, is the one ``time.perf_counter_ns`` reads (the
timestamps of both paths must share a clock).
"""

import os
import sys

from setuptools import Extension, setup

#: ``INVOSEQ_REQUIRE_C=1`` (CI, and a developer changing the C): a part that does not compile
#: fails the install with the compiler's message. Otherwise a failed part is left out with one
#: warning that ``pip -q`` hides, and an editable tree keeps running the extension built before.
OPTIONAL = os.environ.get("INVOSEQ_REQUIRE_C") != "1"

speedups = Extension(
    "tracer._core._speedups",
    sources=["tracer/_core/_speedups.c"],
    # Its parts, included by _speedups.c in order (one translation unit).
    depends=[
        "tracer/_core/_clock.h",
        *(
            f"tracer/_core/_speedups_{part}.h"
            for part in (
                "pool",
                "records",
                "encoded",
                "events",
                "sources",
                "parents",
                "begin",
                "wrapper",
                "functions",
                "table",
                "strands",
                "strand_ends",
                "handlers",
                "stacks",
                "send",
            )
        ),
    ],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    optional=OPTIONAL,
)

#: The main thread samples itself when the sampler asks (``tracer/_sampling/sampler.py``). Linux:
#: pthreads.
main_ticks = Extension(
    "tracer._sampling._main_ticks",
    sources=["tracer/_sampling/_main_ticks.c"],
    depends=["tracer/_sampling/_waits.h"],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    libraries=["m"],
    optional=OPTIONAL,
)

#: The sampler thread takes its turn at the GIL when its tick is due
#: (``tracer/_sampling/sampler.py``): CPython's internal headers, so built per Python version like
#: the others.
gil_turn = Extension(
    "tracer._sampling._gil_turn",
    sources=["tracer/_sampling/_gil_turn.c"],
    depends=["tracer/_sampling/_waits.h"],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    optional=OPTIONAL,
)

#: The repository's read path, a sequence's invocations as column arrays (``cmr/store/columns.py``
#: falls back to ``cmr/store/stored_batches.py`` without it), and ingest's index pass over a batch
#: (``cmr/store/batch_index.py`` falls back to Python). Portable C; built wherever a compiler is.
columns = Extension(
    "cmr.store._columns",
    sources=["cmr/store/_columns.c", "cmr/store/_pack.c"],
    depends=[
        "cmr/store/_arrays.h",
        "cmr/store/_iids.h",
        "cmr/store/_msgpack.h",
        "cmr/store/_pack.h",
        "cmr/store/_pack_results.h",
        "cmr/store/_pack_singles.h",
        *(f"cmr/store/_columns_{part}.h" for part in ("gather", "tree", "sums", "shapes")),
    ],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    optional=OPTIONAL,
)

#: SIGTERM wakes the tracer's watchdog through a pipe of its own (``tracer/_signals.py``), not
#: the process's signal wakeup fd. POSIX; without it the Python-level handler acts alone.
sigterm = Extension(
    "tracer._sigterm",
    sources=["tracer/_sigterm.c"],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    optional=OPTIONAL,
)

#: The local namespace ``tracer run`` runs a traced script's module code in
#: (``tracer/run/autowrap.py`` falls back to its Python class without it). Portable C.
namespace = Extension(
    "tracer.run._namespace",
    sources=["tracer/run/_namespace.c"],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    optional=OPTIONAL,
)

linux_only = [speedups, main_ticks, gil_turn, sigterm] if sys.platform.startswith("linux") else []
setup(ext_modules=[*linux_only, columns, namespace])
