"""The worker's rebalance listener: what happens when the group moves input partitions.

``Rebalancer`` is the listener the worker's consumer calls (``on_partitions_assigned``,
``on_partitions_revoked``). It turns partitions into partition tasks through ``Assignment``
(``assignment.py``), tells the app's signals, and under exactly-once opens and closes the
tasks' transactional producers around them (``transactions.py``):

* on an assignment, the producers of the tasks new here start first (fencing their previous
  owners), then the tasks' input positions are read from the group and sought to, and only
  then are the tasks created; their partitions stay paused meanwhile, so no record is fetched
  before its inbox exists;
* on a revocation, the tasks stop, what they finished is committed (``commits.py``), then the
  producers of the tasks gone from here close (aborting what they did not commit);
* ``lose_task``: a task whose transaction did not commit (fenced, or timed out) stops, loses
  its tables' partitions and its producer, and opens again if the group still assigns it here;
  at-least-once, a task whose outputs were not acknowledged is rewound so, to its last commit.

Opening tasks (on an assignment, or again after a loss) needs the log: their producers'
InitProducerId, the group's committed offsets, the tables' changelogs. When it fails for a
transport error (the cluster is unreachable, its coordinators move), the tasks are tried again
after 0.5 s, then twice as long each time up to ``REOPEN_MAX_S``, as Kafka Streams retries
until its cluster is back; meanwhile their partitions stay paused, ``reopening`` says why
(the worker's /health answers 503 with it) and one warning line says it began. The tries end
when they succeed, when the group no longer assigns the partitions here, or when a rebalance
begins (the assignment that follows opens what comes here), or when the worker stops. An
error that is not retriable still stops the worker.

``TablesFollowPartitions`` keeps the tables' partitions in step with the input partitions
(``state.py``); ``TaskControl`` is the tasks as an exactly-once commit sees them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from streamkit._core.types import TopicPartition
from streamkit.app.application import App
from streamkit.runtime.assignment import Assignment
from streamkit.runtime.commits import Committer
from streamkit.runtime.state import StateManager
from streamkit.runtime.tasks import PartitionTask
from streamkit.runtime.transactions import TaskProducers
from streamkit.transport.base import Consumer, TransportError
from streamkit.transport.placement import GroupInfo

logger = logging.getLogger(__name__)
REOPEN_FIRST_S = 0.5  # the first wait before opening a task again (doubled each try)
REOPEN_MAX_S = 10.0
CLOSE_WAIT_S = 5.0  # a failed try's producers close within this, or without the log


class TablesFollowPartitions:
    """The tables' partitions follow the input partitions (``state.py``): partition p of
    every table is restored before a task of partition p reads, and closed after the
    revocation commit unless another input partition p stays."""

    def __init__(
        self,
        state_manager: StateManager,
        group_info: Callable[[], GroupInfo | None],
        assignment: Callable[[], set[TopicPartition]],
    ) -> None:
        self._state_manager = state_manager
        self._group_info = group_info
        self._assignment = assignment

    async def partitions_assigned(self, assigned: set[TopicPartition], tasks: list[PartitionTask]) -> None:
        state = self._state_manager
        await state.assign({tp.partition for tp in assigned})
        group = self._group_info()
        if group is not None:
            await state.set_standbys(set(group.standbys))

    async def partitions_revoked(
        self, revoked: set[TopicPartition], tasks: list[PartitionTask], committed: bool
    ) -> None:
        if not committed:
            return  # the worker fails; stop closes the stores, state claims nothing more
        kept = {tp.partition for tp in self._assignment() if tp not in revoked}
        await self._state_manager.revoke({tp.partition for tp in revoked} - kept)


class TaskControl:
    """The partition tasks as an exactly-once commit sees them (``commits.py``)."""

    def __init__(self, task_assignment: Assignment, lose: Callable[[int], Awaitable[None]]) -> None:
        self._assignment = task_assignment
        self._lose = lose

    def busy(self) -> bool:
        return any(t.busy for t in self._assignment.tasks.values())

    def torn(self) -> set[int]:
        return {t.partition for t in self._assignment.tasks.values() if t.torn}

    def wake(self) -> None:
        for task in self._assignment.tasks.values():
            task.wakeup.set()

    async def lose(self, partition: int) -> None:
        await self._lose(partition)


class Rebalancer:
    """The worker's ``RebalanceListener`` (see the module docstring). ``consumer`` is set by
    the worker's ``start``, before the consumer starts (and so before any rebalance)."""

    def __init__(
        self,
        app: App,
        task_assignment: Assignment,
        committer: Committer,
        state_manager: StateManager,
        task_producers: TaskProducers | None,
        commit: Callable[[set[TopicPartition]], Awaitable[object]],
        fail: Callable[[BaseException], None],
    ) -> None:
        self.app = app
        self.task_assignment = task_assignment
        self.committer = committer
        self.state_manager = state_manager
        self.task_producers = task_producers
        self._commit = commit
        self._fail = fail
        self.consumer: Consumer | None = None
        # Where a lost task goes back to before its first commit.
        self._start_positions: dict[TopicPartition, int] = {}
        # Tasks waiting to be opened (again), by partition number: why the last try failed.
        self.reopening: dict[int, str] = {}
        # Set when a revocation begins or the worker stops: tries to open tasks give way.
        self._give_way = asyncio.Event()
        self._stopping = False

    def _assignment(self) -> set[TopicPartition]:
        return self.consumer.assignment() if self.consumer is not None else set()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        if self.consumer is not None:
            for tp in assigned:  # where a lost task goes back to before the first commit
                position = self.consumer.position(tp)
                if position is not None:
                    self._start_positions[tp] = position
        self._tries_begin()
        if self.task_producers is not None:
            what = f"the tasks of {', '.join(str(tp) for tp in sorted(assigned))}"
            if not await self._keep_trying(assigned, what, self._open_tasks):
                return  # failed for good (the worker stops), or a rebalance came first
        self.app.rebalancing = True
        try:
            await self.task_assignment.assign(assigned)
        finally:
            self.app.rebalancing = False
            if self.task_producers is not None and self.consumer is not None:
                self.consumer.resume(sorted(assigned))
        logger.info("assigned %s", ", ".join(str(tp) for tp in sorted(assigned)) or "nothing")
        await self.app.on_partitions_assigned.send(self.app, assigned=set(assigned))
        await self.app.on_rebalance_complete.send(self.app)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._give_way.set()  # tries to open tasks give way (the assignment decides)
        held = revoked & self.task_assignment.partitions()
        if held:  # a stop revokes what is still held, then the consumer's close may again
            self.app.rebalancing = True
            await self.app.on_partitions_revoked.send(self.app, revoked=held)
        try:
            doomed = await self.task_assignment.revoke(revoked, self._commit)
        finally:
            if self.task_producers is not None:
                # A task gone from here closes its producer (aborting what it did not commit).
                # All at once, as ``TaskProducers.aclose`` (a stop's deadline cancels them together).
                running = {tp.partition for tp in self.task_assignment.partitions()}
                closing = sorted(set(self.task_producers.producers) - running)
                await asyncio.gather(*(self.task_producers.close(partition) for partition in closing))
        if not doomed:
            return
        self.committer.forget({tp for t in doomed for tp in t.inboxes if tp not in self.task_assignment.inboxes})
        logger.info("revoked %s", ", ".join(str(tp) for tp in sorted(revoked)))

    async def _open_tasks(self, tps: set[TopicPartition]) -> None:
        """Exactly-once, before the tasks of ``tps`` are created: start the producers of the
        tasks new here (fencing their previous owners and ending their transactions), then
        take the tasks' input positions from the group, which only those ids commit now.
        ``tps`` stay paused until the caller resumes them after creating their inboxes: a
        record fetched before would find no inbox and be skipped."""
        units = self.task_producers
        consumer = self.consumer
        assert consumer is not None
        consumer.pause(sorted(tps))
        partitions = sorted({tp.partition for tp in tps})
        if units is not None:
            opened = await asyncio.gather(*(units.open(p) for p in partitions))
            fresh = {p for p, new in zip(partitions, opened, strict=True) if new}
        else:  # at-least-once, a task rewound (``lose_task``): back to the group's commit
            fresh = set(partitions)
        positions: dict[TopicPartition, int] = {}
        for tp in sorted(tp for tp in tps if tp.partition in fresh):
            position = await consumer.committed(tp)
            if position is None:
                position = self._start_positions.get(tp)
            if position is not None:
                positions[tp] = position
        for tp, position in positions.items():  # no await from here to the tasks' inboxes
            consumer.seek(tp, position)

    async def lose_task(self, partition: int) -> None:
        """Exactly-once, after task ``partition``'s transaction did not commit (fenced by its
        new owner, or timed out): stop its coroutines, close its tables' partitions (their
        uncommitted writes go; another owner may have moved their changelogs) and its
        producer. If the group still assigns it here, open it again as on an assignment.
        At-least-once, after outputs since the last commit were not acknowledged (a
        retriable error, ``commits.py``): the same, without a producer of its own; it opens
        again from the group's last commit and processes those records again."""
        tps = await self._drop(partition)
        if not tps:
            return
        kept = tps & self._assignment()
        if not kept:
            logger.warning("task %d was lost to another worker: closed", partition)
            return
        if self.task_producers is not None:
            logger.warning("task %d was lost: opening it again from its last commit", partition)
        else:
            logger.warning("task %d: opening it again from its last commit", partition)
        self._tries_begin()

        async def reopen(tps: set[TopicPartition]) -> None:
            await self._open_tasks(tps)
            await self.task_assignment.assign(tps)

        if await self._keep_trying(kept, f"task {partition}", reopen):
            consumer = self.consumer
            assert consumer is not None
            consumer.resume(sorted(kept))

    def stop(self) -> None:
        """The worker stops: tries to open tasks end (their partitions are not processed)."""
        self._stopping = True
        self._give_way.set()

    def _tries_begin(self) -> None:
        if not self._stopping:
            self._give_way.clear()

    async def _drop(self, partition: int) -> set[TopicPartition]:
        """Stop and close task ``partition``'s coroutines, its producer and its tables'
        partitions; the input partitions its tasks read (none: it had no task here)."""
        # Tasks already stopping (their partitions are being revoked) are left to the revocation.
        tasks = [t for t in self.task_assignment.tasks.values() if t.partition == partition and not t.stopping]
        await asyncio.gather(*(t.stop() for t in tasks))
        if self.task_producers is not None:
            await self.task_producers.close(partition)
        if not tasks:
            return set()
        tps = {tp for t in tasks for tp in t.inboxes}
        for task in tasks:
            task.close()
            self.task_assignment.tasks.pop((task.agent.name, task.partition), None)
            for tp, inbox in task.inboxes.items():
                inboxes = self.task_assignment.inboxes.get(tp, [])
                if inbox in inboxes:
                    inboxes.remove(inbox)
                if not inboxes:
                    self.task_assignment.inboxes.pop(tp, None)
        self.committer.forget(tps)
        await self.state_manager.revoke({partition})
        return tps

    async def _keep_trying(
        self, tps: set[TopicPartition], what: str, attempt: Callable[[set[TopicPartition]], Awaitable[None]]
    ) -> bool:
        """``attempt(tps)`` until it succeeds (True), with back-off after a retriable
        transport error (module doc). False when it failed for good (the worker fails), the
        group no longer assigns ``tps`` here, or a rebalance began: ``tps`` stay paused."""
        partitions = sorted({tp.partition for tp in tps})
        delay = REOPEN_FIRST_S
        tries = 0
        try:
            while True:
                tries += 1
                try:
                    await attempt(tps)
                except TransportError as exc:
                    if not exc.retriable:
                        logger.error("%s could not be opened, stopping: %s", what, exc)
                        self._fail(exc)
                        return False
                    if not self.reopening.keys() & set(partitions):
                        logger.warning(
                            "%s could not be opened (%s): trying again every %.1f-%.0f s until it can",
                            what, exc, REOPEN_FIRST_S, REOPEN_MAX_S,
                        )
                    self.reopening.update((p, f"{what} could not be opened: {exc}") for p in partitions)
                    await self._undo(partitions)
                else:
                    if tries > 1:
                        logger.info("%s opened after %d tries", what, tries)
                    return True
                if await self._gave_way_within(delay):
                    if not self._stopping:
                        logger.info("%s: a rebalance began, the assignment it ends with opens the tasks here", what)
                    return False
                delay = min(delay * 2, REOPEN_MAX_S)
                tps = tps & self._assignment()
                if not tps:
                    logger.info("%s is no longer assigned here: not opened", what)
                    return False
        finally:
            for partition in partitions:
                self.reopening.pop(partition, None)

    async def _gave_way_within(self, delay: float) -> bool:
        """Whether a rebalance or a stop asked the back-off to give way within ``delay`` seconds
        (False: the back-off ran its course, and the tasks are tried again)."""
        try:
            await asyncio.wait_for(self._give_way.wait(), delay)
        except TimeoutError:
            return False
        return True

    async def _undo(self, partitions: list[int]) -> None:
        """What a failed try opened closes: its tasks, tables' partitions and producers (the
        next try starts them fresh, fencing and seeking again). A producer that cannot end its
        transaction within ``CLOSE_WAIT_S`` closes without the log (it aborts on its timeout)."""
        for partition in partitions:
            try:
                await asyncio.wait_for(self._drop(partition), CLOSE_WAIT_S)
            except TimeoutError:
                logger.debug("task %d: closing after a failed open gave up waiting for the log", partition)
