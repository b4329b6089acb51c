"""Clocks. Time in streamkit is integer milliseconds since the epoch (Kafka timestamps).

Plain code takes a ``Clock`` instead of calling ``time.time()`` so tests can drive time by hand.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch."""
        ...

    def monotonic_ms(self) -> int:
        """A monotonic time in milliseconds, for intervals."""
        ...


class SystemClock:
    """The machine's clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to.

    >>> clock = ManualClock(1_000)
    >>> clock.advance(500)
    >>> clock.now_ms()
    1500
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        if delta_ms < 0:
            raise ValueError("a clock does not go backwards")
        self._now_ms += delta_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = now_ms


SYSTEM_CLOCK: Clock = SystemClock()
