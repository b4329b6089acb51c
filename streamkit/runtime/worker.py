"""``Worker``: runs an app against a log through a transport.

Lifecycle: ``start`` opens the transport, probes the agents' topologies and creates the
topics, subscribes one consumer (group = app id) to every input and starts the
loops; ``stop`` (or SIGTERM/Ctrl-C in the CLI) stops the tasks, commits what was processed and
closes, waiting for a remote log no longer than ``shutdown_timeout`` (``shutdown.py``). The
worker wires the parts together and owns the start and stop sequences, the commit loop, dead
letters, replies and its state; the parts live beside it:

* ``context.py``: what a partition task sees of the worker (``TaskContext``), built here;
* ``rebalance.py``: the consumer's rebalance listener (tasks, the tables' partitions and the
  exactly-once producers following the assignment; a lost task);
* ``fetcher.py``: the fetch loop, the consumer into the tasks' inboxes with back-pressure;
* ``status.py``: the worker's counters and report (lag, settle, failing agents, stalled
  partitions, the guarantee's transactions);
* ``apptasks.py``: the app's own tasks and services, started last and stopped first;
* ``topology.py``: the probed hops of each agent, the topics created for them, partition
  counts and their check against the declarations;
* ``assignment.py``: which partition tasks exist for which partitions, creating, stopping and
  closing them on a rebalance;
* ``commits.py``: the commit protocol (snapshot positions, flush the producer, commit; the
  failure rule; exactly-once: per task one transaction per commit interval, a task lost on
  an abort: ``transactions.py``);
* ``tasks.py``: one agent over one partition number, and its supervisor;
* ``outputs.py``: where yielded values go (the sinks);
* ``replies.py``: the reply consumer of agent RPC (``agent.ask``), on ``app.replies``.

Agents over in-memory channels run as ``ChannelTask``s, started before the consumer (a
topic agent may send to a channel from its first record) and stopped after the partition
tasks (which may still send to them).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.types import TopicPartition
from streamkit.agents.agent import Agent
from streamkit.agents.replies import encode_response, reply_topic
from streamkit.app.application import App
from streamkit.app.services import Service
from streamkit.runtime import status
from streamkit.runtime.alignment import Aligner, Member, StreamTimes, alignment_groups, keeps_time
from streamkit.runtime.apptasks import AppTasks
from streamkit.runtime.assignment import Assignment
from streamkit.runtime.commits import Committer
from streamkit.runtime.context import TaskContext
from streamkit.runtime.fetcher import Fetcher
from streamkit.runtime.inbox import Inbox
from streamkit.runtime.merge import MergePlan, Stamps, stamped_forwarder
from streamkit.runtime.outputs import Forward, forwarder
from streamkit.runtime.purge import Purger
from streamkit.runtime.rebalance import Rebalancer, TablesFollowPartitions, TaskControl
from streamkit.runtime.replies import ReplyConsumer
from streamkit.runtime.sender import RuntimeSender
from streamkit.runtime.shutdown import StopDeadline
from streamkit.runtime.stages import install_plans
from streamkit.runtime.state import StateManager
from streamkit.runtime.status import WorkerStats
from streamkit.runtime.tasks import ChannelTask, PartitionTask
from streamkit.runtime.timers import TimerRunner
from streamkit.runtime.topology import Topology
from streamkit.runtime.transactions import (
    RoutingProducer,
    TaskProducers,
    transaction_timeout_ms,
    worker_transactional_id,
)
from streamkit.topics.topic import Topic
from streamkit.transport.base import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Consumer,
    ConsumerRecord,
    LogClient,
    Producer,
    TransportError,
)
from streamkit.transport.connect import open_log_client
from streamkit.transport.options import ClientOptions
from streamkit.transport.placement import GroupInfo, MemberInfo

logger = logging.getLogger(__name__)
# A stop while the log is known not to answer waits for it this long at most (not the whole
# ``shutdown_timeout``).
UNAVAILABLE_STOP_S = 5.0


class Worker:
    """Runs ``app``. Use ``async with Worker(app) as w: await w.wait()``, or the CLI."""

    def __init__(
        self,
        app: App,
        *,
        broker: str | None = None,
        client: LogClient | None = None,
        clock: Clock = SYSTEM_CLOCK,
        run_timers: bool = True,
        state_dir: str | None = None,
        advertised_url: str | None = None,
        options: ClientOptions | None = None,
    ) -> None:
        self.app = app
        install_plans(app)  # the DSL's plans, compiled into agents
        # ``options``: the Kafka client settings when not the app's own (``streamkit worker --command-config``).
        self.client = client or open_log_client(
            broker or app.broker, owner=True, options=options or app.conf.client_options()
        )
        self.clock = clock
        self._run_timers = run_timers
        self.stats = WorkerStats()
        self.task_assignment = Assignment(
            lambda: self.app.agents.values(),
            self.agent_inputs,
            lambda agent, partition: PartitionTask(self.context, agent, partition),
            self._resume,
        )
        # The URL of this worker's HTTP API, told to the group so others route queries here.
        self.advertised_url = advertised_url
        self.state_manager = StateManager(
            list(app.tables.values()), self.client, clock, state_dir or os.path.join(".streamkit-state", app.id),
            isolation_level=READ_COMMITTED if app.exactly_once else READ_UNCOMMITTED,
        )
        # First: a commit of the new tasks' positions carries the stream times they restore.
        self.task_assignment.listeners.append(StreamTimes(lambda: self._consumer))
        self.task_assignment.listeners.append(
            TablesFollowPartitions(self.state_manager, self.group_info, self.assignment)
        )
        self.committer = Committer(
            self.task_assignment.inboxes, self.fail, lambda: self._failure is not None, self.state_manager
        )
        self.committer.metadata = lambda positions: StreamTimes.metadata(self.tasks.values(), positions)
        self.gate = self.committer.gate  # closed while an exactly-once commit seals (``commits.py``)
        # Exactly-once: made here (no I/O), so a transport that does not offer it refuses at
        # once.
        self._transactional = (
            self.client.transactional_producer(worker_transactional_id(app.id, self.state_manager.state_dir),
                                               timeout_ms=transaction_timeout_ms(app.commit_interval_ms))
            if app.exactly_once
            else None
        )
        self.task_producers = (
            TaskProducers(self.client, app.id, transaction_timeout_ms(app.commit_interval_ms)) if app.exactly_once else None
        )
        self.topology = Topology(app, self.client, self.state_manager)
        self.purger = Purger(
            self.client, lambda: {name for name, topic in app.topics.items() if topic.repartition},
            app.conf.repartition_purge_interval,
        )
        self.rebalancer = Rebalancer(
            app, self.task_assignment, self.committer, self.state_manager, self.task_producers, self.commit, self.fail
        )
        # What the partition and channel tasks see of this worker (``context.py``).
        self.context = TaskContext(
            clock=clock,
            gate=self.gate,
            fail=self.fail,
            # Looked up at each call, so a replaced ``Worker.dead_letter`` is what the tasks use
            # (the tests make a dead-letter topic that cannot be written so).
            dead_letter=lambda agent, tp, record, error: self.dead_letter(agent, tp, record, error),
            task_producer=self.task_producer,
            sender=self._current_sender,
            forwarder=self.forwarder,
            reply=self.reply,
            hop_topic=self.topology.hop_topic,
            partition_count_of=self.topology.partition_count_of,
            aligner_for=lambda agent: self._aligners.get(agent.name),
            merge_for=lambda agent: self._merges.get(agent.name),
        )
        # Event-time alignment (``alignment.py``): agent name -> its group's aligner and rank;
        # the readers merging inputs that aligned tasks write, and those writers (``merge.py``).
        self._aligners: dict[str, tuple[Aligner, int]] = {}
        self._merges: dict[str, MergePlan] = {}
        self._stamped: dict[str, Stamps] = {}
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._fetcher: Fetcher | None = None
        self._sender: RuntimeSender | None = None
        self._loops: list[asyncio.Task[Any]] = []
        self._stop = asyncio.Event()
        self._failure: BaseException | None = None
        self._started = False
        self._closed = False
        self.channel_tasks: list[ChannelTask] = []
        self._reply_topics: dict[str, Topic] = {}
        self.timers = TimerRunner(
            app.timers, clock, app=app, is_leader=self.is_leader,
            crontabs=[(job, app.cron_schedule(job)) for job in app.crontabs],
        )
        self.app_tasks = AppTasks(app, self.fail)
        self.services: list[Service] = self.app_tasks.services  # the app's, started after its tasks
        # Set by whoever starts the worker while it waits for its log before ``start`` (the
        # CLI, while another process holds the data directory without serving it).
        self.log_waiting: str | None = None

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- start -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.app._run_began()
        producer: Producer
        if self._transactional is not None and self.task_producers is not None:
            producer = RoutingProducer(self._transactional, self.task_producers)
            self.committer.tasks = TaskControl(self.task_assignment, self.rebalancer.lose_task)
            self.committer.task_producers = self.task_producers
            self.committer.default = self._transactional
            self.committer.group_id = self.app.id
        else:
            producer = self.client.producer()
            self.committer.rewind = self.rebalancer.lose_task
        await self.client.start()
        await producer.start()
        self._producer = producer
        self._sender = RuntimeSender(producer, self.clock, self.topology.partitions_for)
        # Before the sender is installed: the probe's sends are discarded (``probe.py``).
        await self.topology.probe()
        self.topology.sender = self._sender
        self.app.sender = self._sender
        await self.topology.create_topics()
        self._align()
        self.app.replies = ReplyConsumer(self.app, self.client)
        if self.app.conf.reply_create_topic:
            await self.app.replies.listen(self.app.reply_to)
        for agent in self.app.agents.values():
            if agent.in_channel is not None:
                channel_task = ChannelTask(self.context, agent)
                self.channel_tasks.append(channel_task)
                channel_task.start()
        inputs = self.input_topics()
        if inputs:
            if self.app.exactly_once:
                consumer = self.client.consumer(
                    self.app.id, auto_offset_reset=self.app.auto_offset_reset, isolation_level=READ_COMMITTED
                )
            else:
                consumer = self.client.consumer(self.app.id, auto_offset_reset=self.app.auto_offset_reset)
            consumer.subscribe(inputs, self.rebalancer)
            standby = max((t.standby_replicas for t in self.app.tables.values()), default=0)
            # Faust's canonical_url: the address others reach this worker's HTTP API at (a
            # proxy's, a container's), when it is not the one it serves on.
            consumer.advertise(MemberInfo(self.app.conf.canonical_url or self.advertised_url, standby))
            self._consumer = self.rebalancer.consumer = consumer
            self._fetcher = Fetcher(consumer, self.task_assignment.inboxes, self.stats, self._stop)
            self.committer.bind(producer, consumer)
            await consumer.start()
            self._spawn(self._fetcher.run(), "fetch")
            self._spawn(self._commit_loop(), "commit")
        if self._run_timers:
            self._spawn(self.timers.run_forever(), "timers")
        # Faust's order: the app's tasks, then its services (``apptasks.py``).
        await self.app_tasks.start(self._spawn)

    def _align(self) -> None:
        """One aligner per group of agents whose tasks' outputs meet downstream."""
        drift = self.app.conf.max_task_drift_ms
        if drift is None:
            return
        agents = [a for a in self.app.agents.values() if a.in_channel is None]
        stages = {stage.name: stage for plan in self.app.plans for stage in plan.stages}

        def writes(agent: Agent) -> set[str]:
            names = {sink.name for sink in agent.sinks if isinstance(sink, Topic)}
            stage = stages.get(agent.name)
            if stage is not None:
                names.update(topic.name for topic in stage.writes)
            for hop in self.topology.hops.get(agent.name, []):
                names.add(self.topology.hop_topic(agent, hop.topic, hop.name).name)
            return names

        def reads(agent: Agent) -> set[str]:
            """The inputs of an agent whose answers depend on the order of its records: an
            agent of the app's own (its code may keep any state), or a stage ending in a window,
            a join, or a fold other than a count or a sum. A stage forwarding records (the
            topic after a table's stream) keeps no stream time: its writers need no pacing."""
            stage = stages.get(agent.name)
            if stage is not None and not keeps_time(stage.output):
                return set()
            return set(self.agent_inputs(agent))

        for group in alignment_groups(agents, reads, writes):
            aligner = Aligner(
                "+".join(a.name for a in group),
                drift_ms=int(drift),
                idle_ms=int(self.app.conf.max_task_idle_ms),
                lag_of=self._fetch_lag,
                flush=self._flush_task_producer if self.app.exactly_once else None,
            )
            for rank, agent in enumerate(group):
                self._aligners[agent.name] = (aligner, rank)
        self._merge_inputs(agents, reads, writes)

    def _merge_inputs(
        self, agents: list[Agent], reads: Callable[[Agent], set[str]], writes: Callable[[Agent], set[str]]
    ) -> None:
        """A reader of several topics that aligned writers of one group write (a join after a
        re-key) takes their records in the writers' order (``merge.py``)."""
        stamps: dict[int, Stamps] = {}
        aligned = [a for a in agents if a.name in self._aligners and a.concurrency == 1]
        for reader in agents:
            inputs = reads(reader)
            if len(inputs) < 2 or reader.concurrency != 1:
                continue
            found = {topic: [a for a in aligned if topic in writes(a)] for topic in sorted(inputs)}
            groups = {id(self._aligners[a.name][0]) for found_writers in found.values() for a in found_writers}
            if any(not found_writers for found_writers in found.values()) or len(groups) != 1:
                continue
            aligner = self._aligners[next(iter(found.values()))[0].name][0]
            group_stamps = stamps.setdefault(id(aligner), Stamps())
            group_stamps.topics.update(inputs)
            self._merges[reader.name] = MergePlan(
                aligner, group_stamps, {t: frozenset(self._aligners[a.name][1] for a in ws) for t, ws in found.items()}
            )
            for found_writers in found.values():
                for writer in found_writers:
                    self._stamped[writer.name] = group_stamps

    async def _flush_task_producer(self, member: Member) -> None:
        """Exactly-once: what an aligned task sent goes to the log before another task sends."""
        producer = self.task_producer(member.order[1])
        if producer is not None:
            await producer.flush()

    def _fetch_lag(self, tp: TopicPartition) -> int | None:
        """Records of ``tp`` in the log past the fetch position (None: not known yet)."""
        consumer = self._consumer
        if consumer is None:
            return None
        hw, position = consumer.highwater(tp), consumer.position(tp)
        return None if hw is None or position is None else max(0, hw - position)

    def alignment(self) -> list[dict[str, Any]]:
        """Each aligned group: its tasks' stream times and states, and the tasks merging what
        they write (a join after a re-key: ``readers``) (``/status``)."""
        seen: dict[int, Aligner] = {}
        for aligner, _rank in self._aligners.values():
            seen.setdefault(id(aligner), aligner)
        out = []
        for aligner in seen.values():
            group: dict[str, Any] = {"agents": aligner.name, **aligner.status()}
            joins = [r for plan in self._merges.values() if plan.aligner is aligner for r in plan.status()]
            if joins:
                group["readers"] = joins  # the tasks merging the group's outputs (``merge.py``)
            out.append(group)
        return out

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        task.set_name(f"streamkit:{name}")
        task.add_done_callback(self._loop_done)
        self._loops.append(task)
        return task

    def _loop_done(self, task: asyncio.Task[Any]) -> None:
        """A background loop ended: unless cancelled by ``stop``, the worker cannot go on
        (nothing would fetch, commit or fire any more); an exception fails it, logged with
        its traceback."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("%s failed, stopping the worker", task.get_name(), exc_info=exc)
            self.fail(exc)

    @property
    def runtime_sender(self) -> RuntimeSender | None:
        """The sender of the running worker (None before start and after stop)."""
        return self._current_sender()

    def _current_sender(self) -> RuntimeSender | None:
        return self._sender if self.app.sender is not None else None

    # -- topology (``topology.py``) ----------------------------------------------------------

    @property
    def partition_mismatches(self) -> dict[str, str]:
        """Topics found with another partition count than declared: name -> what was said."""
        return self.topology.partition_mismatches

    @property
    def replication_mismatches(self) -> dict[str, str]:
        """Topics found with another replication factor than ``topic_replication_factor``:
        name -> what was said (a Kafka log's; the embedded log keeps one copy)."""
        found = getattr(self.client, "replication_mismatches", None)
        return dict(found) if isinstance(found, dict) else {}

    def partition_count_of(self, topic: Topic) -> int | None:
        return self.topology.partition_count_of(topic)

    def hop_topic(self, agent: Agent, topic: Topic | None, name: str) -> Topic:
        """The topic of one ``through``/``group_by`` hop of ``agent``."""
        return self.topology.hop_topic(agent, topic, name)

    def input_topics(self) -> list[str]:
        return self.topology.input_topics()

    def agent_inputs(self, agent: Agent) -> dict[str, Topic]:
        return self.topology.agent_inputs(agent)

    # -- rebalance (``assignment.py``, ``rebalance.py``) ------------------------------------

    @property
    def tasks(self) -> dict[tuple[str, int], PartitionTask]:
        """The partition tasks, by (agent name, partition number)."""
        return self.task_assignment.tasks

    @property
    def _inboxes(self) -> dict[TopicPartition, list[Inbox]]:
        return self.task_assignment.inboxes

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.rebalancer.on_partitions_assigned(assigned)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.rebalancer.on_partitions_revoked(revoked)

    async def lose_task(self, partition: int) -> None:
        """Exactly-once: task ``partition``'s transaction did not commit (``rebalance.py``)."""
        await self.rebalancer.lose_task(partition)

    # -- loops -----------------------------------------------------------------------------

    def _resume(self, tp: TopicPartition) -> None:
        if self._fetcher is not None:
            self._fetcher.resume(tp)

    async def _commit_loop(self) -> None:
        interval = self.app.commit_interval_ms / 1000
        while not self._stop.is_set():
            await asyncio.sleep(interval)
            try:
                await self.commit()
            except TransportError as exc:
                logger.warning("commit failed, will retry: %s", exc)

    async def commit(self, only: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Commit every processed position whose outputs are acknowledged; returns them
        (the protocol: ``commits.py``)."""
        before = self.committer.commits
        positions = await self.committer.commit(only)
        self.stats.commits += self.committer.commits - before
        if positions:
            self.purger.after_commit(self.committer.committed)
        return positions

    def task_producer(self, partition: int) -> Producer | None:
        """Exactly-once: the transactional producer of task ``partition`` (``transactions.py``)."""
        return self.task_producers.get(partition) if self.task_producers is not None else None

    def guarantee_status(self) -> dict[str, Any]:
        """The processing guarantee and, under exactly-once, its transactions (``/status``)."""
        return status.guarantee_status(self.app, self.committer)

    # -- outputs ---------------------------------------------------------------------------

    def forwarder(self, agent: Agent) -> Forward:
        """What sends each value ``agent`` yields to its sinks (``outputs.py``); an aligned
        writer of a merged topic stamps its records (``merge.py``)."""
        sinks = self.topology.topic_sinks.get(agent.name)
        stamps = self._stamped.get(agent.name)
        if stamps is not None and sinks is not None and len(sinks) == 1 and sinks[0].name in stamps.topics:
            aligner, rank = self._aligners[agent.name]
            if self._sender is not None:
                return stamped_forwarder(self.app, agent, sinks[0], self._sender, aligner, rank, stamps)
        return forwarder(self.app, agent, sinks, self._sender)

    async def reply(self, key: Any, value: Any, reply_to: str, correlation_id: str) -> None:
        """Answer an RPC request: ``value`` to ``reply_to`` (``replies.py``); the commit of the
        request waits for it, as for every send made while processing a record."""
        sender = self._sender
        assert sender is not None  # set by start, before any task runs
        topic = self._reply_topics.get(reply_to)
        if topic is None:
            topic = self._reply_topics[reply_to] = reply_topic(self.app, reply_to)
        await sender.send(
            topic, key=None, value=encode_response(key, value, correlation_id),
            headers=None, timestamp_ms=None, partition=None,
        )

    async def dead_letter(
        self, agent: Agent, tp: TopicPartition, record: ConsumerRecord, error: BaseException
    ) -> None:
        """Send ``record`` as it was read to ``<app>-dlq`` with the error and its position."""
        self.stats.dead_lettered += 1
        logger.warning(
            "agent %s: record %s-%s@%s to %s: %s",
            agent.name, tp.topic, tp.partition, record.offset, self.app.dlq_topic.name, error,
        )
        headers = [*list(record.headers), ("streamkit.error", f"{type(error).__name__}: {error}".encode()), ("streamkit.agent", agent.name.encode()), ("streamkit.source.topic", tp.topic.encode()), ("streamkit.source.partition", str(tp.partition).encode()), ("streamkit.source.offset", str(record.offset).encode())]
        await self.app.dlq_topic.send(
            key=record.key, value=record.value, headers=headers, timestamp=record.timestamp
        )

    # -- stop ------------------------------------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._stop.set()

    def clock_advanced(self) -> None:
        """Wake the agents' sources: a manual clock moved, timeouts on it may have passed."""
        for task in self.tasks.values():
            task.wakeup.set()

    def request_stop(self) -> None:
        self._stop.set()

    async def wait(self) -> None:
        """Until ``request_stop``/``fail``; raises the failure that stopped the worker."""
        await self._stop.wait()
        if self._failure is not None:
            raise self._failure

    async def stop(self) -> None:
        if self._closed or not self._started:
            return
        self._closed = True
        self._stop.set()
        self.rebalancer.stop()  # a task waiting to be opened again is not
        # Tell the app's tasks (``app.should_stop``, ``app.sleep``), stop its services (last
        # started, first stopped) while the producer still runs, give tasks that watch
        # ``should_stop`` a moment to end by themselves, then cancel what still runs.
        self.app._run_stopping()
        await self.app_tasks.stop()
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        # Every wait for the log from here on ends by one deadline (``shutdown.py``).
        timeout_s = float(self.app.conf.shutdown_timeout)
        if self.log_unavailable is not None:
            # Known not to answer (an outage): a stop waits for it no longer than a moment.
            timeout_s = min(timeout_s, UNAVAILABLE_STOP_S)
        deadline = StopDeadline(timeout_s, self.client.url, bounded=self.client.url.startswith("kafka://"))
        try:
            if self.tasks:
                held = {tp for t in self.tasks.values() for tp in t.inboxes}
                what = (
                    f"committing the transactions of {len({tp.partition for tp in held})} tasks"
                    if self.committer.exactly_once
                    else f"committing offsets of {len(held)} partitions"
                )
                await deadline.run(what, self.on_partitions_revoked(held))
            await asyncio.gather(*(t.stop() for t in self.channel_tasks))
        finally:
            if self.app.replies is not None:
                await deadline.run("closing the reply consumer", self.app.replies.aclose())
                self.app.replies = None
            if self._consumer is not None:
                await deadline.run(f"leaving group {self.app.id!r}", self._consumer.aclose())
            await self.state_manager.aclose()
            if self._producer is not None:
                await deadline.run(
                    "aborting the open transactions" if self.committer.exactly_once else "flushing the producer",
                    self._producer.aclose(),
                )
            self.app.sender = None
            for aligner, _rank in self._aligners.values():
                aligner.close()
            await deadline.run("ending the repartition purge", self.purger.aclose())
            await deadline.run("closing the admin client", self.client.aclose())
            deadline.report()

    # -- introspection ---------------------------------------------------------------------

    @property
    def state(self) -> str:
        """"starting", "running", "waiting" (for its log: ``log_unavailable``), "failed" or
        "stopped"."""
        if self._failure is not None:
            return "failed"
        if self._closed or self._stop.is_set():
            return "stopped"
        if self.log_unavailable is not None:
            return "waiting"
        return "running" if self._started else "starting"

    @property
    def log_unavailable(self) -> str | None:
        """Why the worker has no log now, when it has none: no broker of its Kafka cluster
        answers (``transport/kafka_outage.py``), the data directory it joined as a Kafka client
        lost its owner and nobody serves it yet (``transport/attached.py``), or it waits to
        start while another process holds the directory (``log_waiting``)."""
        reason = getattr(self.client, "unavailable_reason", None)
        if isinstance(reason, str):
            return reason
        return None if self._started else self.log_waiting

    def failing_agents(self) -> list[dict[str, Any]]:
        """The partition tasks backing off after failures outside a record (``tasks.py``)."""
        return status.failing_agents(self.tasks.values())

    def stalled(self) -> dict[TopicPartition, str]:
        """Assigned input partitions the log does not serve now (deleted topic, lost
        partition), with the reason: their tasks cannot progress."""
        return status.stalled(self._consumer, self._inboxes)

    def reopening(self) -> dict[int, str]:
        """Exactly-once: the tasks, by partition number, whose opening failed for a transport
        error and is being tried again (``rebalance.py``), with why the last try failed."""
        return dict(self.rebalancer.reopening)

    @property
    def healthy(self) -> bool:
        """Running, no agent backing off after failures, no input partition stalled, no task
        waiting to be opened."""
        return self.state == "running" and not self.failing_agents() and not self.stalled() and not self.reopening()

    def group_info(self) -> GroupInfo | None:
        return self._consumer.group_info() if self._consumer is not None else None

    def is_leader(self) -> bool:
        """Whether this worker runs the group's ``on_leader`` timers: it holds partition 0 of
        the app's first input topic (by name), so exactly one worker of the group does."""
        inputs = self.input_topics()
        if not inputs:
            return True
        return TopicPartition(inputs[0], 0) in self.assignment()

    def owner_url(self, partition: int) -> str | None:
        """The advertised URL of the worker that owns ``partition`` (per the last assignment)."""
        group = self.group_info()
        return None if group is None else group.owners.get(partition)

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment() if self._consumer is not None else set()

    @property
    def committed(self) -> dict[TopicPartition, int]:
        """The positions this worker committed last, per assigned input partition."""
        return dict(self.committer.committed)

    async def settle(self) -> bool:
        """Flush outputs and tell whether every fetched record was processed and nothing more
        is waiting in the log for this worker (used by ``streamkit.testing``)."""
        return await status.settle(self._producer, self._consumer, self._inboxes)

    def lag(self) -> dict[TopicPartition, int]:
        """Records not yet processed per assigned input partition (high watermark - position)."""
        return status.lag(self._consumer, self._inboxes)
