"""The Kafka driver: ``streamkit broker`` or any Kafka cluster, through aiokafka.

The one module that imports aiokafka. Consumers assign partitions by range (protocol
"streamkit", ``placement.py``), so partition p of every subscribed topic lands on the same
member: a partition task that reads topic A's partition p and its repartition topic's
partition p (``group_by``) finds both local, as in Kafka Streams. Offsets are committed by the
engine only (auto-commit is off).

Consumers offer that one protocol and no fallback: aiokafka (0.14 and earlier) sends one
JoinGroup per configured assignor on every rejoin, each naming one more protocol than the
last (aio-libs/aiokafka#1168). The coordinator must treat changed protocols as a reason to
rebalance (Kafka's rule), so two members that got one JoinGroup out of step rebalanced each
other every retry backoff, forever. The price: a consumer that offers only other protocols
(plain "range") cannot join a streamkit app's group (INCONSISTENT_GROUP_PROTOCOL).

Exactly-once: ``KafkaTransactionalProducer`` is aiokafka's transactional producer behind the
same batching (``send_batch`` of transactional batches), with offsets sent to the transaction.
aiokafka's TxnOffsetCommit (v0) carries no group generation, so the group cannot fence a
zombie (KIP-447); fencing is by transactional id instead: the runtime keeps one id per task
(``runtime/transactions.py``, Kafka Streams' EOS-alpha), so a task's new owner's
InitProducerId fences the previous owner, alive or not. A fenced send or commit raises
``ProducerFencedError``. A group's committed offsets are read stable (KIP-447's
``require_stable``, ``kafka_offsets.py``), so a task's new owner never starts before the last
commit while the transaction's marker is on its way.

Closing: ``aclose`` of a producer or consumer ends what it has with the log (flush, abort the
open transaction, leave the group). Cancelled meanwhile (the worker's stop gave up on a log
that does not answer, ``runtime/shutdown.py``), it closes without another word to the log:
aiokafka's background tasks end, unacknowledged batches fail, connections close; then the
cancellation goes on. aiokafka's objects are made in ``start``, not in constructors, so one
that never started is never left unclosed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, codec
from aiokafka import TopicPartition as KafkaTP
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import KafkaError, KafkaTimeoutError, ProducerFenced
from aiokafka.errors import OffsetMetadataTooLargeError as KafkaOffsetMetadataTooLarge
from aiokafka.producer.transaction_manager import TransactionState
from aiokafka.structs import OffsetAndMetadata

from streamkit._core.errors import ConfigError
from streamkit._core.types import TopicPartition
from streamkit.transport.base import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BatchAck,
    ConsumerRecord,
    Header,
    ProducerFencedError,
    ReadChunk,
    RebalanceListener,
    RecordMetadata,
    TransactionAbortedError,
    TransactionalProducer,
    TransportError,
    check_isolation_level,
    metadata_too_large,
    with_metadata,
)
from streamkit.transport.kafka_offsets import committed_offsets, read_stable_on_assignment
from streamkit.transport.kafka_outage import OutageWatch, install_client_noise_filter, watch_cluster
from streamkit.transport.kafka_security import aiokafka_security
from streamkit.transport.kafka_tools import (
    BrokerRejectedError,
    BrokerUnreachableError,
    KafkaTools,
    abandon_consumer,
    cancelling,
    end_tasks,
    wait_for_partition,
)
from streamkit.transport.options import ClientOptions
from streamkit.transport.placement import (
    GroupInfo,
    MemberInfo,
    decode_group,
    decode_member,
    encode_group,
    encode_member,
    group_infos,
    range_assign,
)
from streamkit.transport.security import PLAINTEXT, ClientSecurity

logger = logging.getLogger(__name__)
install_client_noise_filter()  # aiokafka's lines about an unreachable cluster (``kafka_outage.py``)
# Full batches a partition may have waiting for hand-over before ``send`` waits.
MAX_QUEUED_BATCHES = 2
# aiokafka's batch builder wants a list and only reads it: one shared empty list, rather than
# a new one (a GC-tracked object) per record.
_NO_HEADERS: list[tuple[str, bytes]] = []
READ_MAX_BYTES = 4 * 1024 * 1024  # per fetch of a changelog being restored
_METADATA_WAIT_S = 30.0  # a producer's request timeout: how long a partition may take to show


async def _abandon_producer(producer: AIOKafkaProducer) -> None:
    """Close ``producer`` without waiting for the log: its sender task ends (batches not
    delivered stay so), its connections close."""
    producer._closed = True
    sender = getattr(producer, "_sender", None)
    await end_tasks([getattr(sender, "sender_task", None)])
    await producer.client.close()


def _sender_error(producer: AIOKafkaProducer | None) -> BaseException | None:
    """The error that ended aiokafka's sender task (None while it runs). aiokafka leaves it
    set on futures nobody awaits (the transaction's waiter, each pending batch's drain
    waiter): they are retrieved here, or asyncio logs each as a "never retrieved" traceback."""
    task = getattr(getattr(producer, "_sender", None), "sender_task", None)
    if not isinstance(task, asyncio.Future) or not task.done() or task.cancelled() or task.exception() is None:
        return None
    accumulator = getattr(producer, "_message_accumulator", None)
    batches = [b for queue in getattr(accumulator, "_batches", {}).values() for b in queue]
    batches.extend(getattr(accumulator, "_pending_batches", ()))
    waiters = [getattr(batch, "_drain_waiter", None) for batch in batches]
    waiters.append(getattr(getattr(producer, "_txn_manager", None), "_transaction_waiter", None))
    for waiter in waiters:
        if isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled():
            waiter.exception()
    return task.exception()


# The library each codec needs (aiokafka's ``codec.has_*``): gzip is Python's own.
_CODECS = {"gzip": codec.has_gzip, "snappy": codec.has_snappy, "lz4": codec.has_lz4, "zstd": codec.has_zstd}


def check_codec(compression_type: str | None, available: Mapping[str, Any] = _CODECS) -> None:
    """Refuse a compression codec whose library is not installed, in one line (aiokafka's own
    refusal is a RuntimeError deep in the producer's start)."""
    if compression_type is not None and not available[compression_type]():
        raise ConfigError(
            f"producer_compression_type {compression_type!r}: its library is not installed "
            "(aiokafka compresses snappy, lz4 and zstd with cramjam: pip install cramjam)"
        )


class KafkaLogClient:
    """Topics through ``KafkaTools`` (its admin client): a lookup never auto-creates a topic,
    and ``ensure_topic`` returns once every partition answers, so a writer may write at once.

    ``options`` (``options.py``) go to every producer and group consumer made here and to the
    topics ``ensure_topic`` creates, and ``options.security`` (TLS, SASL) to every client, the
    admin client and the outage probe's too; a topic found with another replication factor
    than they declare is said once (a warning) and kept in ``replication_mismatches``.

    Once started, it probes the cluster every second (``kafka_outage.py``): while no broker
    answers, ``unavailable_reason`` says so (the worker's /health answers 503 with it)."""

    def __init__(self, bootstrap_servers: str, *, url: str | None = None, options: ClientOptions | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.url = url or f"kafka://{bootstrap_servers}"
        self.options = options or ClientOptions()
        check_codec(self.options.compression_type)
        self._tools: KafkaTools | None = None
        # Topics found with another replication factor than declared: name -> what was said.
        self.replication_mismatches: dict[str, str] = {}
        self.outage = OutageWatch(bootstrap_servers)
        self._watch_task: asyncio.Task[None] | None = None

    @property
    def unavailable_reason(self) -> str | None:
        """Why the cluster is unreachable now (an outage, ``kafka_outage.py``), else None."""
        return self.outage.reason

    async def start(self) -> None:
        if self._tools is None:
            tools = KafkaTools(self.bootstrap_servers, security=self.options.security)
            try:
                await tools.start()
            except BrokerUnreachableError as exc:
                await tools.aclose()
                raise TransportError(f"cannot reach Kafka at {self.bootstrap_servers}") from exc
            except BaseException:  # a stop while it waited for the log, or another refusal
                await tools.aclose()
                raise
            self._tools = tools
            self._watch_task = asyncio.ensure_future(watch_cluster(self.outage, tools.unreachable))
            self._watch_task.set_name("streamkit:watch-kafka")

    async def aclose(self) -> None:
        watch, self._watch_task = self._watch_task, None
        if watch is not None:
            await end_tasks([watch])
        tools, self._tools = self._tools, None
        if tools is not None:
            await tools.aclose()

    def _started(self) -> KafkaTools:
        if self._tools is None:
            raise TransportError("the Kafka log client is not started")
        return self._tools

    async def ensure_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> int:
        # Create first, never describe first: on a broker that auto-creates topics, a metadata
        # request naming a missing topic creates it with the default partition count instead of ours.
        tools = self._started()
        declared = self.options.replication_factor
        try:
            count = await tools.ensure_topic(
                name, partitions, self.options.topic_config(config or {}), replication_factor=declared
            )
        except BrokerRejectedError as exc:
            if declared == 1:
                raise
            # More replicas than brokers (INVALID_REPLICATION_FACTOR, Kafka's and `streamkit
            # broker`'s answer): name the topic and the setting beside the broker's words.
            raise BrokerRejectedError(
                f"cannot create topic {name!r} with topic_replication_factor={declared}: {exc}"
            ) from exc
        found = await tools.replication_factor(name)
        if found is not None and found != declared and name not in self.replication_mismatches:
            text = f"topic {name!r} has replication factor {found} but is declared with {declared}"
            logger.warning("%s (topic_replication_factor); it is used as it is", text)
            self.replication_mismatches[name] = f"{text} (used as it is)"
        return count

    async def partition_count(self, name: str) -> int | None:
        return await self._started().partition_count(name)

    async def delete_records(self, offsets: Mapping[TopicPartition, int]) -> None:
        tools = self._started()
        for tp, offset in offsets.items():
            await tools.delete_records(tp.topic, tp.partition, offset)

    def producer(self) -> KafkaProducer:
        return KafkaProducer(self.bootstrap_servers, settings=self.options)

    def transactional_producer(self, transactional_id: str, *, timeout_ms: int = 60_000) -> TransactionalProducer:
        if self.options.acks != -1:
            # Kafka's idempotent (and so transactional) producer refuses other acks too.
            raise ConfigError(f"exactly_once needs producer_acks=-1 ('all'), not {self.options.acks}")
        return KafkaTransactionalProducer(self.bootstrap_servers, transactional_id, timeout_ms, settings=self.options)

    def reader(self, *, isolation_level: str = READ_UNCOMMITTED) -> KafkaReader:
        return KafkaReader(self.bootstrap_servers, check_isolation_level(isolation_level), security=self.options.security)

    def consumer(
        self, group_id: str, *, auto_offset_reset: str = "earliest", isolation_level: str = READ_UNCOMMITTED
    ) -> KafkaConsumer:
        return KafkaConsumer(
            self.bootstrap_servers, group_id, auto_offset_reset, check_isolation_level(isolation_level),
            settings=self.options,
        )


class KafkaReader:
    """A ``PartitionReader`` through a group-less consumer (``KafkaTools.fetch``)."""

    def __init__(
        self, bootstrap_servers: str, isolation_level: str = READ_UNCOMMITTED, *, security: ClientSecurity = PLAINTEXT
    ) -> None:
        self._tools = KafkaTools(bootstrap_servers, isolation_level=isolation_level, security=security)

    async def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        return await self._tools.offsets(tp.topic, tp.partition)

    async def read(self, tp: TopicPartition, offset: int, max_records: int) -> ReadChunk:
        # The consumer keeps what it fetched beyond max_records for the next read from there.
        result = await self._tools.fetch(tp.topic, tp.partition, offset, READ_MAX_BYTES, max_records=max_records)
        return ReadChunk(result.records, result.next_offset, result.high_watermark)

    async def aclose(self) -> None:
        await self._tools.aclose()


class _Batch:
    """Records for one partition, appended to an aiokafka ``BatchBuilder`` until handed over.

    ``future`` resolves to the batch's base offset once the broker acknowledged it; each
    record's metadata is that plus its offset in the batch (``_Ack``), so no future exists
    per record.
    """

    __slots__ = ("builder", "future")

    def __init__(self, builder: Any, future: asyncio.Future[int]) -> None:
        self.builder = builder
        self.future = future


class KafkaProducer:
    """Builds record batches itself and hands them to aiokafka whole (``send_batch``).

    aiokafka's per-record ``send`` costs a coroutine, a future, a metadata tuple and a
    scheduled callback per record; here a record costs one append to a ``BatchBuilder``.
    Batching: records go to the open batch of their partition; it is handed over when it is
    full or when the event loop next turns (``call_soon``), like the embedded producer. While
    a partition's previous batch is still being handed over (aiokafka keeps one queued batch
    per partition and one in flight), records gather in the open batch instead, so a busy
    partition sends large batches and an idle one sends at once.

    Order: one hand-over task per partition at a time takes that partition's batches in the
    order they were opened, and aiokafka delivers a partition's batches in that order.
    Back-pressure: ``send`` waits while ``MAX_QUEUED_BATCHES`` full batches of its partition
    wait for hand-over (aiokafka takes one more per partition only when the last is drained).
    """

    def __init__(self, bootstrap_servers: str, *, settings: ClientOptions | None = None, **options: Any) -> None:
        self._bootstrap_servers = bootstrap_servers
        self._settings = settings or ClientOptions()  # acks, compression, request timeout
        self._options = options  # more aiokafka settings (a transactional id)
        self._producer: AIOKafkaProducer | None = None  # made by start (``_kafka``)
        self._started = False
        self._open: dict[tuple[str, int], _Batch] = {}
        self._ready: dict[tuple[str, int], deque[_Batch]] = {}
        self._handing: set[tuple[str, int]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._undelivered: set[asyncio.Future[int]] = set()
        self._failures: list[BaseException] = []
        self._taken: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._scheduled = False

    def _kafka(self) -> AIOKafkaProducer:
        """aiokafka's producer, made on first use (by ``start``)."""
        if self._producer is None:
            self._producer = self._make_producer()
        return self._producer

    def _make_producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=self._bootstrap_servers,
            client_id=self._settings.client_id,
            acks=self._settings.acks,
            compression_type=self._settings.compression_type,
            linger_ms=5,
            max_batch_size=1024 * 1024,
            request_timeout_ms=self._settings.request_timeout_ms,
            **aiokafka_security(self._settings.security),
            **self._options,
        )

    async def start(self) -> None:
        if not self._started:
            producer = self._kafka()
            try:
                await producer.start()
            except (KafkaError, asyncio.CancelledError) as exc:  # cancelled: a stop while it waited for the log
                self._producer = None
                await producer.stop()
                if isinstance(exc, KafkaError):
                    raise TransportError(f"producer cannot connect: {exc}") from exc
                raise
            self._started = True

    async def aclose(self) -> None:
        """Flush, then close; cancelled meanwhile, close without waiting for the log (module doc)."""
        if not self._started:
            return
        try:
            await self._end()
            self._started = False
            for task in list(self._tasks):
                task.cancel()
            await self._kafka().stop()
        except asyncio.CancelledError:
            await self._abandon()
            if cancelling():
                raise
        finally:
            self._started = False

    async def _end(self) -> None:
        """What a close says to the log first: here, deliver what was sent."""
        try:
            await self.flush()
        except TransportError as exc:
            logger.warning("records were not acknowledged when the producer closed: %s", exc)

    async def _abandon(self) -> None:
        """Close without waiting for the log: what it did not acknowledge fails."""
        self._started = False
        error = TransportError("the producer closed before the log acknowledged this record")
        for batch in [*self._open.values(), *(b for q in self._ready.values() for b in q)]:
            self._fail(batch, error)
        self._open.clear()
        self._ready.clear()
        for future in list(self._undelivered):
            if not future.done():
                future.set_exception(error)
                future.exception()
        self._failures.clear()
        for waiter in self._taken.values():
            if not waiter.done():
                waiter.set_result(None)
        await end_tasks(list(self._tasks))
        if self._producer is not None:
            await _abandon_producer(self._producer)

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
        if not self._started:
            await self.start()
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        batch, index, backlog = self._add(topic, partition, key, value, headers, ts)
        if backlog:
            await self._room((topic, partition))
        return BatchAck(batch.future, topic, partition, index, ts)

    def send_nowait(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Sequence[Header] = (),
    ) -> Awaitable[None] | None:
        if not self._started:
            raise TransportError("the producer is not started")
        _batch, _index, backlog = self._add(topic, partition, key, value, headers, timestamp_ms)
        return self._room((topic, partition)) if backlog else None

    def _add(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None,
        headers: Sequence[Header], ts: int,
    ) -> tuple[_Batch, int, bool]:
        """Append to the partition's open batch: (batch, index in it, backlog full?)."""
        tp = (topic, partition)
        hdrs = [(k, v if v is not None else b"") for k, v in headers] if headers else _NO_HEADERS
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open[tp] = self._new_batch()
        appended = batch.builder.append(timestamp=ts, key=key, value=value, headers=hdrs)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._kick)
        if appended is not None:
            return batch, appended.offset, False
        # Full: queue it for hand-over and start the next one.
        queue = self._ready.setdefault(tp, deque())
        queue.append(batch)
        batch = self._open[tp] = self._new_batch()
        appended = batch.builder.append(timestamp=ts, key=key, value=value, headers=hdrs)
        if appended is None:
            raise TransportError(f"a record for {topic}-{partition} does not fit in a batch")
        return batch, appended.offset, len(queue) >= MAX_QUEUED_BATCHES

    async def _room(self, tp: tuple[str, int]) -> None:
        """Wait while the partition has enough queued already: the back-pressure aiokafka's
        own send applies. (The record is in its batch; other senders may add more.)"""
        while len(self._ready.get(tp, ())) >= MAX_QUEUED_BATCHES and self._started:
            self._kick()
            waiter = self._taken.get(tp)
            if waiter is None:
                waiter = self._taken[tp] = asyncio.get_running_loop().create_future()
            await waiter

    def _new_batch(self) -> _Batch:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._undelivered.add(future)
        future.add_done_callback(self._undelivered.discard)
        return _Batch(self._kafka().create_batch(), future)

    def _holding(self) -> bool:
        """Whether batches must wait before hand-over (a transaction is ending)."""
        return False

    def _kick(self) -> None:
        """Start a hand-over for every partition with records and none running."""
        self._scheduled = False
        if self._holding():
            return
        for tp in [*self._open, *self._ready]:
            if tp not in self._handing:
                self._handing.add(tp)
                task = asyncio.ensure_future(self._hand_over(tp))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def _close_open(self) -> None:
        """Move every open batch to its partition's queue (records sent later open new ones)."""
        for tp, batch in self._open.items():
            self._ready.setdefault(tp, deque()).append(batch)
        self._open.clear()
        self._kick()

    async def _hand_over(self, tp: tuple[str, int]) -> None:
        """Hand ``tp``'s queued batches, then its open one, to aiokafka, in order."""
        try:
            while not self._holding():
                queue = self._ready.get(tp)
                if queue:
                    batch = queue.popleft()
                    waiter = self._taken.pop(tp, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(None)
                else:
                    self._ready.pop(tp, None)
                    next_open = self._open.pop(tp, None)
                    if next_open is None:
                        return
                    batch = next_open
                batch.builder.close()  # no more appends, and aiokafka sends it without lingering
                try:
                    # aiokafka asserts its metadata shows the partition: wait until it does, or
                    # fail the batch naming the partitions the topic has.
                    await wait_for_partition(
                        self._kafka().client, tp[0], tp[1], f"cannot send to {tp[0]}-{tp[1]}", timeout_s=_METADATA_WAIT_S
                    )
                    if self._holding():
                        # A transaction began to end while this waited: aiokafka refuses a
                        # batch between two. It goes first once the next one begins (_kick).
                        self._ready.setdefault(tp, deque()).appendleft(batch)
                        return
                    delivery = await self._kafka().send_batch(batch.builder, tp[0], partition=tp[1])
                except Exception as exc:
                    # Whatever refuses this batch fails its records (flush and their acks
                    # report it); it must not stop the hand-over of the batches behind it.
                    self._fail(batch, _send_error(tp, exc))
                    continue
                delivery.add_done_callback(functools.partial(self._delivered, batch, tp))
        finally:
            self._handing.discard(tp)
            waiter = self._taken.pop(tp, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)  # a sender blocked on this partition re-checks and re-kicks

    def _delivered(self, batch: _Batch, tp: tuple[str, int], delivery: asyncio.Future[Any]) -> None:
        if batch.future.done():
            return
        if delivery.cancelled():
            self._fail(batch, TransportError(f"send to {tp[0]}-{tp[1]} was cancelled"))
            return
        exc = delivery.exception()
        if exc is not None:
            self._fail(batch, _send_error(tp, exc))
        else:
            # acks=0: the log answers nothing, so no offset is known (Kafka's producer says -1).
            metadata = delivery.result()
            batch.future.set_result(-1 if metadata is None else metadata.offset)

    def _fail(self, batch: _Batch, error: TransportError) -> None:
        self._failures.append(error)
        if not batch.future.done():
            batch.future.set_exception(error)
            batch.future.exception()  # retrieved here: flush reports it, an _Ack re-raises it

    async def flush(self) -> None:
        if not self._started:
            return
        self._close_open()
        waiting = list(self._undelivered)
        if waiting:
            await asyncio.gather(*waiting, return_exceptions=True)
        if self._failures:
            failures, self._failures = self._failures, []
            error = TransportError(f"{len(failures)} batch(es) failed, first: {failures[0]}")
            error.retriable = all(getattr(f, "retriable", False) for f in failures)
            raise error from failures[0]


def _send_error(tp: tuple[str, int], exc: BaseException) -> TransportError:
    """The error of a batch aiokafka refused or failed to deliver; a fence says so. It is
    retriable as aiokafka's error is, and a batch that timed out is (aiokafka says not;
    Kafka's TimeoutException is retriable: the log was away, the same send may succeed)."""
    if isinstance(exc, ProducerFenced):
        return ProducerFencedError(f"send to {tp[0]}-{tp[1]} refused, the producer was fenced: {exc}")
    if isinstance(exc, TransportError):  # ours: it names the partition and says why
        return exc
    error = TransportError(f"send to {tp[0]}-{tp[1]} failed: {exc!r}")
    error.retriable = isinstance(exc, KafkaTimeoutError) or bool(getattr(exc, "retriable", False))
    return error


def _largest(entries: Mapping[TopicPartition, tuple[int, str]]) -> dict[TopicPartition, str]:
    """The partition with the longest metadata and its metadata: the one a log's
    OFFSET_METADATA_TOO_LARGE refused (aiokafka's error names no partition)."""
    tp = max(entries, key=lambda tp: len(entries[tp][1].encode()))
    return {tp: entries[tp][1]}


class KafkaTransactionalProducer(KafkaProducer):
    """A transactional producer through aiokafka (``TransactionalProducer``).

    A transaction is always open between ``start`` and ``aclose``: the next begins as the
    last commits or aborts. While one ends, batches wait before hand-over (aiokafka refuses
    them outside a transaction) and go into the next. A fenced producer (another instance
    took the transactional id, or the coordinator timed the transaction out) cannot go on in
    aiokafka: ``abort_transaction`` replaces it with a new one, which takes a new epoch (its
    InitProducerId aborts what the old one left open). After any failed commit it does so,
    since aiokafka cannot tell a fence from a timed-out transaction and leaves its state
    machine broken after either.
    """

    def __init__(
        self, bootstrap_servers: str, transactional_id: str, timeout_ms: int, *, settings: ClientOptions | None = None
    ) -> None:
        super().__init__(
            bootstrap_servers, settings=settings, transactional_id=transactional_id, transaction_timeout_ms=timeout_ms,
            enable_idempotence=True,
        )
        self.transactional_id = transactional_id
        self.commits = 0
        self.aborts = 0
        self._ending = False
        self._fenced = False  # aiokafka's producer is broken: abort_transaction replaces it
        self.fenced = False  # the log refused this producer once for a newer instance (sticky)
        self._touched = False  # a batch or offsets went into the open transaction
        self._lost: TransportError | None = None  # a batch of the open transaction failed

    @property
    def transaction_open(self) -> bool:
        return self._touched or bool(self._open) or bool(self._ready)

    def _holding(self) -> bool:
        return self._ending

    def _kick(self) -> None:
        if self._open or self._ready:
            self._touched = True  # these batches go into the open (or, while one ends, the next) transaction
        super()._kick()

    def _fail(self, batch: _Batch, error: TransportError) -> None:
        if isinstance(error, ProducerFencedError):
            self.fenced = True
        if self._lost is None and not self._ending:
            # The transaction lost records: it must not commit, whoever's flush reports the
            # failure (an aligned task flushes the producers of the others).
            self._lost = error
        super()._fail(batch, error)

    def _sender_failed(self) -> bool:
        """Whether aiokafka's sender ended on an error (a fence, when a partition new to the
        transaction was refused). Its transaction state is then fatal and refuses every
        transition with an internal assertion: only a new producer goes on."""
        error = _sender_error(self._producer)
        if error is None:
            return False
        self._fenced = True
        if isinstance(error, ProducerFenced):
            self.fenced = True
        return True

    async def start(self) -> None:
        if not self._started:
            await super().start()
            await self._begin()

    async def _begin(self) -> None:
        try:
            await self._kafka().begin_transaction()
        except KafkaError as exc:
            raise TransportError(f"cannot begin a transaction as {self.transactional_id!r}: {exc}") from exc
        self._touched = False

    async def flush(self) -> None:
        if self._open or self._ready:
            self._touched = True
        await super().flush()

    async def commit_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group_id: str,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        entries = with_metadata(offsets, metadata)
        try:
            await self.flush()
        except TransportError as exc:
            # A batch the transaction lost (the producer fenced, or the transaction timed
            # out): aiokafka's transaction state is broken, abort_transaction replaces it.
            self._fenced = True
            if isinstance(exc.__cause__, ProducerFencedError):
                raise ProducerFencedError(f"a send of the transaction was fenced: {exc.__cause__}") from exc
            raise TransactionAbortedError(f"a send of the transaction failed: {exc}") from exc
        if self._lost is not None:
            self._fenced = True  # aiokafka's transaction holds what it took: a new producer goes on
            lost = self._lost
            if isinstance(lost, ProducerFencedError):
                raise ProducerFencedError(f"a send of the transaction was fenced: {lost}") from lost
            raise TransactionAbortedError(f"a send of the transaction failed: {lost}") from lost
        if self._sender_failed():
            if self.fenced:
                raise ProducerFencedError("the transaction did not commit, the producer was fenced")
            raise TransactionAbortedError("the transaction did not commit: the producer's sender failed")
        if not self._touched and not offsets and not self._between_transactions():
            return
        self._ending = True
        try:
            if self._between_transactions():
                # The last commit was cancelled (a stop) after the log committed it and before
                # the next transaction began: begin it, so these offsets have one to go in.
                await self._begin()
            if entries:
                await self._kafka().send_offsets_to_transaction(
                    {KafkaTP(tp.topic, tp.partition): entry for tp, entry in entries.items()}, group_id
                )
            await self._kafka().commit_transaction()
        except ProducerFenced as exc:
            self._fenced = self.fenced = True
            self._ending = False
            raise ProducerFencedError(f"the transaction did not commit, the producer was fenced: {exc}") from exc
        except (asyncio.CancelledError, TransportError):  # a stop; a begin the log refused
            self._ending = False  # else the sender would hold every later batch
            raise
        except KafkaError as exc:
            self._fenced = True
            self._ending = False
            if isinstance(exc.__cause__, KafkaOffsetMetadataTooLarge):
                # aiokafka's sender task ends on this TxnOffsetCommit answer (it logs it as an
                # unexpected error) and fails the transaction: abort_transaction replaces it.
                raise metadata_too_large(_largest(entries), "the transaction did not commit") from exc
            raise TransactionAbortedError(f"the transaction did not commit: {exc!r}") from exc
        self.commits += 1
        try:
            await self._begin()  # batches sent meanwhile wait for it: they belong to the next
        finally:
            self._ending = False  # (also when a stop cancels it: the next commit begins one)
        self._kick()

    async def abort_transaction(self) -> None:
        self._ending = True
        try:
            for batch in [*self._open.values(), *(b for q in self._ready.values() for b in q)]:
                self._fail(batch, TransactionAbortedError("the transaction was aborted"))
            self._open.clear()
            self._ready.clear()
            if self._undelivered:
                await asyncio.gather(*list(self._undelivered), return_exceptions=True)
            self._failures.clear()
            self._sender_failed()
            if not self._fenced and not self._between_transactions():
                try:
                    await self._kafka().abort_transaction()
                except ProducerFenced:
                    self._fenced = self.fenced = True
                except KafkaError as exc:
                    logger.warning("aborting the transaction failed, starting a new producer: %r", exc)
                    self._fenced = True
            if self._fenced:
                await self._kafka().stop()
                self._producer = None  # the next start makes a new one
                self._started = False
                await super().start()
                self._fenced = False
            self.aborts += 1
            self._lost = None
            await self._begin()
        finally:
            self._ending = False
        self._kick()

    def _between_transactions(self) -> bool:
        """aiokafka's transaction state is READY: a commit ended and the next transaction was
        not begun yet (a commit cancelled right there, by a stop), so there is nothing to
        abort (aiokafka refuses that transition with an internal assertion)."""
        manager = getattr(self._producer, "_txn_manager", None)
        return manager is not None and manager.state == TransactionState.READY

    async def _end(self) -> None:
        """Abort what was not committed: only ``commit_transaction`` makes records visible."""
        self._ending = True
        self._sender_failed()
        if not self._fenced and not self._between_transactions():  # else there is no transaction to end
            try:
                await self._kafka().abort_transaction()
            except ProducerFenced:
                self._fenced = self.fenced = True
            except KafkaError as exc:  # the log did not answer: it aborts the transaction on its timeout
                logger.debug("aborting the transaction on close failed: %r", exc)
            self._sender_failed()  # a fence found meanwhile, retrieved


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, listener: RebalanceListener) -> None:
        self._listener = listener

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._listener.on_partitions_revoked({TopicPartition(tp.topic, tp.partition) for tp in revoked})

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._listener.on_partitions_assigned({TopicPartition(tp.topic, tp.partition) for tp in assigned})


class _Placement:
    """This member's advertised info and the group info its last assignment brought."""

    def __init__(self) -> None:
        self.member = MemberInfo()
        self.group: GroupInfo | None = None


def _assignor(placement: _Placement) -> type[AbstractPartitionAssignor]:
    """An assignor class bound to one consumer (aiokafka calls assignors' class methods):
    range assignment plus owners and standbys (``placement.py``)."""

    class StreamkitAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
        name = "streamkit"
        version = 0

        @classmethod
        def metadata(cls, topics: Any) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(cls.version, list(topics), encode_member(placement.member))

        @classmethod
        def assign(cls, cluster: Any, members: Any) -> dict[str, ConsumerProtocolMemberAssignment]:
            subscriptions = {member: list(meta.subscription) for member, meta in members.items()}
            counts = {
                topic: len(cluster.partitions_for_topic(topic) or ())
                for topics in subscriptions.values()
                for topic in topics
            }
            assignment = range_assign(subscriptions, counts)
            infos = group_infos(
                assignment, {member: decode_member(meta.user_data) for member, meta in members.items()}, counts
            )
            return {
                member: ConsumerProtocolMemberAssignment(
                    cls.version, sorted(assignment[member].items()), encode_group(infos[member])
                )
                for member in members
            }

        @classmethod
        def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
            placement.group = decode_group(assignment.user_data)

    return StreamkitAssignor


class KafkaConsumer:
    """A group member through aiokafka's consumer. Its committed offsets are read stable
    (``kafka_offsets.py``): ``committed``/``committed_metadata`` always, and under
    ``read_committed`` the positions of an assignment too, so a member never starts from the
    offset before a transaction that committed but whose marker is not written yet."""

    def __init__(
        self, bootstrap_servers: str, group_id: str, auto_offset_reset: str, isolation_level: str = READ_UNCOMMITTED,
        *, settings: ClientOptions | None = None, request_timeout_ms: int | None = None, retry_backoff_ms: int = 100,
    ) -> None:
        settings = settings or ClientOptions()
        if request_timeout_ms is None:
            request_timeout_ms = settings.consumer_request_timeout_ms
        self._placement = _Placement()
        self._isolation_level = isolation_level
        self._request_timeout_ms = request_timeout_ms  # also how long a committed offset may stay unstable
        self._retry_backoff_ms = retry_backoff_ms
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            client_id=settings.client_id,
            group_id=group_id,
            # A static member (KIP-345) leaves no group on close: back within the session
            # timeout, it gets its partitions again without a rebalance.
            group_instance_id=settings.group_instance_id,
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            isolation_level=isolation_level,
            # One assignor only: with more, aiokafka sends a JoinGroup per assignor on every
            # rejoin, and members joining together rebalance each other forever (module doc).
            partition_assignment_strategy=(_assignor(self._placement),),
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            max_poll_interval_ms=settings.max_poll_interval_ms,
            rebalance_timeout_ms=settings.rebalance_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=4 * 1024 * 1024,
            retry_backoff_ms=retry_backoff_ms,
            **aiokafka_security(settings.security),
        )
        self.group_id = group_id
        self._topics: list[str] = []
        self._listener: RebalanceListener | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._started = False
        self._closed = False  # aiokafka's consumer starts once: a closed one is not started again

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener) -> None:
        self._topics = list(topics)
        self._listener = listener

    def advertise(self, info: MemberInfo) -> None:
        self._placement.member = info

    def group_info(self) -> GroupInfo | None:
        return self._placement.group

    async def start(self) -> None:
        try:
            await self._consumer.start()
            if self._isolation_level == READ_COMMITTED:  # before the first assignment (subscribe)
                read_stable_on_assignment(self._consumer._coordinator)
        except KafkaError as exc:
            await self._consumer.stop()
            raise TransportError(f"consumer cannot connect: {exc}") from exc
        except TransportError:  # an aiokafka without the method kafka_offsets replaces
            await self._consumer.stop()
            raise
        except asyncio.CancelledError:  # a stop while it waited for the log
            await abandon_consumer(self._consumer)
            raise
        self._started = True
        if self._topics:
            listener = _Listener(self._listener) if self._listener is not None else ConsumerRebalanceListener()
            self._consumer.subscribe(self._topics, listener=listener)

    async def aclose(self) -> None:
        """Leave the group and close; cancelled meanwhile, close without waiting for the log
        (module doc)."""
        if not self._started:
            return
        self._started = False
        self._closed = True
        try:
            await self._consumer.stop()
        except asyncio.CancelledError:
            # Ours, or aiokafka's: its fetcher's close re-raises the cancellation of a fetch
            # that was sleeping out its retry back-off (the log did not answer), skipping the
            # rest of the close. Either way: close what is left without the log.
            await abandon_consumer(self._consumer)
            if cancelling():
                raise

    async def getmany(
        self, timeout_ms: int, max_records: int
    ) -> Mapping[TopicPartition, Sequence[ConsumerRecord]]:
        try:
            fetched = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except KafkaError as exc:
            raise TransportError(f"fetch failed: {exc}") from exc
        out: dict[TopicPartition, Sequence[ConsumerRecord]] = {}
        for ktp, records in fetched.items():
            if records:
                tp = TopicPartition(ktp.topic, ktp.partition)
                out[tp] = records
                self._positions[tp] = records[-1].offset + 1
        return out

    async def commit(
        self, offsets: Mapping[TopicPartition, int], metadata: Mapping[TopicPartition, str] | None = None
    ) -> None:
        entries = with_metadata(offsets, metadata)
        if not entries:
            return
        try:
            await self._consumer.commit({KafkaTP(tp.topic, tp.partition): entry for tp, entry in entries.items()})
        except KafkaOffsetMetadataTooLarge as exc:
            raise metadata_too_large(_largest(entries), f"commit of group {self.group_id!r} refused") from exc
        except KafkaError as exc:
            raise TransportError(f"commit failed: {exc}") from exc

    async def _ready_for_offsets(self) -> None:
        """Start the consumer if it never ran (an unsubscribed member can still read the
        group's offsets); a closed one says so."""
        if self._closed:
            raise TransportError(f"the consumer of group {self.group_id!r} is closed")
        if not self._started:
            await self.start()

    async def committed(self, tp: TopicPartition) -> int | None:
        found = await self._committed(tp)
        return None if found is None else int(found.offset)

    async def committed_metadata(self, tp: TopicPartition) -> str | None:
        found = await self._committed(tp)
        return None if found is None else str(found.metadata or "")

    async def _committed(self, tp: TopicPartition) -> OffsetAndMetadata | None:
        """``tp``'s stable committed offset and metadata (aiokafka's ``OffsetAndMetadata``), or
        None. Stable whatever the isolation level (unlike Kafka's consumer, which asks for it
        under ``read_committed`` only): its readers decide where a task starts and the stream
        time it resumes from, and an offset a committed transaction is about to replace is
        never the answer they want."""
        await self._ready_for_offsets()
        ktp = KafkaTP(tp.topic, tp.partition)
        try:
            found = await committed_offsets(
                self._consumer._coordinator, [ktp],
                timeout_ms=self._request_timeout_ms, retry_backoff_ms=self._retry_backoff_ms,
            )
        except KafkaError as exc:
            raise TransportError(f"cannot read the committed offset of {tp}: {exc}") from exc
        return found.get(ktp)

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def pause(self, tps: Sequence[TopicPartition]) -> None:
        self._consumer.pause(*[KafkaTP(tp.topic, tp.partition) for tp in tps])

    def resume(self, tps: Sequence[TopicPartition]) -> None:
        self._consumer.resume(*[KafkaTP(tp.topic, tp.partition) for tp in tps])

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._consumer.seek(KafkaTP(tp.topic, tp.partition), offset)
        self._positions[tp] = offset

    def position(self, tp: TopicPartition) -> int | None:
        """The offset after the last record handed out. aiokafka's own position runs ahead
        of that while it holds fetched records not handed out yet; once it holds none of
        ``tp``'s, its position is the one to trust: it is past the control batches
        (transaction markers) and aborted records that no record handed out stands for, so
        a read_committed consumer at the end of a transactional partition is caught up."""
        known = self._positions.get(tp)
        ktp = KafkaTP(tp.topic, tp.partition)
        if known is not None:
            buffered = getattr(getattr(self._consumer, "_fetcher", None), "_records", None)
            if buffered is None or ktp in buffered:
                return known
        # Nothing fetched yet (an empty partition, or one already read to its end): aiokafka
        # knows the position it reset to or the committed one. Its async ``position()`` may
        # wait for a reset; this reads the state it keeps, without waiting.
        try:
            subscription = self._consumer._subscription.subscription
            state = subscription.assignment.state_value(ktp)
        except AttributeError:
            return known
        if state is None or not state.has_valid_position:
            return known
        return int(state.position) if known is None else max(known, int(state.position))

    def highwater(self, tp: TopicPartition) -> int | None:
        hw = self._consumer.highwater(KafkaTP(tp.topic, tp.partition))
        return None if hw is None else int(hw)

    def unavailable(self) -> dict[TopicPartition, str]:
        # aiokafka resets an out-of-range position per auto_offset_reset itself (and logs
        # it); a deleted topic shows as assigned partitions its cluster metadata lacks.
        cluster = getattr(getattr(self._consumer, "_client", None), "cluster", None)
        if cluster is None or not self._started:
            return {}
        out: dict[TopicPartition, str] = {}
        for tp in self.assignment():
            partitions = cluster.partitions_for_topic(tp.topic)
            if partitions is None or tp.partition not in partitions:
                out[tp] = "unknown topic or partition (not in the cluster's metadata)"
        return out
