"""Late records per table: counts by reason, and a warning when the late-record rate jumps.

A ``LateCounter`` belongs to one windowed table (or windowed join) of an app. The table's
driver tells it of every record it processes (``seen``) and of every record it sets aside
(``late``); ``/status`` and ``/metrics`` read it. Plain code: the clock and the settings the
warning names are read through callables the owning table gives (``watch``).

**When the rate "jumps".** Records are taken in intervals of ``INTERVAL_RECORDS`` (1000)
records processed by the table in this worker (all its partitions). At the end of an interval
its *late fraction* is the records that came after their window closed (reason
``window-closed``; for hopping windows also ``window-closed-partly``, a record some of whose
windows had closed) over the records of the interval; the fraction *before* it is the same over every earlier
interval since the worker started. The rate jumps when the interval's fraction is above
``JUMP_FRACTION`` (1%) **and** above ``JUMP_FACTOR`` (2) times the fraction before. 1000
records make a 1% threshold mean more than 10 late records, not a few stragglers, and are
few enough that a catch-up of some thousand records is seen while it happens; comparing with
the history keeps a table whose input was always somewhat disordered from warning on every
interval, while a steady late rate from the start still warns once (the history is empty).
Other reasons (a negative timestamp, a join record without key or value) are counted and
shown but do not drive the warning: their cause is the data, not its timing. A late record is *behind stream time* by stream
time (as it came) minus its timestamp: a grace at least that large would have kept it.

**The warning** is logged (``streamkit.windows.lateness``, WARNING) at most once per
``WARN_EVERY_MS`` (a minute, on the worker's monotonic clock) per table; a jump within the
minute after one is not logged (``/status`` still shows its interval). It names the table, the
interval's late fraction and count, how far behind stream time its late records were (the
median and the largest ``stream time - timestamp`` of those records, stream time being the one
they came at), the table's grace, and the likely cause (``likely_cause``).

>>> counter = LateCounter()
>>> for i in range(1000):
...     if i % 50 == 0:
...         counter.late("window-closed", ts_ms=0, stream_time_ms=7_000)
...     counter.seen()
>>> counter.interval.late, counter.interval.fraction, counter.interval.max_behind_ms
(20, 0.02, 7000)
>>> counter.warnings
1
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamkit._core.clock import SYSTEM_CLOCK, Clock

logger = logging.getLogger(__name__)

INTERVAL_RECORDS = 1000
JUMP_FRACTION = 0.01
JUMP_FACTOR = 2.0
WARN_EVERY_MS = 60_000
TIMING_REASON = "window-closed"  # the record came after its windows closed: set aside
PARTLY_LATE = "window-closed-partly"  # hopping: after some of its windows closed, in the others
TIMING_REASONS = frozenset((TIMING_REASON, PARTLY_LATE))


@dataclass(frozen=True)
class LateInterval:
    """One interval of records processed by a table: how many, how many were late (for a
    closed window), and how far behind stream time those were."""

    records: int
    late: int
    before_fraction: float  # the late fraction of all earlier intervals (0.0: none yet)
    median_behind_ms: int  # of the late records' stream time - timestamp; 0 with none late
    max_behind_ms: int

    @property
    def fraction(self) -> float:
        return self.late / self.records if self.records else 0.0

    def jumped(self, min_fraction: float = JUMP_FRACTION, factor: float = JUMP_FACTOR) -> bool:
        """Whether the late rate jumped in this interval (see the module docstring).

        >>> LateInterval(1000, 20, 0.0, 1, 1).jumped(), LateInterval(1000, 20, 0.01, 1, 1).jumped()
        (True, False)
        >>> LateInterval(1000, 10, 0.0, 1, 1).jumped()  # 1% is not above 1%
        False
        """
        fraction = self.fraction
        return fraction > min_fraction and fraction > factor * self.before_fraction


def _seconds(ms: int | None) -> str:
    return "None" if ms is None else f"{ms / 1000:g} s"


def likely_cause(interval: LateInterval, grace_ms: int, drift_ms: int | None, repartitioned: bool) -> str:
    """The likely cause of a jump, and what to change.

    Tasks running ahead of each other: alignment is off (``max_task_drift_ms`` None) and the
    table is fed through a repartition topic (its records come from several upstream tasks,
    each at its own event time), or the drift allowed is larger than the grace. Otherwise the
    input itself is more out of order than the grace allows.

    >>> i = LateInterval(1000, 30, 0.0, 4_000, 9_500)
    >>> likely_cause(i, 2_000, None, True)[:62]
    'tasks run ahead of each other (max_task_drift_ms=None): set ma'
    >>> print(likely_cause(i, 2_000, 0, True))
    the input's disorder exceeds the grace (records up to 9.5 s behind stream time, grace 2 s): a grace of at least 9.5 s keeps such records
    """
    if (drift_ms is None and repartitioned) or (drift_ms is not None and drift_ms > grace_ms):
        return (
            f"tasks run ahead of each other (max_task_drift_ms={drift_ms}): set max_task_drift_ms "
            f"to at most the grace ({grace_ms}) so that no task feeding the table runs further "
            f"ahead in event time than the grace allows"
        )
    return (
        f"the input's disorder exceeds the grace (records up to {_seconds(interval.max_behind_ms)} behind "
        f"stream time, grace {_seconds(grace_ms)}): a grace of at least {_seconds(interval.max_behind_ms)} "
        f"keeps such records"
    )


def warning_text(name: str, interval: LateInterval, grace_ms: int, cause: str) -> str:
    """The one-line warning of a jump of table ``name``'s late rate."""
    return (
        f"table {name!r}: {interval.fraction:.1%} of its last {interval.records} records were late "
        f"({interval.late} records, {interval.before_fraction:.1%} before), "
        f"{_seconds(interval.median_behind_ms)} (median) and {_seconds(interval.max_behind_ms)} (max) "
        f"behind stream time, grace {_seconds(grace_ms)}. Likely cause: {cause}"
    )


