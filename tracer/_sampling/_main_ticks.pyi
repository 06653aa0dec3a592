"""Type stub of tracer/_sampling/_main_ticks.c: the main thread samples itself when the sampler
asks."""

from collections.abc import Callable
from types import FrameType
from typing import final

@final
class Ticks:
    """A sampler's requests to the main thread to call ``callback(frame, skipped)``: ``frame``
    is where the main thread was, ``skipped`` the ticks that fell while it could not answer."""

    def __init__(self, callback: Callable[[FrameType, int], object]) -> None: ...
    def start(self, interval_ns: int, /) -> None: ...
    def stop(self) -> None: ...
    interval_ns: int
    @property
    def requests(self) -> int: ...
    @property
    def asked_ns(self) -> int:
        """When the latest request was queued (``time.perf_counter_ns``'s clock): while the
        callback runs, when the main thread was asked where it is, which a thread blocked in a
        call answers when the call returns."""
