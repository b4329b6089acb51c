"""Exactly-once: one transactional producer per task (Kafka Streams' EOS-alpha).

A *task* here is what the consumer group moves as one: partition number p of every input
(range assignment keeps partition p of all the inputs on one member), and with it partition p
of every table. Each task has its own transactional id, ``<app id>-<p>``, the same on every
worker: whoever owns the task opens its producer, whose InitProducerId bumps the epoch and so
fences the previous owner, even one still alive (a worker paused past its session timeout):
its sends and its commit of the task's transaction fail as fenced. Nothing of the group's
generation has to reach the broker (aiokafka's TxnOffsetCommit v0 cannot carry it, KIP-447).

Ownership order on assignment (``Rebalancer._open_tasks`` in ``rebalance.py``, then the
tables' restore): the producer of a new task starts first (InitProducerId completes the
previous owner's transaction, committed or aborted), then the task's input positions are read
from the group (``committed``) and sought to, then its tables' partitions are restored from
their read_committed changelogs. From then on the positions and the changelog tail cannot move
under the new owner: only this transactional id writes them. The task's inputs stay paused
meanwhile, so no record is fetched before its inbox exists.

A fenced task is closed without re-initializing its producer (``Rebalancer.lose_task``) and
opened again the same way only while the group still assigns it here; a zombie that does so
before its consumer notices it left the group fences the new owner back, which then reopens
in turn: each side restores from what the other committed, so no write is lost or doubled,
until the zombie's consumer rejoins and lets the task go.

Routing: while a partition task's coroutines run, ``current_producer`` names its task's
producer; ``RoutingProducer`` (the worker's producer under exactly-once) sends there
everything a task sends: its agents' outputs, records sent from agent code, dead letters,
RPC replies, ``group_by``/``through`` hops. Sends outside any task (timers, app tasks,
channel agents) and global tables' changelog records go to the worker's own transactional
producer (``default``), committed every interval without offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar

from streamkit.transport.base import (
    Header,
    LogClient,
    Producer,
    RecordMetadata,
    TransactionalProducer,
    TransportError,
)

logger = logging.getLogger(__name__)

current_producer: ContextVar[Producer | None] = ContextVar("streamkit_task_producer", default=None)


def task_transactional_id(app_id: str, partition: int) -> str:
    """The transactional id of task ``partition``: one per task, shared by every worker."""
    return f"{app_id}-{partition}"


def worker_transactional_id(app_id: str, state_dir: str) -> str:
    """The transactional id of the worker's own producer (sends outside any task, global
    tables): the app, the host and the worker's state directory (two live workers never
    share one: RocksDB locks it). A worker restarted on its state directory takes the same
    id, which aborts what its predecessor left open."""
    digest = hashlib.sha1(f"{socket.gethostname()}:{os.path.abspath(state_dir)}".encode()).hexdigest()[:12]
    return f"{app_id}-eos-{digest}"


def transaction_timeout_ms(commit_interval_ms: int) -> int:
    """Long enough for a few commit intervals: a transaction lives one interval (plus the
    wait for the tasks to finish their records); the log aborts one open longer."""
    return min(900_000, max(60_000, 5 * commit_interval_ms))


class TaskProducers:
    """The transactional producers of the tasks this worker owns, by partition number."""

    def __init__(self, client: LogClient, app_id: str, timeout_ms: int) -> None:
        self._client = client
        self._app_id = app_id
        self._timeout_ms = timeout_ms
        self.producers: dict[int, TransactionalProducer] = {}

    def get(self, partition: int) -> TransactionalProducer | None:
        return self.producers.get(partition)

    async def open(self, partition: int) -> bool:
        """Start task ``partition``'s producer unless it runs; True when it was started now
        (its InitProducerId fenced the previous owner and ended its transaction)."""
        if partition in self.producers:
            return False
        producer = self._client.transactional_producer(
            task_transactional_id(self._app_id, partition), timeout_ms=self._timeout_ms
        )
        await producer.start()
        self.producers[partition] = producer
        return True

    async def close(self, partition: int) -> None:
        """Close task ``partition``'s producer: what its open transaction holds is aborted
        (or already was, when it was fenced)."""
        producer = self.producers.pop(partition, None)
        if producer is not None:
            known = producer.fenced  # said when it was found
            try:
                await producer.aclose()
            except TransportError as exc:
                logger.warning("closing the producer of task %d: %s", partition, exc)
            if producer.fenced and not known:
                logger.warning(
                    "task %d was fenced (a newer owner took its transactional id): its open transaction "
                    "was aborted by the log", partition,
                )

    async def aclose(self) -> None:
        # All at once: a stop that gives up on the log cancels this once, and each close,
        # cancelled, ends without the log (``runtime/shutdown.py``).
        await asyncio.gather(*(self.close(partition) for partition in sorted(self.producers)))


class RoutingProducer:
    """The worker's ``Producer`` under exactly-once: each send goes to the producer of the
    task whose coroutine sends it (``current_producer``), else to ``default``."""

    def __init__(self, default: TransactionalProducer, tasks: TaskProducers) -> None:
        self.default = default
        self.tasks = tasks

    async def start(self) -> None:
        await self.default.start()

    async def aclose(self) -> None:
        # Both, at once (``TaskProducers.aclose``); the first failure is raised after both end.
        results = await asyncio.gather(self.tasks.aclose(), self.default.aclose(), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int,
        headers: Sequence[Header] = (),
        timestamp_ms: int | None = None,
    ) -> Awaitable[RecordMetadata]:
        producer = current_producer.get() or self.default
        return await producer.send(topic, key, value, partition=partition, headers=headers, timestamp_ms=timestamp_ms)

    def send_nowait(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Sequence[Header] = (),
    ) -> Awaitable[None] | None:
        return (current_producer.get() or self.default).send_nowait(topic, partition, key, value, timestamp_ms, headers)

    async def flush(self) -> None:
        await asyncio.gather(self.default.flush(), *(p.flush() for p in list(self.tasks.producers.values())))


async def in_task(producer: Callable[[], Producer | None], coro: Awaitable[None]) -> None:
    """Run ``coro`` with its task's producer as ``current_producer`` (asyncio tasks it
    starts inherit it)."""
    token = current_producer.set(producer())
    try:
        await coro
    finally:
        with contextlib.suppress(ValueError):
            current_producer.reset(token)
