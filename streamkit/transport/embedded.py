"""The embedded driver: the commit log in this process, no sockets (``file://DIR``).

The process that opens the data directory owns it (``LogManager`` takes its lock), so an
embedded consumer group has exactly one member: it is assigned every partition of the topics
it subscribes to, and commits to the log's durable group offsets.

Producer: records are buffered per partition and appended as one batch when the buffer is
full or when the event loop next turns (``call_soon``), so an agent that handles a whole
fetched batch without suspending produces whole batches too. Appends to topics whose flush
policy fsyncs run in a worker thread, others inline (a page-cache write).

Transactions (exactly-once) use the log's own machinery in-process: the transaction
coordinator and the producer state of the broker this process serves the directory with
(or, when it does not serve, its own, recovered first: a transaction a killed process left
open is aborted). ``EmbeddedTransactionalProducer`` appends transactional batches (producer
id, epoch, sequence) through ``ProducerStates`` as the wire protocol's produce does, so the
partitions' last stable offsets and aborted-transaction lists follow, and read_committed
readers here and over the wire (the owner's broker) see the same thing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.types import TopicPartition
from streamkit._core.waiting import drain
from streamkit.log.errors import (
    InvalidRecordError,
    LogError,
    OffsetOutOfRangeError,
    UnknownTopicError,
)
from streamkit.log.groups.coordinator import GroupCoordinator
from streamkit.log.manager import LogManager
from streamkit.log.partition import Partition
from streamkit.log.producers import (
    InvalidProducerEpochError,
    ProducerIdAllocator,
    ProducerStates,
    committed_records,
    last_stable_offset,
)
from streamkit.log.records import BatchBuilder, Record, check_batch, decode_batches, iter_batches
from streamkit.log.txn import TransactionCoordinator, TxnErrorCode
from streamkit.transport.base import (
    READ_COMMITTED,
    BatchAck,
    Header,
    ProducerFencedError,
    ReadChunk,
    RebalanceListener,
    RecordMetadata,
    TransactionAbortedError,
    TransportError,
    check_isolation_level,
)
from streamkit.transport.embedded_group import HEARTBEAT_INTERVAL_S, GroupMembership
from streamkit.transport.placement import GroupInfo, MemberInfo

MAX_BATCH_RECORDS = 2000
# Well below max.message.bytes' default (1 MiB): a batch of large records is appended sooner.
MAX_BATCH_BYTES = 256 * 1024
MAX_FETCH_BYTES = 4 * 1024 * 1024
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
_SEQUENCE_MODULUS = 1 << 31
logger = logging.getLogger(__name__)


class EmbeddedLogClient:
    """A ``LogClient`` over a data directory opened in this process."""

    def __init__(
        self,
        data_dir: str,
        *,
        url: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        default_partitions: int = 1,
        serve: bool = False,
    ) -> None:
        self.data_dir = data_dir
        # ``serve``: this process owns the directory for a while (a worker), so it also
        # serves the log over the wire on a loopback port recorded in ``<dir>/.owner``; other
        # processes pointed at the directory (CLI tools) then go through it.
        self._serve = serve
        self._broker: Any = None
        self.url = url or f"file://{data_dir}"
        self.clock = clock
        self._default_partitions = default_partitions
        self._log: LogManager | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._consumers: list[EmbeddedConsumer] = []
        self._producer_states: ProducerStates | None = None
        self._coordinator: TransactionCoordinator | None = None

    async def producer_states(self) -> ProducerStates:
        """The producer state of every partition: the broker's when this process serves the
        directory, else this client's own (read_committed readers and transactional appends
        must share one)."""
        if self._broker is not None:
            states: ProducerStates = self._broker.producers
            return states
        if self._producer_states is None:
            log = self.log
            self._producer_states = await asyncio.to_thread(
                ProducerStates, log.data_dir, trust_snapshots=log.clean_shutdown
            )
        return self._producer_states

    async def transaction_coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator: the broker's, or this client's own, recovered (open
        transactions of a process that died are aborted) before it is handed out."""
        if self._broker is not None:
            coordinator: TransactionCoordinator | None = self._broker.transactions
            if coordinator is None:
                raise TransportError("the embedded log is served with transactions turned off")
            return coordinator
        if self._coordinator is None:
            states = await self.producer_states()
            log = self.log
            coordinator = TransactionCoordinator(log, states, ProducerIdAllocator(log.data_dir), _run_blocking)
            await coordinator.recover()
            self._coordinator = coordinator
        return self._coordinator

    @property
    def log(self) -> LogManager:
        if self._log is None:
            raise TransportError("the embedded log client is not started")
        return self._log

    async def start(self) -> None:
        if self._log is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self._serve:
            # Imported here: a client that does not serve never loads the wire server (kio).
            from streamkit.transport.serving import serve_directory

            broker = await serve_directory(
                self.data_dir, host="127.0.0.1", port=0, default_partitions=self._default_partitions
            )
            self._broker = broker
            manager = broker.log
        else:
            manager = LogManager(self.data_dir, clock=self.clock, default_partitions=self._default_partitions)
            await asyncio.to_thread(manager.open)
        manager.add_append_listener(self._on_append)
        self._log = manager

    def group_coordinator(self) -> GroupCoordinator | None:
        """The served broker's group coordinator, which this process's consumers join as
        members (``embedded_group.py``); None when this process does not serve the log."""
        if self._broker is None:
            return None
        coordinator: GroupCoordinator = self._broker.coordinator
        return coordinator

    @property
    def served_at(self) -> str | None:
        """host:port where this process serves the log over the wire, when it does."""
        return None if self._broker is None else f"127.0.0.1:{self._broker.port}"

    async def aclose(self) -> None:
        log, self._log = self._log, None
        broker, self._broker = self._broker, None
        self._coordinator = None
        self._producer_states = None
        if broker is not None:
            await broker.aclose()  # closes the log too
        elif log is not None:
            await asyncio.to_thread(log.close)

    def _on_append(self, tp: TopicPartition, high_watermark: int) -> None:
        if threading.get_ident() == self._loop_thread:
            self._wake(tp)
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, tp)

    def _wake(self, tp: TopicPartition) -> None:
        for consumer in self._consumers:
            consumer.notify(tp)

    async def ensure_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> int:
        log = self.log
        if log.has_topic(name):
            return log.describe_topic(name).partitions
        try:
            return log.create_topic(name, partitions, config).partitions
        except LogError as exc:
            if log.has_topic(name):
                return log.describe_topic(name).partitions
            raise TransportError(f"cannot create topic {name!r}: {exc}") from exc

    async def partition_count(self, name: str) -> int | None:
        log = self.log
        return log.describe_topic(name).partitions if log.has_topic(name) else None

    def producer(self) -> EmbeddedProducer:
        return EmbeddedProducer(self)

    def transactional_producer(
        self, transactional_id: str, *, timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    ) -> EmbeddedTransactionalProducer:
        return EmbeddedTransactionalProducer(self, transactional_id, timeout_ms)

    def consumer(
        self, group_id: str, *, auto_offset_reset: str = "earliest", isolation_level: str = "read_uncommitted"
    ) -> EmbeddedConsumer:
        consumer = EmbeddedConsumer(self, group_id, auto_offset_reset, check_isolation_level(isolation_level))
        self._consumers.append(consumer)
        return consumer

    def reader(self, *, isolation_level: str = "read_uncommitted") -> EmbeddedReader:
        return EmbeddedReader(self, check_isolation_level(isolation_level))

    def _forget(self, consumer: EmbeddedConsumer) -> None:
        if consumer in self._consumers:
            self._consumers.remove(consumer)


