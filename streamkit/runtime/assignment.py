"""Assignment: which partition tasks exist for which input partitions, and their lifecycle.

A consumer group hands the worker input partitions; ``Assignment`` turns that into partition
tasks (one per agent and partition number, see ``tasks.py``) and the inboxes they read:

* ``assign(tps)``: for every agent reading one of ``tps``, create the task of that partition
  number unless it exists, give it an inbox per assigned input partition, then notify the
  listeners (``partitions_assigned``) and only then start the fresh tasks;
* ``revoke(tps)``: stop the tasks reading one of ``tps`` (each instance finishes the record in
  hand, briefly), commit what they finished (the commit protocol, ``commits.py``), notify the
  listeners (``partitions_revoked``), then close the tasks and forget their inboxes.

Order invariants the tables' state relies on (``AssignmentListener``): a partition's stores
are opened and restored in ``partitions_assigned`` before a task reads a record, and closed
in ``partitions_revoked`` after the commit of what the tasks finished.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from streamkit._core.types import TopicPartition
from streamkit.agents.agent import Agent
from streamkit.runtime.inbox import Inbox
from streamkit.runtime.tasks import PartitionTask
from streamkit.topics.topic import Topic

logger = logging.getLogger(__name__)


class AssignmentListener(Protocol):
    """What learns of partitions and tasks coming and going (the tables' state: open and
    restore stores, close them)."""

    async def partitions_assigned(self, assigned: set[TopicPartition], tasks: list[PartitionTask]) -> None:
        """``assigned`` came; ``tasks`` (the new ones) exist and none has started reading."""
        ...

    async def partitions_revoked(
        self, revoked: set[TopicPartition], tasks: list[PartitionTask], committed: bool
    ) -> None:
        """``tasks`` stopped and, when ``committed``, what they finished is committed (else
        the commit failed: the worker fails, state must not claim more than the log); the
        tasks close next."""
        ...


class Assignment:
    def __init__(
        self,
        agents: Callable[[], Iterable[Agent]],
        inputs_of: Callable[[Agent], dict[str, Topic]],
        make_task: Callable[[Agent, int], PartitionTask],
        on_low: Callable[[TopicPartition], None],
    ) -> None:
        self._agents = agents
        self._inputs_of = inputs_of
        self._make_task = make_task
        self._on_low = on_low
        self.tasks: dict[tuple[str, int], PartitionTask] = {}
        self.inboxes: dict[TopicPartition, list[Inbox]] = {}
        self.listeners: list[AssignmentListener] = []

    def partitions(self) -> set[TopicPartition]:
        """Every input partition some task reads."""
        return {tp for task in self.tasks.values() for tp in task.inboxes}

    async def assign(self, assigned: set[TopicPartition]) -> list[PartitionTask]:
        """Create the tasks and inboxes for ``assigned`` and start the new tasks."""
        fresh: list[PartitionTask] = []
        for agent in self._agents():
            inputs = self._inputs_of(agent)
            for tp in sorted(assigned):
                topic = inputs.get(tp.topic)
                if topic is None:
                    continue
                key = (agent.name, tp.partition)
                task = self.tasks.get(key)
                if task is None:
                    task = self.tasks[key] = self._make_task(agent, tp.partition)
                    fresh.append(task)
                elif task not in fresh:
                    logger.warning("partition %s assigned to a running task %r", tp, task)
                    continue
                inbox = task.add_inbox(tp, topic)
                inbox.on_low = self._on_low
                self.inboxes.setdefault(tp, []).append(inbox)
        for listener in self.listeners:
            await listener.partitions_assigned(assigned, fresh)
        for task in fresh:
            task.start()
        return fresh

    async def revoke(
        self, revoked: set[TopicPartition], commit: Callable[[set[TopicPartition]], Awaitable[object]]
    ) -> list[PartitionTask]:
        """Stop the tasks reading ``revoked``, ``commit`` their partitions, close them."""
        doomed = [t for t in self.tasks.values() if any(tp in revoked for tp in t.inboxes)]
        if not doomed:
            return []
        await asyncio.gather(*(t.stop() for t in doomed))
        committed = False
        try:
            await commit({tp for t in doomed for tp in t.inboxes})
            committed = True
        finally:
            try:
                for listener in self.listeners:
                    await listener.partitions_revoked(revoked, doomed, committed)
            finally:
                for task in doomed:
                    task.close()
        for task in doomed:
            self.tasks.pop((task.agent.name, task.partition), None)
            for tp, inbox in task.inboxes.items():
                inboxes = self.inboxes.get(tp, [])
                if inbox in inboxes:
                    inboxes.remove(inbox)
                if not inboxes:
                    self.inboxes.pop(tp, None)
        return doomed
