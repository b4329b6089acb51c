"""Group commit for ``streamkit broker --durable``: fsync before acknowledging, shared.

A produce request's appends land in the page cache; under ``--durable`` its response waits
until those partitions are fsynced. One fsync round runs at a time, in a worker thread, and
covers every partition appended to by the requests that were waiting when it began; the
requests that arrive while it runs wait for the next round, which covers all of them at once.
So producers sending concurrently share fsyncs instead of queueing one fsync each.

``durable_end`` is what the rounds proved: for each partition, an offset below which every
record was on disk when a round finished. A response never leaves before the round covering
its records has finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from streamkit._core.types import TopicPartition
from streamkit.log.partition import Partition

RunBlocking = Callable[..., Awaitable[Any]]


class GroupSync:
    """Rounds of ``Partition.flush`` shared by every request waiting when a round starts."""

    def __init__(self, run_blocking: RunBlocking) -> None:
        self._run_blocking = run_blocking
        self._waiting: dict[TopicPartition, Partition] = {}
        self._next: asyncio.Future[None] | None = None  # resolved by the round after this one
        self._round: asyncio.Task[None] | None = None
        self.durable_end: dict[TopicPartition, int] = {}
        self.rounds = 0  # rounds run
        self.requests = 0  # requests that waited for one

    async def sync(self, partitions: Iterable[Partition]) -> None:
        """Return once everything appended to ``partitions`` so far is on disk.

        Raises the round's ``OSError`` (or ``LogError``) when its fsync failed.
        """
        for partition in partitions:
            self._waiting[partition.tp] = partition
        if not self._waiting:
            return
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        done = self._next
        self.requests += 1
        if self._round is None:
            self._start()
        # Shielded: a waiter cancelled (its connection closed) must not cancel the others'.
        await asyncio.shield(done)

    def _start(self) -> None:
        partitions, self._waiting = list(self._waiting.values()), {}
        done, self._next = self._next, None
        assert done is not None
        self._round = asyncio.ensure_future(self._run(partitions, done))

    async def _run(self, partitions: list[Partition], done: asyncio.Future[None]) -> None:
        try:
            ends = await self._run_blocking(_flush, partitions)
        except Exception as exc:
            done.set_exception(exc)
            done.exception()  # a failure nobody waits for any more is not "never retrieved"
        else:
            self.rounds += 1
            for tp, end in ends.items():
                self.durable_end[tp] = max(end, self.durable_end.get(tp, 0))
            done.set_result(None)
        finally:
            self._round = None
            if self._next is not None:  # requests arrived while this round ran
                self._start()


def _flush(partitions: list[Partition]) -> dict[TopicPartition, int]:
    """Flush each partition; per partition, the end offset that is on disk now (at least)."""
    ends = {p.tp: p.high_watermark for p in partitions}  # before the flush: it covers these
    for partition in partitions:
        partition.flush()
    return ends
