"""``TaskContext``: what a partition task (and a channel task) needs from the worker running it.

The worker builds one context when it is constructed and hands it to every task it creates
(``tasks.py``); a task reaches nothing else of the worker, so ``tasks.py`` does not import
``worker.py``. Every field is a value or a bound callable, read when a task needs it (never
copied at construction), so what changes while the worker runs (its sender, set by ``start``
and unset by ``stop``; the exactly-once producers of the tasks) is seen as it is now.

Invariant: the context holds only what the tasks use; a field the tasks stop using goes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from streamkit._core.clock import Clock
from streamkit._core.types import TopicPartition
from streamkit.agents.agent import Agent
from streamkit.runtime.alignment import Aligner
from streamkit.runtime.inbox import Gate
from streamkit.runtime.merge import MergePlan
from streamkit.runtime.outputs import Forward
from streamkit.runtime.sender import RuntimeSender
from streamkit.topics.topic import Topic
from streamkit.transport.base import ConsumerRecord, Producer

DeadLetterFn = Callable[[Agent, TopicPartition, ConsumerRecord, BaseException], Awaitable[None]]
ReplyFn = Callable[[Any, Any, str, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class TaskContext:
    """The worker as its tasks see it."""

    clock: Clock
    """The worker's clock: the sources' ``timeout``/``take`` windows run on it."""
    gate: Gate
    """Closed while an exactly-once commit seals its transactions (``commits.py``)."""
    fail: Callable[[BaseException], None]
    """Stop the worker with this error (the error policy ``on_error="stop"``, or too many
    failures in a row)."""
    dead_letter: DeadLetterFn
    """Send a record an agent failed on to the app's dead-letter topic, with the error."""
    task_producer: Callable[[int], Producer | None]
    """Exactly-once: the transactional producer of task ``partition`` (else None)."""
    sender: Callable[[], RuntimeSender | None]
    """The running worker's sender (None before ``start`` and after ``stop``)."""
    forwarder: Callable[[Agent], Forward]
    """What sends each value an agent yields to its sinks (``outputs.py``)."""
    reply: ReplyFn
    """Answer an RPC request: ``reply(key, value, reply_to, correlation_id)``."""
    hop_topic: Callable[[Agent, Topic | None, str], Topic]
    """The topic of one ``through``/``group_by`` hop of an agent (``topology.py``)."""
    partition_count_of: Callable[[Topic], int | None]
    """A topic's partition count as created or found (``topology.py``)."""
    aligner_for: Callable[[Agent], tuple[Aligner, int] | None]
    """The aligner pacing ``agent``'s tasks and the agent's rank in its group (tasks of
    several agents tie by rank, then partition), or None (``alignment.py``)."""
    merge_for: Callable[[Agent], MergePlan | None]
    """How ``agent`` merges inputs written by aligned tasks of this worker (a join after a
    re-key), or None (``merge.py``)."""