class LateCounter:
    """How many records of one table (or join) were late, by reason, since the worker started,
    and the late rate over intervals of records (see the module docstring).

    >>> late = LateCounter()
    >>> late.add("window-closed"); late.add("window-closed"); late.total, late.by_reason
    (2, {'window-closed': 2})
    """

    __slots__ = (
        "_before_late",
        "_before_records",
        "_behind",
        "_clock",
        "_drift_ms",
        "_interval_late",
        "_interval_seen",
        "_last_warning_mono_ms",
        "by_reason",
        "grace_ms",
        "interval",
        "interval_records",
        "last_warning",
        "last_warning_ms",
        "name",
        "records",
        "sources",
        "warnings",
    )

    def __init__(self, name: str = "", *, interval_records: int = INTERVAL_RECORDS) -> None:
        self.by_reason: dict[str, int] = {}
        self.name = name
        self.interval_records = interval_records
        self.records = 0  # processed by the table (late or not), completed intervals and this one
        self.grace_ms = 0
        self.sources: set[str] = set()  # the topics the table's records came from
        self._clock: Callable[[], Clock] = lambda: SYSTEM_CLOCK
        self._drift_ms: Callable[[], int | None] = lambda: 0
        self._interval_seen = 0
        self._interval_late = 0
        self._behind: list[int] = []
        self._before_records = 0
        self._before_late = 0
        self.interval: LateInterval | None = None  # the last completed interval
        self.warnings = 0  # warnings logged
        self.last_warning: str | None = None
        self.last_warning_ms: int | None = None  # wall-clock time of the last warning
        self._last_warning_mono_ms: int | None = None

    def watch(
        self, *, grace_ms: int, clock: Callable[[], Clock], drift_ms: Callable[[], int | None],
        sources: tuple[str, ...] = (),
    ) -> None:
        """Set what the warning names: the table's grace, its clock (read when an interval
        ends), the worker's ``max_task_drift_ms`` and topics known to feed the table."""
        self.grace_ms = grace_ms
        self._clock = clock
        self._drift_ms = drift_ms
        self.sources.update(sources)

    def add(self, reason: str, n: int = 1) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + n

    def late(self, reason: str, ts_ms: int, stream_time_ms: int) -> None:
        """A record set aside; call ``seen`` for it too (after this)."""
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        if reason in TIMING_REASONS:
            self._interval_late += 1
            self._behind.append(stream_time_ms - ts_ms)

    def seen(self) -> None:
        """A record processed by the table (late or not)."""
        self.records += 1
        self._interval_seen += 1
        if self._interval_seen >= self.interval_records:
            self._end_interval()

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    @property
    def repartitioned(self) -> bool:
        """Whether the table is fed through a repartition topic (``...-repartition``)."""
        return any(name.endswith("-repartition") for name in self.sources)

    def _end_interval(self) -> None:
        behind = sorted(self._behind)
        before = self._before_late / self._before_records if self._before_records else 0.0
        interval = LateInterval(
            self._interval_seen, self._interval_late, before,
            behind[(len(behind) - 1) // 2] if behind else 0, behind[-1] if behind else 0,
        )
        self.interval = interval
        self._before_records += self._interval_seen
        self._before_late += self._interval_late
        self._interval_seen = self._interval_late = 0
        self._behind = []
        if interval.jumped():
            self._warn(interval)

    def _warn(self, interval: LateInterval) -> None:
        clock = self._clock()
        now = clock.monotonic_ms()
        if self._last_warning_mono_ms is not None and now - self._last_warning_mono_ms < WARN_EVERY_MS:
            return
        cause = likely_cause(interval, self.grace_ms, self._drift_ms(), self.repartitioned)
        text = warning_text(self.name, interval, self.grace_ms, cause)
        self._last_warning_mono_ms = now
        self.last_warning = text
        self.last_warning_ms = clock.now_ms()
        self.warnings += 1
        logger.warning("%s", text)

    def rate(self) -> dict[str, Any]:
        """The late rate as ``/status`` shows it."""
        interval = self.interval
        return {
            "records": self.records,
            "interval_records": interval.records if interval else 0,
            "interval_late": interval.late if interval else 0,
            "interval_fraction": interval.fraction if interval else 0.0,
            "before_fraction": interval.before_fraction if interval else 0.0,
            "interval_median_behind_ms": interval.median_behind_ms if interval else 0,
            "interval_max_behind_ms": interval.max_behind_ms if interval else 0,
            "grace_ms": self.grace_ms,
            "warnings": self.warnings,
            "last_warning": self.last_warning,
            "last_warning_ms": self.last_warning_ms,
        }

    def __repr__(self) -> str:
        return f"LateCounter({self.by_reason})"
