"""The commit protocol: what may be committed, and when (at-least-once and exactly-once).

**At-least-once** (the default). A commit, periodic (``commit_interval``) or for the
partitions being revoked, runs in three steps under one lock:

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

**Exactly-once** (``processing_guarantee="exactly_once"``). The producer is transactional:
everything sent between two commits (outputs, changelog records, dead letters) is one
transaction, invisible to read_committed consumers until it commits. A commit:

1. **quiesces**: it closes the sources' gate (``inbox.Gate``: no record is handed out) and
   waits until no running task holds a record it has not finished, so what the transaction
   holds is exactly the outputs of the records below the commit positions;
2. **snapshots** the positions (every partition: one transaction covers them all) and sends
   the tables' changes to their changelogs, in the transaction;
3. **commits the transaction** with the positions as the group's offsets
   (``TransactionalProducer.commit_transaction``): outputs, changelog records and offsets
   become visible at once, or not at all;
4. only then **stores** the changes (``store_changes``): a table's local state, and the
   changelog offset it records, never run ahead of a committed transaction. Until then the
   uncommitted writes live in the table partitions' write-back caches (``tables/partition.py``).

A crash anywhere leaves the transaction open: the log aborts it when the worker comes back
(``InitProducerId`` fences the old epoch), the stores hold the last committed state, and
recovery replays only the committed changelog tail. A transaction the log refuses to commit
(``TransactionAbortedError``, e.g. the producer was fenced) is aborted and the worker
**rewinds** (``rewind``): the tables drop their uncommitted writes, the tasks restart from the
last committed positions. A stop or revocation that finds a stopped task torn mid-record
aborts instead of committing: the restart redoes that work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from streamkit._core.types import TopicPartition
from streamkit.runtime.inbox import Gate, Inbox
from streamkit.transport.base import (
    Consumer,
    Producer,
    TransactionAbortedError,
    TransactionalProducer,
    TransportError,
)

logger = logging.getLogger(__name__)
QUIESCE_WARN_S = 10.0  # a task still holding a record after this long is logged


class ChangelogWriter(Protocol):
    """What the commit protocol asks of the state (``state.py``'s ``StateManager``)."""

    async def send_changes(self, producer: Producer) -> list[Any]:
        """Send the changes since the last commit to their changelogs; what was sent."""
        ...

    async def store_changes(self, outgoing: list[Any]) -> None:
        """After the flush: write ``outgoing`` to the stores with their changelog offsets."""
        ...


class TaskControl(Protocol):
    """What an exactly-once commit asks of the worker's partition tasks."""

    def busy(self) -> bool:
        """A running task holds a record it has not finished."""
        ...

    def torn(self) -> bool:
        """A stopped task left a record unfinished."""
        ...

    def wake(self) -> None:
        """Wake the tasks' sources (the gate opened)."""
        ...

    async def rewind(self, committed: dict[TopicPartition, int]) -> None:
        """Drop the work since the last commit: tables' uncommitted writes, tasks' positions."""
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
        # exactly-once (``exactly_once``): set by the worker before ``bind``
        self.gate = Gate()
        self.group_id = ""
        self.tasks: TaskControl | None = None
        self.aborts = 0
        self.rewinds = 0

    def bind(self, producer: Producer, consumer: Consumer | None) -> None:
        self.producer = producer
        self.consumer = consumer

    @property
    def exactly_once(self) -> bool:
        return self.tasks is not None

    @property
    def transaction_open(self) -> bool:
        producer = self.producer
        return self.exactly_once and producer is not None and cast(TransactionalProducer, producer).transaction_open

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
            if self.consumer is None or self.producer is None:
                return {}
            if self.tasks is not None:
                return await self._commit_transaction(cast(TransactionalProducer, self.producer), self.tasks)
            positions = self.snapshot(only)
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

    async def _commit_transaction(self, producer: TransactionalProducer, tasks: TaskControl) -> dict[TopicPartition, int]:
        self.gate.closed = True
        try:
            await _quiesce(tasks)
            if tasks.torn():
                # A stopped task (its partitions revoked) left a record half processed: its
                # outputs must not commit, so nothing in the transaction does; the tasks that
                # go on start again from the last commit.
                logger.warning("a stopped task left a record unfinished: aborting the open transaction")
                await producer.abort_transaction()
                self.aborts += 1
                await tasks.rewind(dict(self.committed))
                self.rewinds += 1
                return {}
            positions = self.snapshot()
            outgoing = await self._state.send_changes(producer)
            try:
                await producer.commit_transaction(positions, self.group_id)
            except TransactionAbortedError as exc:
                self.aborts += 1
                logger.warning("the transaction was aborted (%s): rewinding to the last commit", exc)
                await producer.abort_transaction()
                await tasks.rewind(dict(self.committed))
                self.rewinds += 1
                return {}
            except TransportError as exc:
                logger.error("the transaction could not commit, stopping: %s", exc)
                self._on_failure(exc)
                raise
            try:
                await self._state.store_changes(outgoing)
            except TransportError as exc:
                self._on_failure(exc)  # committed, not stored: a restart replays the changelog tail
                raise
            if positions or outgoing:
                self.commits += 1
            self.committed.update(positions)
            return positions
        finally:
            self.gate.closed = False
            tasks.wake()

    def forget(self, tps: set[TopicPartition]) -> None:
        """``tps`` left this worker: their last commit is another member's business now."""
        for tp in tps:
            self.committed.pop(tp, None)


async def _quiesce(tasks: TaskControl) -> None:
    """Wait until no running task holds an unfinished record (the gate is closed)."""
    began = time.monotonic()
    warned = False
    delay = 0.0
    while tasks.busy():
        await asyncio.sleep(delay)
        delay = min(0.01, delay * 2 or 0.0005)
        if not warned and time.monotonic() - began > QUIESCE_WARN_S:
            warned = True
            logger.warning("an exactly-once commit has waited %.0f s for a task to finish its record", QUIESCE_WARN_S)

