"""Type stub of tracer/_sampling/_gil_turn.c: the sampler thread takes its turn at the GIL when its
tick is due, rather than wait for a holder that gives it up only for moments."""

from typing import final

@final
class Turn:
    """The sampler thread's wait for its next tick."""

    def wait(self, timeout_ns: int, /) -> bool:
        """Wait without the GIL until ``timeout_ns`` passed or ``stop()`` was called, then take
        the GIL at once (its holder drops it at its next check); True when stopped."""

    def stop(self) -> None:
        """Wake ``wait()`` now; every later ``wait()`` returns True at once."""
