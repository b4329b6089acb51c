"""Deleting what the app has read from its repartition topics (Kafka Streams' purge).

A repartition topic is the app's own hop between two of its stages (``Topic.repartition``):
once the reading task has committed past a record, nothing needs it again (a task taken over
or redone starts at its committed offset). So repartition topics keep records without a time
limit (their timestamps are the re-keyed records', which may be old: a time retention would
delete history before it was read), and the worker deletes up to the committed offsets, at most
every ``repartition_purge_interval`` seconds (Kafka Streams' ``repartition.purge.interval.ms``,
``TaskManager.maybePurgeCommittedRecords``) with Kafka's DeleteRecords, in the background: a
commit never waits for it, and a failed purge is tried again at the next interval.

    >>> from streamkit._core.types import TopicPartition
    >>> purged = []
    >>> class Log:
    ...     async def delete_records(self, offsets): purged.append(dict(offsets))
    >>> now = [100.0]
    >>> async def main():
    ...     purger = Purger(Log(), lambda: {"app-p-by-repartition"}, interval_s=30.0, clock=lambda: now[0])
    ...     committed = {TopicPartition("app-p-by-repartition", 0): 7, TopicPartition("input", 0): 9}
    ...     purger.after_commit(committed)  # too soon: the first purge comes an interval after the start
    ...     now[0] += 30.0
    ...     purger.after_commit(committed)
    ...     await purger.aclose()
    >>> import asyncio; asyncio.run(main()); purged
    [{TopicPartition(topic='app-p-by-repartition', partition=0): 7}]
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from streamkit._core.types import TopicPartition
from streamkit.transport.base import TransportError

logger = logging.getLogger(__name__)
CLOSE_WAIT_S = 3.0


class RecordDeleter(Protocol):
    async def delete_records(self, offsets: Mapping[TopicPartition, int]) -> None: ...


class Purger:
    def __init__(
        self,
        log: RecordDeleter,
        topics: Callable[[], Collection[str]],
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._topics = topics  # the app's repartition topics (hops are declared as the topology is built)
        self._interval_s = interval_s
        self._clock = clock
        self._last = clock()  # when the last purge began (the first comes an interval after the start)
        self._purged: dict[TopicPartition, int] = {}
        self._task: asyncio.Task[None] | None = None
        self.purges = 0  # purges that deleted something, for tests and /status

    def after_commit(self, committed: Mapping[TopicPartition, int]) -> None:
        """Start a purge up to ``committed`` (the group's committed offsets) if the interval
        has passed since the last one began and none is still running."""
        if self._task is not None and not self._task.done():
            return
        now = self._clock()
        if now - self._last < self._interval_s:
            return
        topics = self._topics()
        offsets = {
            tp: offset for tp, offset in committed.items()
            if tp.topic in topics and offset > self._purged.get(tp, 0)
        }
        if not offsets:
            return
        self._last = now
        self._task = asyncio.create_task(self._purge(offsets), name="purge repartition topics")

    async def _purge(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            await self._log.delete_records(offsets)
        except TransportError as exc:
            logger.warning("could not delete the repartition topics' committed records (tried again later): %s", exc)
            return
        for tp, offset in offsets.items():
            self._purged[tp] = max(offset, self._purged.get(tp, 0))
        self.purges += 1
        logger.debug("deleted repartition records below %s", offsets)

    async def aclose(self) -> None:
        """Let a purge under way end, for ``CLOSE_WAIT_S`` at most (a log that does not
        answer must not hold up a stop; the next purge deletes what this one did not)."""
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=CLOSE_WAIT_S)
        if not done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
