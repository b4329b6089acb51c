"""The worker's report: its counters, and what ``/status``, ``/health``, the CLI's progress
line and ``streamkit.testing`` read of its parts.

``WorkerStats`` counts what the worker did (records fetched, dead letters, commits). The
functions here compute the rest of the report from the parts the worker is made of (its
consumer, producer, inboxes, tasks and committer); they only read, and never wait on the
log except ``settle``, which flushes the producer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streamkit._core.types import TopicPartition
from streamkit.app.application import App
from streamkit.runtime.commits import Committer
from streamkit.runtime.inbox import Inbox
from streamkit.runtime.tasks import PartitionTask
from streamkit.transport.base import Consumer, Producer

Inboxes = dict[TopicPartition, list[Inbox]]


@dataclass
class WorkerStats:
    records_in: int = 0
    dead_lettered: int = 0
    commits: int = 0
    started_at: float = field(default_factory=time.monotonic)


def guarantee_status(app: App, committer: Committer) -> dict[str, Any]:
    """The processing guarantee and, under exactly-once, its transactions (``/status``)."""
    out: dict[str, Any] = {"processing_guarantee": app.processing_guarantee}
    if committer.exactly_once:
        out["transactions"] = {
            "open": committer.open_transactions,
            "committed": committer.transactions,
            "aborted": committer.aborts,
            "rewinds": committer.rewinds,
        }
    return out


def failing_agents(tasks: Iterable[PartitionTask]) -> list[dict[str, Any]]:
    """The partition tasks backing off after failures outside a record (``tasks.py``)."""
    out = []
    for task in tasks:
        failure = task.failing
        if failure is not None:
            out.append(
                {
                    "agent": task.agent.name,
                    "partition": task.partition,
                    "error": failure.error,
                    "failures": failure.failures,
                    "retry_in_s": failure.retry_in_s,
                }
            )
    return out


def stalled(consumer: Consumer | None, inboxes: Inboxes) -> dict[TopicPartition, str]:
    """Assigned input partitions the log does not serve now (deleted topic, lost
    partition), with the reason: their tasks cannot progress."""
    if consumer is None:
        return {}
    return {tp: why for tp, why in consumer.unavailable().items() if tp in inboxes}


async def settle(producer: Producer | None, consumer: Consumer | None, inboxes: Inboxes) -> bool:
    """Flush outputs and tell whether every fetched record was processed and nothing more
    is waiting in the log for this worker (used by ``streamkit.testing``)."""
    if producer is not None:
        await producer.flush()
    if consumer is None:
        return True
    assigned = consumer.assignment()
    if not assigned:
        return False  # still joining the group
    if any(tp not in inboxes for tp in assigned):
        return False  # assigned, and its tasks not made yet (the assignment is under way)
    for tp, tp_inboxes in inboxes.items():
        for inbox in tp_inboxes:
            if inbox.size:
                return False
            if any(reader.first_pending(tp) is not None for reader in inbox.readers):
                return False
        hw = consumer.highwater(tp)
        position = consumer.position(tp)
        if hw is None:
            return False  # no fetch answered yet: what the log holds is unknown
        if position is None or position < hw:
            return False
    return True


def lag(consumer: Consumer | None, inboxes: Inboxes) -> dict[TopicPartition, int]:
    """Records not yet processed per assigned input partition (high watermark - position)."""
    out: dict[TopicPartition, int] = {}
    if consumer is None:
        return out
    for tp, tp_inboxes in inboxes.items():
        hw = consumer.highwater(tp)
        positions = [p for p in (i.commit_position() for i in tp_inboxes) if p is not None]
        if hw is not None:
            out[tp] = max(0, hw - (min(positions) if positions else (consumer.position(tp) or 0)))
    return out
