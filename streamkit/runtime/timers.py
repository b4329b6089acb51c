"""Timers (``@app.timer``) and start-up tasks (``@app.task``) of a running worker.

Due times follow the worker's ``Clock``: with the system clock a loop sleeps until the next
timer is due; with a ``ManualClock`` (``streamkit.testing``) nothing fires until the test
advances the clock and calls ``run_due``. A timer that raises is logged and runs again at its
next interval: one bad tick does not stop the worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from streamkit._core.clock import Clock
from streamkit.app import Timer

logger = logging.getLogger(__name__)


class TimerRunner:
    def __init__(
        self, timers: list[Timer], clock: Clock, *, app: object = None, is_leader: Callable[[], bool] = lambda: True
    ) -> None:
        self._timers = timers
        self._clock = clock
        self._app = app
        self._is_leader = is_leader
        start = clock.monotonic_ms()
        self._due = [start + t.interval_ms for t in timers]

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
        return ran

    async def run_forever(self) -> None:
        if not self._timers:
            return
        while True:
            wait_ms = min(self._due) - self._clock.monotonic_ms()
            if wait_ms > 0:
                await asyncio.sleep(wait_ms / 1000)
            await self.run_due()
