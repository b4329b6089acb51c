"""The commit protocol (at-least-once): what may be committed, and when.

A commit, periodic (``commit_interval``) or for the partitions being revoked, runs in three
steps under one lock:

1. **snapshot** each input partition's commit position: the smallest over the inboxes
   reading it (``inbox.py``: below it every record was processed); partitions whose position
   did not move since the last commit are left out;
2. **flush**: the tables' changes since the last commit are sent to their changelogs
   (``ChangelogWriter.send_changes``), then the producer is flushed, so everything sent while
   processing the records below the snapshot is acknowledged by the log; then the sent
   changes are written to the tables' stores with the changelog offsets they reach
   (``store_changes``);
3. **commit** the snapshot through the consumer.

Failure rule: when the flush fails, something an input's processing sent was not stored;
committing would skip it for good. The worker fails (``on_failure``) and from then on nothing
is committed, not even on stop: a restart redoes the work from the last commit. A commit the
group refuses (``TransportError`` from the consumer) is raised to the caller: the periodic
loop logs it and tries again at the next interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from streamkit._core.types import TopicPartition
from streamkit.runtime.inbox import Inbox
from streamkit.transport.base import Consumer, Producer, TransportError

logger = logging.getLogger(__name__)


class ChangelogWriter(Protocol):
    """What the commit protocol asks of the state (``state.py``'s ``StateManager``)."""

    async def send_changes(self, producer: Producer) -> list[Any]:
        """Send the changes since the last commit to their changelogs; what was sent."""
        ...

    async def store_changes(self, outgoing: list[Any]) -> None:
        """After the flush: write ``outgoing`` to the stores with their changelog offsets."""
        ...


class Committer:
    def __init__(
        self,
        inboxes: dict[TopicPartition, list[Inbox]],
        on_failure: Callable[[BaseException], None],
        failed: Callable[[], bool],
        state: ChangelogWriter,
    ) -> None:
        self._inboxes = inboxes
        self._state = state
        self._on_failure = on_failure
        self._failed = failed
        self._lock = asyncio.Lock()
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.committed: dict[TopicPartition, int] = {}
        self.commits = 0

    def bind(self, producer: Producer, consumer: Consumer | None) -> None:
        self.producer = producer
        self.consumer = consumer

    def snapshot(self, only: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """The commit positions that moved since the last commit (step 1)."""
        positions: dict[TopicPartition, int] = {}
        for tp, inboxes in self._inboxes.items():
            if only is not None and tp not in only:
                continue
            found = [p for p in (i.commit_position() for i in inboxes) if p is not None]
            if found:
                position = min(found)
                if self.committed.get(tp) != position:
                    positions[tp] = position
        return positions

    async def commit(self, only: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Commit every processed position whose outputs are acknowledged; returns them."""
        async with self._lock:
            if self._failed():
                return {}  # after a lost output nothing may be committed, not even on stop
            positions = self.snapshot(only)
            if self.consumer is None or self.producer is None:
                return {}
            outgoing = await self._state.send_changes(self.producer)
            if not positions and not outgoing:
                return {}
            try:
                await self.producer.flush()
                await self._state.store_changes(outgoing)
            except TransportError as exc:
                logger.error("an output could not be stored, stopping without committing: %s", exc)
                self._on_failure(exc)
                raise
            await self.consumer.commit(positions)
            self.committed.update(positions)
            self.commits += 1
            return positions

    def forget(self, tps: set[TopicPartition]) -> None:
        """``tps`` left this worker: their last commit is another member's business now."""
        for tp in tps:
            self.committed.pop(tp, None)
