"""A partition task: one agent over partition p of its inputs, and its supervisor.

The task owns the inboxes of every assigned input partition numbered p (the agent's topics,
merged, and its repartition/through topics), runs ``concurrency`` instances of the agent and,
for each ``group_by``/``through`` an instance uses, a pump that forwards the upstream chain to
that topic.

The supervisor is the one place with a broad ``except``: when an instance raises, the records
it holds (handed out, not finished) go to the dead-letter topic with the error, and the
instance starts again on the next record; with ``on_error="stop"`` the worker stops instead.

An instance that raises while it holds no record (before its first read, or between records)
has nothing to dead-letter and would fail the same way at once: it starts again after a
back-off (``BACKOFF_FIRST_S``, doubling up to ``BACKOFF_MAX_S``), logged once per back-off,
and the task reports the failure (``failing``: the worker's ``/health`` is 503 meanwhile)
until a record is handed out again. After ``app.max_agent_failures`` such failures in a row
with no record handed out in between, the worker fails with ``AgentFailedError``. The
back-off ends at once when the task stops: it never holds up a shutdown.

A task reaches the worker that runs it only through its ``TaskContext`` (``context.py``):
the clock, the commit gate, the producer of its transaction, the sender, the sinks, replies,
dead letters, the hop topics and failing the worker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from streamkit._core.errors import StreamkitError
from streamkit._core.types import TopicPartition
from streamkit._core.waiting import sleep_unless
from streamkit.agents.agent import Agent
from streamkit.agents.channel import ChannelSource
from streamkit.agents.replies import reply_address
from streamkit.agents.stream import KeyFn, PartitionSet, Source, Stream, StreamEnd
from streamkit.runtime.alignment import Aligner, Member
from streamkit.runtime.context import TaskContext
from streamkit.runtime.inbox import Inbox, RootSource, current_event
from streamkit.runtime.merge import InputMerge
from streamkit.runtime.transactions import in_task
from streamkit.topics.topic import Topic
from streamkit.transport.base import ConsumerRecord

logger = logging.getLogger(__name__)
STOP_GRACE_S = 0.5
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 30.0


class AgentFailedError(StreamkitError):
    """An agent kept failing without processing a record (``App(max_agent_failures=...)``)."""

    retriable = False


@dataclass(frozen=True, slots=True)
class AgentFailure:
    """The last failure of a task outside a record, while no record was handed out since."""

    error: str
    failures: int  # in a row, without a record handed out in between
    retry_in_s: float


class PartitionTask:
    def __init__(self, context: TaskContext, agent: Agent, partition: int) -> None:
        self.context = context
        self.agent = agent
        self.partition = partition
        self.wakeup = asyncio.Event()
        self.inboxes: dict[TopicPartition, Inbox] = {}
        self._stopping = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._sources: list[RootSource] = []
        # Per instance: the sources its group_by/through hops read, in the order the agent
        # opened them, and how many the current run has opened. A restarted instance gets its
        # hops back instead of new pumps, so no record a pump holds is dropped or duplicated.
        self._hops: dict[int, list[Source]] = {}
        self._hop_cursor: dict[int, int] = {}
        self._stopped = asyncio.Event()  # ends a back-off at once
        # Failures outside a record: how many in a row, and where the inboxes' hand-outs
        # stood at the last one (when they moved since, the agent made progress).
        self._failure: AgentFailure | None = None
        self._failure_mark: tuple[int | None, ...] = ()
        # Event-time alignment (``alignment.py``): the stream time the task starts from (the
        # last commit's, set before ``start``) and its place in its aligner.
        self.restored_stream_time: int | None = None
        self.member: Member | None = None
        self._aligner: Aligner | None = None

    def __repr__(self) -> str:
        return f"<PartitionTask {self.agent.name}[{self.partition}]>"

    def add_inbox(self, tp: TopicPartition, topic: Topic) -> Inbox:
        inbox = Inbox(tp, topic, self.wakeup)
        self.inboxes[tp] = inbox
        plan = self.context.merge_for(self.agent) if self.agent.concurrency == 1 else None
        if plan is not None and tp.topic in plan.writers:
            inbox.on_put = plan.stamps.count_arrivals  # from its first fetch on
        return inbox

    def start(self) -> None:
        aligned = self.context.aligner_for(self.agent) if self.agent.concurrency == 1 else None
        if aligned is not None:
            aligner, rank = aligned
            inboxes = [
                self.inboxes[tp] for tp in (TopicPartition(t.name, self.partition) for t in self.agent.topics)
                if tp in self.inboxes
            ]
            self._aligner = aligner
            self.member = aligner.join(f"{self.agent.name}[{self.partition}]", (rank, self.partition), inboxes, self.wakeup)
            self.member.stream_time = self.restored_stream_time
        for i in range(self.agent.concurrency):
            self._spawn(self._supervise(i), f"{self.agent.name}[{self.partition}]#{i}")

    def _spawn(self, coro: Awaitable[None], name: str) -> None:
        # Exactly-once: what the coroutine sends goes into this task's transaction.
        task: asyncio.Task[None] = asyncio.ensure_future(
            in_task(functools.partial(self.context.task_producer, self.partition), coro)
        )
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        """An instance or pump ended. Raising past the supervisor (a dead letter that could
        not be sent) leaves this partition unprocessed: the worker fails, with the traceback."""
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("%s failed, stopping the worker", task.get_name(), exc_info=exc)
            self.context.fail(exc)

    async def stop(self) -> None:
        """Let the instances finish the record in hand (briefly), then cancel them. Their
        sources stay attached until ``close``, so commit positions still see what they hold."""
        self._stopping = True
        self._stopped.set()
        if self.member is not None and self._aligner is not None:
            self._aligner.leave(self.member)  # it holds nobody back from now on
        for source in self._sources:
            source.stopping = True
        self.wakeup.set()
        tasks = list(self._tasks)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=STOP_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def close(self) -> None:
        """Forget the sources, after the worker committed what they finished: until then,
        what they took and did not finish holds the commit positions back."""
        for source in self._sources:
            source.detach()
        self._sources.clear()

    def _progress_mark(self) -> tuple[int | None, ...]:
        return tuple(inbox.handed_next for inbox in self.inboxes.values())

    @property
    def failing(self) -> AgentFailure | None:
        """The failure this task is backing off from, if no record was handed out since."""
        failure = self._failure
        if failure is None or self._progress_mark() != self._failure_mark:
            return None
        return failure

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def busy(self) -> bool:
        """Running, with a record handed out and not finished (an exactly-once commit waits)."""
        return not self._stopping and any(source.busy for source in self._sources)

    @property
    def torn(self) -> bool:
        """Stopped while an instance held a record unfinished: part of its outputs may be
        sent, so an exactly-once commit must not seal them (it aborts instead)."""
        return self._stopping and any(source.busy for source in self._sources)

    def commit_positions(self) -> dict[TopicPartition, int]:
        out = {}
        for tp, inbox in self.inboxes.items():
            position = inbox.commit_position()
            if position is not None:
                out[tp] = position
        return out

    # -- sources ---------------------------------------------------------------------------

    def _source(self, instance: int, tps: list[TopicPartition]) -> RootSource:
        source = RootSource(
            [self.inboxes[tp] for tp in tps if tp in self.inboxes],
            self.wakeup,
            self._dead_letter,
            functools.partial(self._open_through, instance),
            self.context.clock,
            self.context.gate,
        )
        source.stopping = self._stopping
        self._sources.append(source)
        return source

    async def _dead_letter(self, tp: TopicPartition, record: ConsumerRecord, error: BaseException) -> None:
        await self.context.dead_letter(self.agent, tp, record, error)

    def _open_through(
        self, instance: int, upstream: Stream, topic: Topic | None, key: KeyFn | None, name: str
    ) -> Source:
        hops = self._hops.setdefault(instance, [])
        cursor = self._hop_cursor.get(instance, 0)
        self._hop_cursor[instance] = cursor + 1
        if cursor < len(hops):
            return hops[cursor]
        target = self.context.hop_topic(self.agent, topic, name)
        self._spawn(self._pump(upstream, target, key), f"{self.agent.name}[{self.partition}]>{target.name}")
        source = self._source(instance, [TopicPartition(target.name, self.partition)])
        hops.append(source)
        return source

    async def _pump(self, upstream: Stream, target: Topic, key: KeyFn | None) -> None:
        """Forward upstream events to ``target``; same partition number when not re-keyed.
        Per record, the synchronous paths when they can: ``get_nowait`` and ``send_nowait``."""
        source = upstream._source
        get = upstream._get
        nowait = upstream._nowait
        partition_count_of = self.context.partition_count_of
        same_partition = key is None and partition_count_of(target) == partition_count_of(self.agent.topics[0])
        partition = self.partition if same_partition else None
        runtime_sender = self.context.sender
        while True:
            source.ack()
            try:
                event = nowait() if nowait is not None else None
                if event is None:
                    event = await get(None)
            except StreamEnd:
                return
            except Exception as exc:
                if not await self._handle_failure(source, exc):
                    return
                continue
            assert event is not None
            try:
                new_key = event.key if key is None else key(event.value)
                sender = runtime_sender()
                if sender is None:  # the worker stopped: Topic.send says so
                    await target.send(key=new_key, value=event.value, timestamp=event.timestamp)
                    continue
                wait = sender.send_nowait(target, new_key, event.value, event.timestamp, partition, event.headers)
                if wait is not None:
                    await wait
            except Exception as exc:
                if not await self._handle_failure(source, exc):
                    return

    # -- supervision -----------------------------------------------------------------------

    async def _supervise(self, instance: int) -> None:
        agent = self.agent
        input_tps = [TopicPartition(t.name, self.partition) for t in agent.topics]
        source = self._source(instance, input_tps)
        if instance == 0 and self.member is not None and self._aligner is not None:
            source.align(self._aligner, self.member)
        plan = self.context.merge_for(agent) if agent.concurrency == 1 else None
        if plan is not None:
            merged = [self.inboxes[tp] for tp in input_tps if tp in self.inboxes]
            source.merge(InputMerge(plan, merged, f"{agent.name}[{self.partition}]"))
        partitions = PartitionSet(tp for tp in input_tps if tp in self.inboxes)
        while not self._stopping:
            self._hop_cursor[instance] = 0
            try:
                await run_agent(self.context, agent, Stream(source, partitions=partitions))
                return
            except Exception as exc:
                # The agent's body reads the last hop it opened (or the root): the record in
                # its hands is pending there. Records pumps hold are the pumps' business.
                hops = self._hops.get(instance)
                culprit = hops[-1] if hops else source
                if not await self._handle_failure(culprit, exc):
                    return

    async def _handle_failure(self, source: Source, exc: BaseException) -> bool:
        """Apply the error policy; True to go on with the next record."""
        agent = self.agent
        if agent.app.on_error == "stop":
            logger.error("agent %s failed, stopping the worker: %r", agent.name, exc)
            self.context.fail(exc)
            return False
        held = source.pending if isinstance(source, RootSource) else []
        if not held:
            source.ack()
            return await self._back_off(exc)
        for inbox, record in held:
            await self.context.dead_letter(agent, inbox.tp, record, exc)
        source.ack()
        return True

    async def _back_off(self, exc: BaseException) -> bool:
        """A failure with no record in hand: wait before the next try (False: give up)."""
        agent = self.agent
        mark = self._progress_mark()
        previous = self._failure
        failures = 1 if previous is None or mark != self._failure_mark else previous.failures + 1
        self._failure_mark = mark
        limit = agent.app.max_agent_failures
        where = f"{agent.name}[{self.partition}]"
        if failures >= limit:
            logger.error(
                "agent %s failed %d times in a row without processing a record, stopping the worker: %r",
                where, failures, exc,
            )
            self.context.fail(failed_too_often(where, failures, limit, exc, "a record"))
            return False
        delay = backoff_delay(failures)
        self._failure = AgentFailure(f"{type(exc).__name__}: {exc}", failures, delay)
        logger.error(
            "agent %s failed outside a record (%d in a row), starting it again in %.1f s: %r",
            where, failures, delay, exc, exc_info=exc if failures == 1 else None,
        )
        await sleep_unless(self._stopped, delay)
        return not self._stopping


def backoff_delay(failures: int) -> float:
    """Seconds to wait after ``failures`` failures in a row: doubling from the first, capped."""
    return float(min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (failures - 1)))


def failed_too_often(where: str, failures: int, limit: int, exc: BaseException, unit: str) -> AgentFailedError:
    """The error that stops the worker when an agent failed ``limit`` times before ``unit``."""
    error = AgentFailedError(
        f"agent {where} failed {failures} times in a row without processing {unit} "
        f"(max_agent_failures={limit}); last error: {type(exc).__name__}: {exc}"
    )
    error.__cause__ = exc
    return error


async def run_agent(context: TaskContext, agent: Agent, stream: Stream) -> None:
    """One instance of ``agent`` over ``stream``: its yielded values answer RPC requests and
    go to its sinks."""
    result: Any = agent(stream)
    if not agent.is_generator:
        await result
        return
    forward = context.forwarder(agent)
    get_event = current_event.get
    async for value in result:
        event = get_event()
        if event is not None and event.headers:
            address = reply_address(event.headers)
            if address is not None:
                await context.reply(event.key, value, *address)
        wait = forward(value)
        if wait is not None:
            await wait


class ChannelTask:
    """An agent over an in-memory channel (see the module docstring)."""

    def __init__(self, context: TaskContext, agent: Agent) -> None:
        assert agent.in_channel is not None
        self.context = context
        self.agent = agent
        self.subscription = agent.in_channel.subscribe()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._stopped = asyncio.Event()
        self.dropped = 0  # events whose processing raised

    def __repr__(self) -> str:
        return f"<ChannelTask {self.agent.name}>"

    def start(self) -> None:
        for i in range(self.agent.concurrency):
            task: asyncio.Task[None] = asyncio.ensure_future(self._supervise())
            task.set_name(f"{self.agent.name}[channel]#{i}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        """End the streams (the instances finish what is queued, briefly), then cancel them."""
        self._stopping = True
        self._stopped.set()
        self.subscription.close()
        tasks = list(self._tasks)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=STOP_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    async def _supervise(self) -> None:
        agent = self.agent
        failures = 0
        while not self._stopping:
            source = ChannelSource(self.subscription, self.context.clock)
            try:
                await run_agent(self.context, agent, Stream(source))
                return
            except Exception as exc:
                if agent.app.on_error == "stop":
                    logger.error("agent %s failed, stopping the worker: %r", agent.name, exc)
                    self.context.fail(exc)
                    return
                if source.taken:  # it was processing an event when it raised
                    self.dropped += 1
                    logger.error(
                        "agent %s failed on a channel event, which is dropped (a channel keeps nothing): %r",
                        agent.name, exc, exc_info=exc,
                    )
                    failures = 0
                    continue
                failures += 1  # before its first event: it would fail the same way at once
                if failures >= agent.app.max_agent_failures:
                    self.context.fail(failed_too_often(agent.name, failures, agent.app.max_agent_failures, exc, "an event"))
                    return
                delay = backoff_delay(failures)
                logger.error("agent %s failed outside an event, starting it again in %.1f s: %r", agent.name, delay, exc)
                await sleep_unless(self._stopped, delay)
