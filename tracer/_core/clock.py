"""The tracer's clock: nanoseconds on ``CLOCK_MONOTONIC``'s scale (``time.perf_counter_ns``).

More in docs/architecture.md, "C accelerator".
"""

from __future__ import annotations

import os
import time

from tracer._core import accel

TYPE_CHECKING = False  # typing's, without loading typing (mypy reads it as True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

#: Set to ``monotonic`` to read ``clock_gettime`` on every event, never the TSC.
ENV_CLOCK: Final = "INVOSEQ_CLOCK"
CLOCKSOURCE: Final = "/sys/devices/system/clocksource/clocksource0/current_clocksource"


def tsc_allowed() -> bool:
    """Whether the kernel itself reads the TSC for CLOCK_MONOTONIC (and the setting allows it)."""
    setting = os.environ.get(ENV_CLOCK, "").strip().lower()
    if setting not in ("", "tsc", "monotonic"):
        import logging

        logging.getLogger("tracer").warning(
            "invoseq: %s=%r is not 'monotonic' or 'tsc': the default (tsc where the kernel's "
            "clocksource is the TSC)",
            ENV_CLOCK,
            setting,
        )
    if setting == "monotonic" or os.uname().machine != "x86_64":
        return False
    try:
        with open(CLOCKSOURCE, "rb") as source:  # bytes: no codec to load
            return source.read().strip() == b"tsc"
    except OSError:
        return False


def _choose() -> Callable[[], int]:
    speedups = accel.speedups
    if speedups is None:
        return time.perf_counter_ns
    speedups.use_tsc(tsc_allowed())
    clock: Callable[[], int] = speedups.clock
    return clock


#: The clock every event is stamped with (``tracer._core.decorator.now`` while no test replaces
#: the decorator's source).
now: Final = _choose()