class _Batch:
    """Records for one partition, encoded as they are sent; appended whole."""

    __slots__ = ("builder", "future")

    def __init__(self, future: asyncio.Future[int]) -> None:
        self.future = future
        self.builder = BatchBuilder()

    def full(self) -> bool:
        return len(self.builder) >= MAX_BATCH_RECORDS or self.builder.size >= MAX_BATCH_BYTES

    def encoded(self) -> bytes:
        return self.builder.build()


class EmbeddedProducer:
    def __init__(self, client: EmbeddedLogClient) -> None:
        self._client = client
        self._buffers: dict[TopicPartition, _Batch] = {}
        self._scheduled = False
        self._inflight: set[asyncio.Future[int]] = set()
        self._tasks: set[asyncio.Future[None]] = set()
        self._failures: list[TransportError] = []

    async def start(self) -> None:
        self._client.log  # noqa: B018  (raises when the client is not started)

    async def aclose(self) -> None:
        await self.flush()

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
        ts = self._client.clock.now_ms() if timestamp_ms is None else timestamp_ms
        batch, index = self._add(topic, partition, key, value, headers, ts)
        if batch.full():
            tp = TopicPartition(topic, partition)
            await self._append(tp, self._buffers.pop(tp))
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
        added, _index = self._add(topic, partition, key, value, headers, timestamp_ms)
        if not added.full():
            return None
        tp = TopicPartition(topic, partition)
        batch = self._buffers.pop(tp)
        partition_log = self._partition(tp, batch)
        if partition_log is None:
            return None
        if partition_log.config.flush_messages:
            # fsync per append happens off the loop: the caller waits for it (back-pressure).
            return self._append(tp, batch)
        self._append_inline(partition_log, batch)
        return None

    def _add(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None,
        headers: Sequence[Header], ts: int,
    ) -> tuple[_Batch, int]:
        """Buffer a record in its partition's batch: (batch, index in it)."""
        # A plain tuple finds the TopicPartition key (equal and same hash) without building one.
        batch = self._buffers.get((topic, partition))  # type: ignore[call-overload]
        if batch is None:
            tp = TopicPartition(topic, partition)
            batch = self._buffers[tp] = _Batch(asyncio.get_running_loop().create_future())
        try:
            index = batch.builder.append(key, value, ts, headers)
        except InvalidRecordError as exc:
            raise TransportError(f"cannot encode a record for {topic}-{partition}: {exc}") from exc
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_soon)
        return batch, index

    def _flush_soon(self) -> None:
        self._scheduled = False
        buffers, self._buffers = self._buffers, {}
        for tp, batch in buffers.items():
            partition = self._partition(tp, batch)
            if partition is None:
                continue
            if partition.config.flush_messages:
                # fsync per append: off the event loop; flush() waits on the batch's future.
                self._inflight.add(batch.future)
                task = asyncio.ensure_future(self._append(tp, batch))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            else:
                self._append_inline(partition, batch)

    def _partition(self, tp: TopicPartition, batch: _Batch) -> Partition | None:
        try:
            return self._client.log.partition(tp.topic, tp.partition)
        except (UnknownTopicError, TransportError) as exc:
            self._fail(batch, TransportError(f"cannot send to {tp}: {exc}"))
            return None

    def _append_inline(self, partition: Partition, batch: _Batch) -> None:
        try:
            result = partition.append(batch.encoded(), verify_crc=False)
        except LogError as exc:
            self._fail(batch, TransportError(f"append to {partition.tp} failed: {exc}"))
        else:
            batch.future.set_result(result.base_offset)

    async def _append(self, tp: TopicPartition, batch: _Batch) -> None:
        partition = self._partition(tp, batch)
        if partition is None:
            return
        self._inflight.add(batch.future)
        try:
            data = batch.encoded()
            if partition.config.flush_messages:
                result = await asyncio.to_thread(partition.append, data, verify_crc=False)
            else:
                result = partition.append(data, verify_crc=False)
        except LogError as exc:
            self._fail(batch, TransportError(f"append to {tp} failed: {exc}"))
        else:
            batch.future.set_result(result.base_offset)
        finally:
            self._inflight.discard(batch.future)

    def _fail(self, batch: _Batch, error: TransportError) -> None:
        batch.future.set_exception(error)
        batch.future.exception()  # retrieved here; flush() reports it
        self._failures.append(error)

    async def flush(self) -> None:
        """Append what is buffered and wait for it; raise the first failure since the last
        flush (a record that was not stored must not be committed past)."""
        if self._buffers:
            buffers, self._buffers = self._buffers, {}
            for tp, batch in buffers.items():
                await self._append(tp, batch)
        if self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
        if self._failures:
            first, self._failures = self._failures[0], []
            raise first


