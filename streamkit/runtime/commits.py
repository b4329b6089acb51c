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
committing would skip it for good. For a retriable error (the log went away, a timeout) and
a periodic commit, every task is rewound to its last commit (``rewind``: stopped, its tables'
partitions restored again, its inputs sought back) and processes those records again, as
Kafka Streams revives a corrupted task. Otherwise the worker fails (``on_failure``) and from
then on nothing is committed, not even on stop: a restart redoes the work from the last commit. A commit the
group refuses (``TransportError`` from the consumer) is raised to the caller: the periodic
loop logs it and tries again at the next interval.

**Exactly-once** (``processing_guarantee="exactly_once"``). Each task (partition number p
of the inputs, and partition p of the tables) has its own transactional producer
(``transactions.py``): everything a task sends between two commits (outputs, changelog
records, dead letters, replies) is one transaction of that task, invisible to read_committed
consumers until it commits. A commit:

1. **quiesces**: it closes the sources' gate (``inbox.Gate``: no record is handed out) and
   waits until no running task holds a record it has not finished, so what each transaction
   holds is exactly the outputs of the records below its task's commit positions;
2. per task, **snapshots** the positions of its input partitions and sends its tables'
   changes to their changelogs, in its transaction;
3. per task (all at once), **commits the transaction** with the positions as the group's
   offsets (``TransactionalProducer.commit_transaction``): the task's outputs, changelog
   records and offsets become visible at once, or not at all;
4. only then **stores** the task's changes (``store_changes``): a table's local state, and
   the changelog offset it records, never run ahead of a committed transaction. Until then
   the uncommitted writes live in the table partitions' write-back caches
   (``tables/partition.py``).

Sends outside any task and global tables' changes go through the worker's own transactional
producer, committed in the same pass without offsets.

