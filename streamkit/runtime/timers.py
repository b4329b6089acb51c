"""Timers (``@app.timer``) and cron jobs (``@app.crontab``) of a running worker.

Due times follow the worker's ``Clock``: with the system clock a loop sleeps until the next
timer or cron job is due; with a ``ManualClock`` (``streamkit.testing``) nothing fires until
the test advances the clock and calls ``run_due``. A timer's due time is monotonic; a cron
job's is wall-clock (``Clock.now_ms``), the next instant its schedule names. A timer or cron
job that raises is logged and runs again when next due: one bad tick does not stop the worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from streamkit._core.clock import Clock
from streamkit.app.application import CronJob, Timer
from streamkit.app.crontab import CronSchedule

logger = logging.getLogger(__name__)


class TimerRunner:
    def __init__(
        self,
        timers: list[Timer],
        clock: Clock,
        *,
        app: object = None,
        is_leader: Callable[[], bool] = lambda: True,
        crontabs: list[tuple[CronJob, CronSchedule]] | None = None,
    ) -> None:
        self._timers = timers
        self._clock = clock
        self._app = app
        self._is_leader = is_leader
        start = clock.monotonic_ms()
        self._due = [start + t.interval_ms for t in timers]
        self._crontabs = crontabs or []
        now = clock.now_ms()
        self._cron_due = [schedule.next_ms(now) for _, schedule in self._crontabs]

    async def run_due(self) -> int:
        """Run every timer whose time has come; returns how many ran."""
        now = self._clock.monotonic_ms()
        ran = 0
        for i, timer in enumerate(self._timers):
            if self._due[i] <= now:
                # Skip missed ticks rather than firing a burst to catch up.
                missed = (now - self._due[i]) // timer.interval_ms
                self._due[i] += (missed + 1) * timer.interval_ms
                if timer.on_leader and not self._is_leader():
                    continue
                ran += 1
                try:
                    await (timer.fn(self._app) if timer.takes_app else timer.fn())
                except Exception:
                    logger.exception("timer %s failed", timer.name)
        wall = self._clock.now_ms()
        for i, (job, schedule) in enumerate(self._crontabs):
            if self._cron_due[i] <= wall:
                # The next time after now: times missed while the worker was busy are skipped.
                self._cron_due[i] = schedule.next_ms(wall)
                if job.on_leader and not self._is_leader():
                    continue
                ran += 1
                try:
                    await (job.fn(self._app) if job.takes_app else job.fn())
                except Exception:
                    logger.exception("cron job %s failed", job.name)
        return ran

    def next_wait_ms(self) -> int | None:
        """Milliseconds until the next timer or cron job is due (None when there are none)."""
        waits = [due - self._clock.monotonic_ms() for due in self._due]
        waits += [due - self._clock.now_ms() for due in self._cron_due]
        return min(waits) if waits else None

    async def run_forever(self) -> None:
        while True:
            wait_ms = self.next_wait_ms()
            if wait_ms is None:
                return
            if wait_ms > 0:
                await asyncio.sleep(wait_ms / 1000)
            await self.run_due()