_FENCES = (TxnErrorCode.INVALID_PRODUCER_EPOCH, TxnErrorCode.INVALID_PRODUCER_ID_MAPPING)


class EmbeddedTransactionalProducer(EmbeddedProducer):
    """A transactional producer over the log in this process (``TransactionalProducer``).

    Every record sent belongs to the open transaction; ``commit_transaction`` appends what is
    buffered, adds the consumer group's offsets to the transaction and commits it: the
    coordinator writes COMMIT markers to every partition the transaction touched and applies
    the offsets, durably decided first (``log/txn/coordinator.py``). Batches are appended in the
    order they were sealed, one after another, each after its partitions joined the
    transaction (one coordinator call per seal for the partitions new to it).
    """

    def __init__(self, client: EmbeddedLogClient, transactional_id: str, timeout_ms: int) -> None:
        super().__init__(client)
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._producer_id = -1
        self._epoch = -1
        self._sequences: dict[TopicPartition, int] = {}
        self._in_txn: set[TopicPartition] = set()
        self._tail: asyncio.Future[None] | None = None
        self._coordinator: TransactionCoordinator | None = None
        self._states: ProducerStates | None = None
        self.commits = 0
        self.aborts = 0
        self._fenced = False  # a newer epoch exists: abort_transaction takes one too
        self.fenced = False  # the log refused this producer once for a newer instance (sticky)

    def _fence(self) -> None:
        self._fenced = self.fenced = True

    def _txn_error(self, error: TxnErrorCode, what: str) -> TransportError:
        if error in _FENCES:
            self._fence()
            return ProducerFencedError(f"{what}: the producer was fenced ({error.name})")
        return TransactionAbortedError(f"{what}: {error.name}")

    @property
    def transaction_open(self) -> bool:
        return bool(self._in_txn)

    async def start(self) -> None:
        self._coordinator = await self._client.transaction_coordinator()
        self._states = await self._client.producer_states()
        await self._init_id()

    async def _init_id(self) -> None:
        assert self._coordinator is not None
        error, pid, epoch = await self._coordinator.init_producer_id(self.transactional_id, self.timeout_ms)
        if error is not TxnErrorCode.NONE:
            raise TransportError(f"cannot start transactional producer {self.transactional_id!r}: {error.name}")
        self._producer_id, self._epoch = pid, epoch
        self._sequences.clear()
        self._in_txn.clear()

    def send_nowait(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Sequence[Header] = (),
    ) -> Awaitable[None] | None:
        added, _index = self._add(topic, partition, key, value, headers, timestamp_ms)
        if not added.full():
            return None
        tp = TopicPartition(topic, partition)
        return self._seal([(tp, self._buffers.pop(tp))])

    async def _append(self, tp: TopicPartition, batch: _Batch) -> None:
        await self._seal([(tp, batch)])

    def _flush_soon(self) -> None:
        self._scheduled = False
        buffers, self._buffers = self._buffers, {}
        if buffers:
            self._seal(list(buffers.items()))

    def _seal(self, batches: list[tuple[TopicPartition, _Batch]]) -> asyncio.Future[None]:
        """Queue ``batches`` for appending after every batch sealed before them."""
        previous = self._tail
        for _tp, batch in batches:
            self._inflight.add(batch.future)
        task = asyncio.ensure_future(self._append_after(previous, batches))
        self._tail = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _append_after(
        self, previous: asyncio.Future[None] | None, batches: list[tuple[TopicPartition, _Batch]]
    ) -> None:
        try:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            await self._append_transactional(batches)
        finally:
            for _tp, batch in batches:
                self._inflight.discard(batch.future)
                if not batch.future.done():
                    self._fail(batch, TransactionAbortedError("the transaction ended before this batch was appended"))

    async def _append_transactional(self, batches: list[tuple[TopicPartition, _Batch]]) -> None:
        coordinator, states = self._coordinator, self._states
        if coordinator is None or states is None:
            raise TransportError("the transactional producer is not started")
        new = [tp for tp in dict.fromkeys(tp for tp, _b in batches) if tp not in self._in_txn]
        if new:
            errors = await coordinator.add_partitions(self.transactional_id, self._producer_id, self._epoch, new)
            bad = {tp: e for tp, e in errors.items() if e is not TxnErrorCode.NONE}
            if bad:
                error = self._txn_error(next(iter(bad.values())), f"cannot add {', '.join(map(str, bad))} to the transaction")
                for _tp, batch in batches:
                    self._fail(batch, error)
                return
            self._in_txn.update(new)
        for tp, batch in batches:
            partition = self._partition(tp, batch)
            if partition is None:
                continue
            sequence = self._sequences.get(tp, 0)
            try:
                data = batch.builder.build(
                    producer_id=self._producer_id, producer_epoch=self._epoch,
                    base_sequence=sequence, transactional=True,
                )
                header = check_batch(data, verify_crc=False)
                if partition.config.flush_messages:
                    result = await asyncio.to_thread(states.append, partition, header, data, crc_checked=True)
                else:
                    result = states.append(partition, header, data, crc_checked=True)
            except InvalidProducerEpochError as exc:
                self._fence()
                self._fail(batch, ProducerFencedError(f"append to {tp} refused, the producer was fenced: {exc}"))
                continue
            except LogError as exc:
                self._fail(batch, TransportError(f"append to {tp} failed: {exc}"))
                continue
            self._sequences[tp] = (sequence + len(batch.builder)) % _SEQUENCE_MODULUS
            batch.future.set_result(result.base_offset)

    async def flush(self) -> None:
        if self._buffers:
            buffers, self._buffers = self._buffers, {}
            self._seal(list(buffers.items()))
        await drain(self._tasks, self._inflight)
        if self._failures:
            first, self._failures = self._failures[0], []
            raise first

    async def commit_transaction(self, offsets: Mapping[TopicPartition, int], group_id: str) -> None:
        """Append what is buffered, then commit it with ``offsets`` for ``group_id``."""
        await self.flush()
        coordinator = self._coordinator
        assert coordinator is not None
        if not self._in_txn and not offsets:
            return
        tid, pid, epoch = self.transactional_id, self._producer_id, self._epoch
        if offsets:
            error = await coordinator.add_offsets(tid, pid, epoch, group_id)
            if error is TxnErrorCode.NONE:
                error = coordinator.txn_offset_commit(
                    tid, pid, epoch, group_id, {tp: (offset, "") for tp, offset in offsets.items()}
                )
            if error is not TxnErrorCode.NONE:
                raise self._txn_error(error, "cannot add the offsets to the transaction")
        error = await coordinator.end_txn(tid, pid, epoch, True)
        if error is not TxnErrorCode.NONE:
            raise self._txn_error(error, "the transaction did not commit")
        self._in_txn.clear()
        self.commits += 1

    async def abort_transaction(self) -> None:
        """Drop what is buffered and abort the open transaction. After a fence (the
        coordinator aborted it and bumped the epoch) this takes a new epoch, so the producer
        can go on."""
        await self._abort()
        if self._fenced:
            # Fenced: the coordinator aborted our transaction already; a new epoch goes on
            # (and fences the instance that fenced us: one worker owns the embedded log).
            await self._init_id()
            self._fenced = False

    async def _abort(self) -> None:
        buffers, self._buffers = self._buffers, {}
        for batch in buffers.values():
            self._fail(batch, TransactionAbortedError("the transaction was aborted"))
        await drain(self._tasks, self._inflight)
        self._failures.clear()
        coordinator = self._coordinator
        assert coordinator is not None
        if self._in_txn and not self._fenced:
            error = await coordinator.end_txn(self.transactional_id, self._producer_id, self._epoch, False)
            if error in _FENCES:
                self._fence()
            else:
                self._fenced = error is not TxnErrorCode.NONE
        self._in_txn.clear()
        self.aborts += 1

    async def aclose(self) -> None:
        """Abort what was not committed: only ``commit_transaction`` makes records visible.
        A fenced producer ends as it is (a new epoch would fence the newer instance)."""
        if self._coordinator is not None and (self._in_txn or self._buffers or any(not t.done() for t in self._tasks)):
            await self._abort()



