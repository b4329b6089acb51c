"""Window declarations: ``Tumbling``, ``Hopping``, ``Sliding`` and ``Session``; plain code.

A spec is a frozen value. Durations are given in seconds (``int``/``float``) or as a
``timedelta`` at construction and stored as integer milliseconds (``size_ms``, ``grace_ms``,
...). Each spec knows, as pure functions of timestamps and stream time (no clock, no I/O):

* which windows a record belongs to (time windows) or how it changes the windows of its key
  (``streamkit.windows.session`` and ``streamkit.windows.sliding`` hold those algorithms);
* ``close_bound(stream_time)``: a window is *closed* (final, emitted by ``emit="close"``, never
  updated again) when its end is below this bound;
* ``expire_bound(stream_time)`` and ``expired(end, stream_time)``: a stored window whose end is
  below this bound can be deleted, because no record that is not late can read or change it;
  ``retention_ms`` is the same horizon counted from the window's start, as Kafka Streams counts
  its window store retention.

The rules are Kafka Streams 4.4's (the reference, with its windows emitted on close by
``suppress(untilWindowCloses)``), with no deliberate difference: a session is closed when the
session store's retention hides it (``session.py``), and a sliding window is copied and
updated as ``KStreamSlidingWindowAggregate`` does (``sliding.py``).

============  ==================  ===========================  ==============================
spec          window              closed (emitted) when        retention (from start)
                                  (st = stream time)
============  ==================  ===========================  ==============================
Tumbling      ``[start, end)``    ``st >= end + grace``        ``size + grace``
Hopping       ``[start, end)``    ``st >= end + grace``        ``size + grace``
Sliding       ``[start, end]``    ``st >= end + grace`` (takes ``2 * max_difference + grace``
                                  records until
                                  ``st > end + grace``)
Session       ``[first, last]``   ``st >= end + gap + grace``  (by end) ``gap + grace``
============  ==================  ===========================  ==============================

Time windows are aligned to the epoch and never start before it (as Kafka Streams'
``TimeWindows.windowsFor``). Timestamps are non-negative milliseconds; a negative one belongs to
no window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from streamkit._core.errors import ConfigError

Duration = int | float | timedelta
Window = tuple[int, int]  # (start_ms, end_ms)

_MAX_MS = 2**62  # far beyond any real timestamp; keeps start/end arithmetic inside int64


def duration_ms(value: Duration, what: str) -> int:
    """``value`` (seconds, or a ``timedelta``) as integer milliseconds, rounded to the nearest ms.

    >>> duration_ms(1.5, "size"), duration_ms(timedelta(minutes=1), "size")
    (1500, 60000)
    """
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = value * 1000
    else:
        raise ConfigError(
            f"{what} must be seconds (int or float) or a timedelta, not {value!r}"
        )
    if not math.isfinite(ms):
        raise ConfigError(f"{what} must be a finite duration, not {value!r}")
    if abs(ms) > _MAX_MS:
        raise ConfigError(f"{what} is too large: {value!r} (at most {_MAX_MS // 1000} s)")
    return round(ms)


def _positive(value: Duration, what: str) -> int:
    ms = duration_ms(value, what)
    if ms <= 0:
        raise ConfigError(f"{what} must be at least 1 ms, not {value!r}")
    return ms


def _non_negative(value: Duration, what: str) -> int:
    ms = duration_ms(value, what)
    if ms < 0:
        raise ConfigError(f"{what} must not be negative, not {value!r}")
    return ms


@dataclass(frozen=True, init=False)
class Hopping:
    """Windows of ``size`` seconds starting every ``step`` seconds: ``[k*step, k*step + size)``.

    A record at ``ts`` belongs to every window with ``start <= ts < start + size`` and
    ``start >= 0``.

    >>> Hopping(10, 5).windows_for(12_000)
    [(5000, 15000), (10000, 20000)]
    """

    size_ms: int
    step_ms: int
    grace_ms: int

    def __init__(self, size: Duration, step: Duration, grace: Duration = 0) -> None:
        size_ms = _positive(size, "window size")
        step_ms = _positive(step, "window step")
        if step_ms > size_ms:
            raise ConfigError(
                f"window step ({step_ms} ms) must not be larger than the window size "
                f"({size_ms} ms)"
            )
        object.__setattr__(self, "size_ms", size_ms)
        object.__setattr__(self, "step_ms", step_ms)
        object.__setattr__(self, "grace_ms", _non_negative(grace, "grace"))

    def windows_for(self, ts_ms: int) -> list[Window]:
        """The windows ``[start, end)`` holding a record at ``ts_ms``, by start."""
        if ts_ms < 0:
            return []
        first = max(0, ts_ms - self.size_ms + self.step_ms) // self.step_ms * self.step_ms
        return [(s, s + self.size_ms) for s in range(first, ts_ms + 1, self.step_ms)]

    @property
    def retention_ms(self) -> int:
        return self.size_ms + self.grace_ms

    def close_bound(self, stream_time_ms: int) -> int:
        """Windows with ``end < close_bound`` are closed (``stream time >= end + grace``)."""
        return stream_time_ms - self.grace_ms + 1

    def closed(self, end_ms: int, stream_time_ms: int) -> bool:
        return end_ms < self.close_bound(stream_time_ms)

    def expire_bound(self, stream_time_ms: int) -> int:
        # Nothing reads a closed time window, so it may go as soon as it closes.
        return self.close_bound(stream_time_ms)

    def expired(self, end_ms: int, stream_time_ms: int) -> bool:
        return end_ms < self.expire_bound(stream_time_ms)


@dataclass(frozen=True, init=False)
class Tumbling(Hopping):
    """Back-to-back windows of ``size`` seconds: a hopping window whose step is its size.

    >>> Tumbling(60, grace=10).windows_for(61_000), Tumbling(60).size_ms
    ([(60000, 120000)], 60000)
    """

    def __init__(self, size: Duration, grace: Duration = 0) -> None:
        size_ms = _positive(size, "window size")
        object.__setattr__(self, "size_ms", size_ms)
        object.__setattr__(self, "step_ms", size_ms)
        object.__setattr__(self, "grace_ms", _non_negative(grace, "grace"))

    def __repr__(self) -> str:
        return f"Tumbling(size_ms={self.size_ms}, grace_ms={self.grace_ms})"


@dataclass(frozen=True, init=False)
class Sliding:
    """Kafka Streams' ``SlidingWindows``: windows ``[start, start + max_difference]``, both
    ends inclusive, that exist where records are: for each record at ``t``, its left window
    ``[t - d, t]`` (``[0, d]`` when ``t < d``, as Kafka Streams folds early records), and its
    right window ``[t + 1, t + 1 + d]`` when a later record falls in it. Two records are in a
    common window exactly when their timestamps differ by at most ``d``.

    >>> Sliding(5).max_difference_ms, Sliding(5).window_for_start(1000)
    (5000, (1000, 6000))
    """

    max_difference_ms: int
    grace_ms: int

    def __init__(self, max_difference: Duration, grace: Duration = 0) -> None:
        object.__setattr__(
            self, "max_difference_ms", _non_negative(max_difference, "max_difference")
        )
        object.__setattr__(self, "grace_ms", _non_negative(grace, "grace"))

    def window_for_start(self, start_ms: int) -> Window:
        return (start_ms, start_ms + self.max_difference_ms)

    def left_window(self, ts_ms: int) -> Window:
        """The window ending at ``ts_ms`` (or ``[0, d]`` for a record earlier than ``d``)."""
        return self.window_for_start(max(0, ts_ms - self.max_difference_ms))

    @property
    def retention_ms(self) -> int:
        return 2 * self.max_difference_ms + self.grace_ms

    def close_bound(self, stream_time_ms: int) -> int:
        """Windows with ``end < close_bound`` are closed and emitted (``stream time >= end +
        grace``, as Kafka Streams' ``suppress(untilWindowCloses)``); ``accepts`` tells which
        still take records."""
        return stream_time_ms - self.grace_ms + 1

    def closed(self, end_ms: int, stream_time_ms: int) -> bool:
        return end_ms < self.close_bound(stream_time_ms)

    def accepts(self, end_ms: int, stream_time_ms: int) -> bool:
        """Whether a window still takes records: ``end >= stream time - grace``
        (``KStreamSlidingWindowAggregate.updateWindowAndForward``), so a window ending exactly
        at ``stream time - grace`` is emitted on close and may still change (and be emitted
        again)."""
        return end_ms >= stream_time_ms - self.grace_ms

    def expire_bound(self, stream_time_ms: int) -> int:
        # The window store's retention (2d + grace from the start) counted from the largest
        # window start written, which the aggregator passes as the time here: a window that
        # started up to that far back may still be copied into a new record's windows.
        return stream_time_ms - self.grace_ms - self.max_difference_ms + 1

    def expired(self, end_ms: int, stream_time_ms: int) -> bool:
        return end_ms < self.expire_bound(stream_time_ms)


@dataclass(frozen=True, init=False)
class Session:
    """Sessions of activity: a session runs from its first to its last record, and a record
    within ``gap`` of a session joins it (merging the sessions it bridges).

    >>> Session(30, grace=5).gap_ms, Session(30, grace=5).closed(1000, 36_000)
    (30000, True)
    """

    gap_ms: int
    grace_ms: int

    def __init__(self, gap: Duration, grace: Duration = 0) -> None:
        object.__setattr__(self, "gap_ms", _positive(gap, "session gap"))
        object.__setattr__(self, "grace_ms", _non_negative(grace, "grace"))

    @property
    def retention_ms(self) -> int:
        """How long after its end a session is kept: ``gap + grace``, as Kafka Streams."""
        return self.gap_ms + self.grace_ms

    def close_bound(self, stream_time_ms: int) -> int:
        """Sessions with ``end < close_bound`` are closed (``stream time >= end + gap +
        grace``): emitted on close (``suppress(untilWindowCloses)``, whose grace for sessions
        is gap + grace) and past the session store's retention (gap + grace from the end,
        ``AbstractRocksDBSegmentedBytesStore.getActualFrom``), so never merged again."""
        return stream_time_ms - self.gap_ms - self.grace_ms + 1

    def closed(self, end_ms: int, stream_time_ms: int) -> bool:
        return end_ms < self.close_bound(stream_time_ms)

    def expire_bound(self, stream_time_ms: int) -> int:
        # A closed session is final and never merged again (session.py), so it may go as soon
        # as it closes.
        return self.close_bound(stream_time_ms)

    def expired(self, end_ms: int, stream_time_ms: int) -> bool:
        return end_ms < self.expire_bound(stream_time_ms)


WindowSpec = Hopping | Sliding | Session
