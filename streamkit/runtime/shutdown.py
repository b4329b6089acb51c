"""``StopDeadline``: the one deadline of a worker's stop (``shutdown_timeout``).

A stop waits for the log several times: the revocation commit (offsets, or each task's
transaction), leaving the group, flushing and closing the producers. A log that does not
answer (a broker killed, or hung: it accepts connections and answers nothing) would hold each
wait for the client's own timeouts and retries, which for aiokafka's group commit and
transactions have no end. So each wait of the stop runs as a task until the deadline; one still
waiting then is cancelled, and a transport's close, cancelled, closes without another word to
the log (``transport/kafka.py``). Later waits find the deadline passed and are cancelled
at once. What was given up is said once, at the end, in one line::

    stop: gave up committing offsets of 4 partitions, leaving the group after 30.0 s: kafka://host:9092 did not answer

Only a remote log is bounded so: the embedded log's waits are local work (fsync, RocksDB)
that a cancellation would cut in the middle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

logger = logging.getLogger(__name__)
# A wait cancelled at the deadline ends its business without the log (cancelling tasks,
# closing sockets), which takes a loop turn or two. One still running this long after is
# waiting for the log again (a ``finally`` closing something gracefully): it is cancelled
# again, up to ABANDON_ROUNDS times, then left behind.
ABANDON_ROUND_S = 0.25
ABANDON_ROUNDS = 8
# Past the deadline a wait still gets this long before it is cancelled: closing a client with
# nothing left to say takes a loop turn or two, and is not something given up.
LATE_GRACE_S = 0.25


class StopDeadline:
    def __init__(self, timeout_s: float, url: str, *, bounded: bool = True) -> None:
        self.timeout_s = timeout_s
        self.url = url
        self.bounded = bounded
        self._loop = asyncio.get_running_loop()
        self._ends_at = self._loop.time() + timeout_s
        self.given_up: list[str] = []

    @property
    def remaining_s(self) -> float:
        return max(0.0, self._ends_at - self._loop.time())

    async def run(self, what: str, coro: Coroutine[Any, Any, Any]) -> None:
        """Await ``coro`` until the deadline; past it, cancel it and note ``what`` (say,
        "committing offsets of 4 partitions") as given up. Its exception, if it raised one
        before, is raised here."""
        if not self.bounded:
            await coro
            return
        task = asyncio.ensure_future(coro)
        try:
            await asyncio.wait([task], timeout=max(self.remaining_s, LATE_GRACE_S))
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.done():
            self.given_up.append(what)
            for _ in range(ABANDON_ROUNDS):
                task.cancel()
                await asyncio.wait([task], timeout=ABANDON_ROUND_S)
                if task.done():
                    break
            else:
                logger.debug("stop: %s did not end when cancelled; left behind", what)
                return
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            raise exc

    def report(self) -> None:
        """The one line saying what the stop gave up, if anything."""
        if self.given_up:
            logger.warning(
                "stop: gave up %s after %.1f s: %s did not answer",
                ", ".join(self.given_up), self.timeout_s, self.url,
            )