class EmbeddedConsumer:
    """A member of a consumer group on the embedded log.

    When this process serves the data directory, the consumer joins its group on the served
    broker's coordinator (``embedded_group.py``), beside members in other processes, and holds
    the partitions the group assigns it. Otherwise it is the group's only member and holds
    every partition of the topics it subscribes to.
    """

    def __init__(
        self, client: EmbeddedLogClient, group_id: str, auto_offset_reset: str, isolation_level: str = "read_uncommitted"
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise TransportError(f"auto_offset_reset must be earliest or latest, not {auto_offset_reset!r}")
        self._client = client
        self.isolation_level = isolation_level
        self._committed_only = isolation_level == READ_COMMITTED
        self._states: ProducerStates | None = None
        self.group_id = group_id
        self._reset = auto_offset_reset
        self._topics: list[str] = []
        self._listener: RebalanceListener | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._unavailable: dict[TopicPartition, str] = {}
        self._event = asyncio.Event()
        self._started = False
        self._member = MemberInfo()
        self._membership: GroupMembership | None = None
        self._group: GroupInfo | None = None
        self._heartbeats: asyncio.Task[None] | None = None

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener) -> None:
        self._topics = list(topics)
        self._listener = listener

    def advertise(self, info: MemberInfo) -> None:
        self._member = info

    def group_info(self) -> GroupInfo | None:
        """From the last assignment; the only member owns every partition, keeps no standbys."""
        if self._membership is not None:
            return self._group
        counts = [len(self._client.log.partitions(t)) for t in self._topics] if self._started else []
        return GroupInfo({p: self._member.url for p in range(max(counts, default=0))}, frozenset())

    def notify(self, tp: TopicPartition) -> None:
        if tp in self._positions:
            self._event.set()

    async def start(self) -> None:
        log = self._client.log
        if self._committed_only:
            self._states = await self._client.producer_states()
        coordinator = self._client.group_coordinator()
        if coordinator is not None and self._topics:
            self._membership = GroupMembership(
                coordinator, self.group_id, self._topics, self._member, self._partition_count
            )
            assigned = await self._join()
        else:
            assigned = {part.tp for topic in self._topics for part in log.partitions(topic)}
        self._take(assigned)
        self._started = True
        if self._listener is not None:
            await self._listener.on_partitions_assigned(set(self._positions))
        if self._membership is not None:
            self._heartbeats = asyncio.ensure_future(self._heartbeat_loop())
            self._heartbeats.set_name(f"streamkit:heartbeat:{self.group_id}")

    def _partition_count(self, topic: str) -> int | None:
        log = self._client.log
        return len(log.partitions(topic)) if log.has_topic(topic) else None

    async def _join(self) -> set[TopicPartition]:
        assert self._membership is not None
        assigned, self._group = await self._membership.join()
        return assigned

    def _take(self, assigned: set[TopicPartition]) -> None:
        """Positions of newly assigned partitions: committed, else per auto_offset_reset."""
        log = self._client.log
        committed = log.offsets.fetch(self.group_id)
        for tp in sorted(assigned):
            if tp in committed:
                self._positions[tp] = committed[tp][0]
            else:
                try:
                    self._positions[tp] = self._reset_position(log.partition(tp.topic, tp.partition))
                except LogError:
                    self._positions[tp] = 0
        self._paused &= set(self._positions)

    async def _heartbeat_loop(self) -> None:
        """Heartbeats; when the group rebalances, revoke everything held, rejoin, take what
        the new generation assigns (eager, as the Kafka driver)."""
        membership = self._membership
        assert membership is not None
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            if await membership.heartbeat():
                continue
            held = set(self._positions)
            logger.info("group %s rebalances: giving up %d partitions and rejoining", self.group_id, len(held))
            if self._listener is not None:
                await self._listener.on_partitions_revoked(held)
            self._positions.clear()
            self._paused.clear()
            try:
                assigned = await self._join()
            except TransportError as exc:
                logger.warning("group %s: rejoin failed, retrying: %s", self.group_id, exc)
                continue
            self._take(assigned)
            if self._listener is not None:
                await self._listener.on_partitions_assigned(set(self._positions))

    def _reset_position(self, part: Partition) -> int:
        return part.log_start_offset if self._reset == "earliest" else part.high_watermark

    async def aclose(self) -> None:
        heartbeats, self._heartbeats = self._heartbeats, None
        if heartbeats is not None:
            heartbeats.cancel()
            await asyncio.gather(heartbeats, return_exceptions=True)
        if self._started and self._listener is not None:
            await self._listener.on_partitions_revoked(set(self._positions))
        self._started = False
        self._positions.clear()
        if self._membership is not None:
            await self._membership.leave()  # the others rebalance now, not after our session
        self._client._forget(self)

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def pause(self, tps: Sequence[TopicPartition]) -> None:
        self._paused.update(tps)

    def resume(self, tps: Sequence[TopicPartition]) -> None:
        self._paused.difference_update(tps)
        self._event.set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def position(self, tp: TopicPartition) -> int | None:
        return self._positions.get(tp)

    def highwater(self, tp: TopicPartition) -> int | None:
        try:
            return self._client.log.partition(tp.topic, tp.partition).high_watermark
        except LogError:
            return None

    def unavailable(self) -> dict[TopicPartition, str]:
        return dict(self._unavailable)

    def _reset_out_of_range(self, tp: TopicPartition, part: Partition, position: int) -> int:
        reset = self._reset_position(part)
        logger.warning(
            "%s: position %d is out of range [%d, %d] (the topic was recreated or truncated); "
            "resetting to the %s offset %d (auto_offset_reset)",
            tp, position, part.log_start_offset, part.high_watermark, self._reset, reset,
        )
        self._positions[tp] = reset
        return reset

    async def getmany(self, timeout_ms: int, max_records: int) -> Mapping[TopicPartition, Sequence[Record]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        if self._states is not None:
            await _load_states(self._client, self._states, self._positions)
        while True:
            self._event.clear()
            out = self._read(max_records)
            if out:
                return out
            remaining = deadline - loop.time()
            if remaining <= 0:
                return {}
            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except TimeoutError:
                return {}

    def _read(self, max_records: int) -> dict[TopicPartition, list[Record]]:
        log = self._client.log
        out: dict[TopicPartition, list[Record]] = {}
        budget = max_records
        for tp, position in self._positions.items():
            if budget <= 0:
                break
            if tp in self._paused:
                continue
            try:
                part = log.partition(tp.topic, tp.partition)
            except UnknownTopicError as exc:
                if tp not in self._unavailable:
                    logger.warning("%s cannot be read: %s", tp, exc)
                self._unavailable[tp] = f"unknown topic or partition: {exc}"
                continue
            if self._unavailable.pop(tp, None) is not None:
                logger.warning("%s can be read again", tp)
            if position > part.high_watermark:
                position = self._reset_out_of_range(tp, part, position)
            if position >= part.high_watermark:
                continue
            if self._states is not None:
                try:
                    read = _read_committed(part, self._states, position, budget)
                except OffsetOutOfRangeError:
                    self._reset_out_of_range(tp, part, position)
                    continue
                if read is None:
                    continue
                committed, self._positions[tp] = read
                if committed:
                    out[tp] = committed
                    budget -= len(committed)
                continue
            try:
                data = part.read(position, MAX_FETCH_BYTES)
            except OffsetOutOfRangeError:
                position = self._reset_out_of_range(tp, part, position)
                data = part.read(position, MAX_FETCH_BYTES) if position < part.high_watermark else b""
            records: list[Record] = []
            # Batches decode lazily: stop once the budget is met (a read returns up to
            # MAX_FETCH_BYTES, often several times the records asked for).
            for header, batch in decode_batches(data, verify_crc=False):
                if header.base_offset >= position:
                    records.extend(batch)
                else:  # the batch holding ``position``: drop the records before it
                    records.extend(r for r in batch if r.offset >= position)
                if len(records) >= budget:
                    break
            if len(records) > budget:
                records = records[:budget]
            if records:
                out[tp] = records
                budget -= len(records)
                self._positions[tp] = records[-1].offset + 1
            elif data:
                # Only control batches or compacted-away records: skip past them.
                self._positions[tp] = _next_offset(data, position)
        return out

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if offsets:
            entries = {tp: (offset, "") for tp, offset in offsets.items()}
            await asyncio.to_thread(self._client.log.offsets.commit, self.group_id, entries)

    async def committed(self, tp: TopicPartition) -> int | None:
        found = self._client.log.offsets.fetch(self.group_id, [tp])
        return found[tp][0] if tp in found else None


class EmbeddedReader:
    """A ``PartitionReader`` straight over the data directory's partitions."""

    def __init__(self, client: EmbeddedLogClient, isolation_level: str = "read_uncommitted") -> None:
        self._client = client
        self._committed_only = isolation_level == READ_COMMITTED

    def _partition(self, tp: TopicPartition) -> Partition:
        try:
            return self._client.log.partition(tp.topic, tp.partition)
        except LogError as exc:
            raise TransportError(f"cannot read {tp}: {exc}") from exc

    async def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        part = self._partition(tp)
        return part.log_start_offset, part.high_watermark

    async def read(self, tp: TopicPartition, offset: int, max_records: int) -> ReadChunk:
        part = self._partition(tp)
        high_watermark = part.high_watermark
        if offset >= high_watermark:
            return ReadChunk((), offset, high_watermark)
        if self._committed_only:
            states = await self._client.producer_states()
            await _load_states(self._client, states, [tp])
            try:
                read = _read_committed(part, states, offset, max_records)
            except OffsetOutOfRangeError as exc:
                raise TransportError(f"cannot read {tp} from offset {offset}: {exc}") from exc
            if read is None:
                return ReadChunk((), offset, high_watermark)
            return ReadChunk(read[0], read[1], high_watermark)
        try:
            data = part.read(offset, MAX_FETCH_BYTES)
        except OffsetOutOfRangeError as exc:
            raise TransportError(f"cannot read {tp} from offset {offset}: {exc}") from exc
        records: list[Record] = []
        for header, batch in decode_batches(data, verify_crc=True):
            records.extend(batch if header.base_offset >= offset else (r for r in batch if r.offset >= offset))
            if len(records) >= max_records:
                break
        if records:
            return ReadChunk(records, records[-1].offset + 1, high_watermark)
        return ReadChunk((), _next_offset(data, offset) if data else offset, high_watermark)

    async def aclose(self) -> None:
        return None  # nothing of its own to release: the client owns the log


async def _run_blocking(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


async def _load_states(client: EmbeddedLogClient, states: ProducerStates, tps: Any) -> None:
    """Load the producer state of ``tps`` not loaded yet (a scan of batch headers: off the loop)."""
    log = client.log
    for tp in tps:
        if states.peek(tp) is None:
            try:
                part = log.partition(tp.topic, tp.partition)
            except LogError:
                continue
            await asyncio.to_thread(states.load, part)


def _read_committed(
    part: Partition, states: ProducerStates, position: int, max_records: int
) -> tuple[list[Record], int] | None:
    """Committed records of ``part`` from ``position`` and where to go on; None when nothing
    below the last stable offset is left to read."""
    state = states.peek(part.tp)
    stable = last_stable_offset(state, part.high_watermark)
    if position >= stable:
        return None
    data = part.read(position, MAX_FETCH_BYTES)
    if not data:
        return None
    records, next_offset = committed_records(data, position, stable, list(state.aborted) if state else [], max_records)
    return records, next_offset


def _next_offset(data: bytes, position: int) -> int:
    last = position
    for _pos, header in iter_batches(data):
        last = max(last, header.next_offset)
    return last