A crash anywhere leaves transactions open: the log aborts each when the task's next owner
opens its producer (``InitProducerId`` fences the old epoch), the stores hold the last
committed state, and recovery replays only the committed changelog tail. A task's
transaction the log refuses to commit (``TransactionAbortedError``: its producer was fenced
by the task's new owner, or the transaction timed out) **loses** the task
(``TaskControl.lose``): its coroutines stop, its tables' partitions close without their
uncommitted writes, its producer closes without re-initializing (that would fence the new
owner back). If the group still assigns the task here (a timeout, not a new owner), it is
opened again as on an assignment: a new producer, positions from the group, tables restored
from the committed changelog tail. A zombie thus never commits again and never crashes: its
consumer learns it left the group and rejoins. A stop or revocation that finds a stopped task
torn mid-record loses that task's transaction (aborted) instead of committing it: the next
owner redoes that work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from streamkit._core.types import TopicPartition
from streamkit.runtime.inbox import Gate, Inbox
from streamkit.runtime.transactions import TaskProducers
from streamkit.transport.base import (
    Consumer,
    Producer,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionalProducer,
    TransportError,
)

logger = logging.getLogger(__name__)
QUIESCE_WARN_S = 10.0  # a task still holding a record after this long is logged


class ChangelogWriter(Protocol):
    """What the commit protocol asks of the state (``state.py``'s ``StateManager``)."""

    async def send_changes(
        self, producer: Producer, *, partitions: set[int] | None = None, global_only: bool = False
    ) -> list[Any]:
        """Send the changes since the last commit to their changelogs; what was sent.
        Exactly-once sends per transaction: a task's tables' ``partitions`` (not global),
        or ``global_only`` the global tables' changes."""
        ...

    async def store_changes(self, outgoing: list[Any]) -> None:
        """After the flush: write ``outgoing`` to the stores with their changelog offsets."""
        ...


class TaskControl(Protocol):
    """What an exactly-once commit asks of the worker's partition tasks."""

    def busy(self) -> bool:
        """A running task holds a record it has not finished."""
        ...

    def torn(self) -> set[int]:
        """The partition numbers of stopped tasks that left a record unfinished."""
        ...

    def wake(self) -> None:
        """Wake the tasks' sources (the gate opened)."""
        ...

    async def lose(self, partition: int) -> None:
        """Task ``partition``'s transaction did not commit: drop its work since the last
        commit and close it; open it again if the group still assigns it here."""
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
        self._running: set[asyncio.Future[dict[TopicPartition, int]]] = set()  # commits under way
        self.producer: Producer | None = None
        self.consumer: Consumer | None = None
        self.committed: dict[TopicPartition, int] = {}
        self.commits = 0
        # exactly-once (``exactly_once``): set by the worker before ``bind``
        self.gate = Gate()
        self.group_id = ""
        self.tasks: TaskControl | None = None
        self.task_producers: TaskProducers | None = None
        self.default: TransactionalProducer | None = None
        self.aborts = 0
        self.rewinds = 0
        # at-least-once: how a task goes back to its last commit (``Rebalancer.lose_task``)
        self.rewind: Callable[[int], Awaitable[None]] | None = None
        self.transactions = 0  # committed, over every task's producer and the worker's
        # The metadata each commit carries (the aligned tasks' stream times, ``alignment.py``).
        self.metadata: Callable[[dict[TopicPartition, int]], dict[TopicPartition, str]] = lambda positions: {}

    def bind(self, producer: Producer, consumer: Consumer | None) -> None:
        self.producer = producer
        self.consumer = consumer

    @property
    def exactly_once(self) -> bool:
        return self.tasks is not None

    @property
    def open_transactions(self) -> int:
        """Transactions holding records or offsets not committed yet."""
        if not self.exactly_once:
            return 0
        producers = [*(self.task_producers.producers.values() if self.task_producers else ()), self.default]
        return sum(1 for p in producers if p is not None and p.transaction_open)

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
        """Commit every processed position whose outputs are acknowledged; returns them.

        A commit, once begun, runs to its end whatever becomes of its caller: one cut between
        sending the tables' changes and storing them would leave them out of the stores,
        while the next commit records a changelog offset past them there, so a restart
        would not restore them (a stop cancels the commit loop: a window lost a record
        so). A cancelled caller is cancelled at once; the next commit waits for this one."""
        work = asyncio.ensure_future(self._commit(only))
        self._running.add(work)
        work.add_done_callback(self._running.discard)
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(_report_orphaned)
            raise

    async def _commit(self, only: set[TopicPartition] | None) -> dict[TopicPartition, int]:
        async with self._lock:
            if self._failed():
                return {}  # after a lost output nothing may be committed, not even on stop
            if self.consumer is None or self.producer is None:
                return {}
            if self.tasks is not None:
                return await self._commit_transactions(self.tasks)
            positions = self.snapshot(only)
            outgoing = await self._state.send_changes(self.producer)
            if not positions and not outgoing:
                return {}
            try:
                await self.producer.flush()
                await self._state.store_changes(outgoing)
            except TransportError as exc:
                if exc.retriable and self.rewind is not None and only is None:
                    await self._rewind(exc)
                    return {}
                logger.error("an output could not be stored, stopping without committing: %s", exc)
                self._on_failure(exc)
                raise
            await self.consumer.commit(positions, self.metadata(positions) or None)
            self.committed.update(positions)
            self.commits += 1
            return positions

    async def _rewind(self, exc: TransportError) -> None:
        """At-least-once: outputs were not acknowledged for a retriable reason (the log went
        away and dropped them, or timed them out): every task goes back to its last commit
        and processes those records again (``rewind``), as Kafka Streams revives a corrupted
        task, instead of the worker stopping."""
        partitions = sorted({tp.partition for tp in self._inboxes})
        logger.warning(
            "outputs since the last commit were not all stored (%s): processing tasks %s again from their last commit",
            exc, ", ".join(map(str, partitions)),
        )
        assert self.rewind is not None
        self.rewinds += 1
        for partition in partitions:
            await self.rewind(partition)

    async def _commit_transactions(self, tasks: TaskControl) -> dict[TopicPartition, int]:
        units = self.task_producers
        default = self.default
        assert units is not None and default is not None
        self.gate.closed = True
        try:
            await _quiesce(tasks)
            torn = tasks.torn()
            for partition in sorted(torn):
                # A stopped task (its partitions revoked) left a record half processed: its
                # outputs must not commit, so nothing of its transaction does.
                logger.warning("task %d stopped with a record unfinished: aborting its transaction", partition)
                self.aborts += 1
                await units.close(partition)
            by_task: dict[int, set[TopicPartition]] = {}
            for tp in self._inboxes:
                by_task.setdefault(tp.partition, set()).add(tp)
            pending = {p: producer for p, producer in units.producers.items() if p not in torn}
            results = await asyncio.gather(
                *(self._commit_task(p, producer, by_task.get(p, set())) for p, producer in sorted(pending.items()))
            )
            lost = sorted(torn | {p for p, positions in zip(sorted(pending), results, strict=True) if positions is None})
            committed: dict[TopicPartition, int] = {}
            for positions in results:
                committed.update(positions or {})
            await self._commit_default(default)
            if committed:
                self.commits += 1
            for partition in lost:
                await tasks.lose(partition)
                self.rewinds += 1
            return committed
        finally:
            self.gate.closed = False
            tasks.wake()

    async def _commit_task(
        self, partition: int, producer: TransactionalProducer, tps: set[TopicPartition]
    ) -> dict[TopicPartition, int] | None:
        """Commit task ``partition``'s transaction with its positions; None when it did not
        commit (the task is lost)."""
        positions = self.snapshot(tps)
        outgoing = await self._state.send_changes(producer, partitions={partition})
        touched = producer.transaction_open
        try:
            await producer.commit_transaction(positions, self.group_id, self.metadata(positions) or None)
        except TransactionAbortedError as exc:
            self.aborts += 1
            if isinstance(exc, ProducerFencedError):
                logger.warning(
                    "task %d was fenced (a newer owner took its transactional id): dropping its work since the "
                    "last commit: %s", partition, exc,
                )
            else:
                logger.warning("task %d: its transaction was aborted, dropping its work since the last commit: %s", partition, exc)
            return None
        except TransportError as exc:
            logger.error("task %d: the transaction could not commit, stopping: %s", partition, exc)
            self._on_failure(exc)
            raise
        if touched or positions:
            self.transactions += 1
        try:
            await self._state.store_changes(outgoing)
        except TransportError as exc:
            self._on_failure(exc)  # committed, not stored: a restart replays the changelog tail
            raise
        self.committed.update(positions)
        return positions

    async def _commit_default(self, producer: TransactionalProducer) -> None:
        """The worker's own transaction: sends outside any task, global tables' changes."""
        outgoing = await self._state.send_changes(producer, global_only=True)
        touched = producer.transaction_open
        try:
            await producer.commit_transaction({}, self.group_id)
        except TransactionAbortedError as exc:
            self.aborts += 1
            logger.warning("the worker's own transaction was aborted, its records are lost: %s", exc)
            await producer.abort_transaction()
            return
        except TransportError as exc:
            logger.error("the worker's transaction could not commit, stopping: %s", exc)
            self._on_failure(exc)
            raise
        if touched:
            self.transactions += 1
        await self._state.store_changes(outgoing)

    def forget(self, tps: set[TopicPartition]) -> None:
        """``tps`` left this worker: their last commit is another member's business now."""
        for tp in tps:
            self.committed.pop(tp, None)


def _report_orphaned(work: asyncio.Future[dict[TopicPartition, int]]) -> None:
    """The end of a commit whose caller was cancelled: its failure, said (not left unretrieved)."""
    if not work.cancelled() and (exc := work.exception()) is not None:
        logger.warning("a commit whose caller stopped waiting failed: %s", exc)


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

