"""Cron schedules (``@app.crontab``, ``@Service.crontab``): the one module that uses croniter.

    >>> from datetime import datetime, timezone
    >>> schedule = CronSchedule("*/15 * * * *")
    >>> start = int(datetime(2026, 1, 1, 12, 7, 30, tzinfo=timezone.utc).timestamp() * 1000)
    >>> schedule.ms_until_next(start) // 1000
    450

A schedule is checked when it is declared (a bad cron line is a ``ConfigError`` naming it) and
answers one question: how long from a wall-clock instant (epoch milliseconds) until it next
fires. Times are read in ``timezone`` (a ``tzinfo``; UTC when None), so ``"30 18 * * *"`` with
a Pacific zone fires at 18:30 Pacific, daylight saving included.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo

from croniter import croniter

from streamkit._core.errors import ConfigError


class CronSchedule:
    def __init__(self, cron_format: str, timezone: tzinfo | None = None) -> None:
        if not isinstance(cron_format, str) or not croniter.is_valid(cron_format):
            raise ConfigError(
                f"{cron_format!r} is not a cron schedule (five fields: minute hour day-of-month "
                "month day-of-week, e.g. '*/5 * * * *')"
            )
        if timezone is not None and not isinstance(timezone, tzinfo):
            raise ConfigError(f"a crontab's timezone must be a tzinfo (e.g. zoneinfo.ZoneInfo), not {timezone!r}")
        self.cron_format = cron_format
        self.timezone = timezone

    def __repr__(self) -> str:
        return f"CronSchedule({self.cron_format!r}, timezone={self.timezone!r})"

    def next_ms(self, now_ms: int) -> int:
        """The first instant strictly after ``now_ms`` at which the schedule fires (epoch ms)."""
        start = datetime.fromtimestamp(now_ms / 1000, tz=self.timezone or UTC)
        following: datetime = croniter(self.cron_format, start).get_next(datetime)
        return int(following.timestamp() * 1000)

    def ms_until_next(self, now_ms: int) -> int:
        return self.next_ms(now_ms) - now_ms
