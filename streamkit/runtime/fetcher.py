"""The fetch loop: the worker's consumer into the partition tasks' inboxes, with back-pressure.

Each fetch (up to ``FETCH_MAX_RECORDS`` records) goes, per input partition, to every inbox
reading it (one per agent over that topic); a partition with no inbox (revoked meanwhile) is
skipped. When one of a partition's inboxes reaches its ``high_water``, the partition is
paused (its inboxes marked ``paused``); it resumes (``resume``, the inboxes' ``on_low``)
once every inbox reading it is below half of its ``high_water``. A failed fetch is logged
and tried again after ``RETRY_S``: the loop ends only when the worker stops.
"""

from __future__ import annotations

import asyncio
import logging

from streamkit._core.types import TopicPartition
from streamkit.runtime.status import Inboxes, WorkerStats
from streamkit.transport.base import Consumer, TransportError

logger = logging.getLogger(__name__)
FETCH_MAX_RECORDS = 10_000
FETCH_TIMEOUT_MS = 200
RETRY_S = 0.5


class Fetcher:
    """Fills ``inboxes`` (the worker's, by input partition, shared with ``Assignment``)
    from ``consumer`` until ``stopped`` is set, counting records in ``stats``."""

    def __init__(self, consumer: Consumer, inboxes: Inboxes, stats: WorkerStats, stopped: asyncio.Event) -> None:
        self._consumer = consumer
        self._inboxes = inboxes
        self._stats = stats
        self._stopped = stopped

    async def run(self) -> None:
        consumer = self._consumer
        all_inboxes = self._inboxes
        stats = self._stats
        while not self._stopped.is_set():
            try:
                fetched = await consumer.getmany(FETCH_TIMEOUT_MS, FETCH_MAX_RECORDS)
            except TransportError as exc:
                logger.warning("fetch failed, retrying: %s", exc)
                await asyncio.sleep(RETRY_S)
                continue
            for tp, records in fetched.items():
                inboxes = all_inboxes.get(tp)
                if not inboxes:
                    continue
                stats.records_in += len(records)
                full = False
                for inbox in inboxes:
                    inbox.put(records)
                    full = full or inbox.size >= inbox.high_water
                if full:
                    for inbox in inboxes:
                        inbox.paused = True
                    consumer.pause([tp])
            if not fetched:
                await asyncio.sleep(0)

    def resume(self, tp: TopicPartition) -> None:
        """An inbox of ``tp`` drained: resume ``tp`` when every inbox reading it is below half."""
        inboxes = self._inboxes.get(tp, [])
        if all(i.size < i.high_water // 2 for i in inboxes):
            for inbox in inboxes:
                inbox.paused = False
            self._consumer.resume([tp])
