"""The Kafka driver: ``streamkit broker`` or any Kafka cluster, through aiokafka.

The one module that imports aiokafka. Consumers use the range assignor, so partition p of
every subscribed topic lands on the same member: a partition task that reads topic A's
partition p and its repartition topic's partition p (``group_by``) finds both local, as in
Kafka Streams. Offsets are committed by the engine only (auto-commit is off).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from streamkit._core.types import TopicPartition
from streamkit.transport.base import (
    ConsumerRecord,
    Header,
    RebalanceListener,
    RecordMetadata,
    TransportError,
)


class KafkaLogClient:
    def __init__(self, bootstrap_servers: str, *, url: str | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.url = url or f"kafka://{bootstrap_servers}"
        self._admin: AIOKafkaAdminClient | None = None

    async def start(self) -> None:
        if self._admin is None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
            try:
                await admin.start()
            except KafkaError as exc:
                await admin.close()
                raise TransportError(f"cannot reach Kafka at {self.bootstrap_servers}: {exc}") from exc
            self._admin = admin

    async def aclose(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()

    def _admin_client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            raise TransportError("the Kafka log client is not started")
        return self._admin

    async def ensure_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> int:
        # Create first, describe after: a metadata request for a missing topic may auto-create
        # it on the broker with the default partition count instead of ours.
        admin = self._admin_client()
        try:
            response = await admin.create_topics(
                [NewTopic(name, partitions, 1, topic_configs=dict(config or {}))]
            )
        except TopicAlreadyExistsError:
            response = None
        except KafkaError as exc:
            raise TransportError(f"cannot create topic {name!r}: {exc}") from exc
        for _topic, code, *rest in getattr(response, "topic_errors", ()):
            if code not in (0, TopicAlreadyExistsError.errno):
                message = rest[0] if rest else ""
                raise TransportError(f"cannot create topic {name!r}: error {code} {message or ''}".rstrip())
        for _ in range(50):
            count = await self.partition_count(name)
            if count is not None:
                return count
            await asyncio.sleep(0.1)
        raise TransportError(f"topic {name!r} did not appear after creation")

    async def partition_count(self, name: str) -> int | None:
        admin = self._admin_client()
        try:
            described: list[dict[str, Any]] = await admin.describe_topics([name])
        except KafkaError:
            return None
        for topic in described:
            if topic.get("topic") == name and topic.get("error_code", 0) == 0:
                return len(topic.get("partitions", [])) or None
        return None

    def producer(self) -> KafkaProducer:
        return KafkaProducer(self.bootstrap_servers)

    def consumer(self, group_id: str, *, auto_offset_reset: str = "earliest") -> KafkaConsumer:
        return KafkaConsumer(self.bootstrap_servers, group_id, auto_offset_reset)


class KafkaProducer:
    def __init__(self, bootstrap_servers: str) -> None:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            acks="all",
            linger_ms=5,
            max_batch_size=1024 * 1024,
            request_timeout_ms=30_000,
        )
        self._started = False
        self._pending: set[asyncio.Future[Any]] = set()

    async def start(self) -> None:
        if not self._started:
            try:
                await self._producer.start()
            except KafkaError as exc:
                await self._producer.stop()
                raise TransportError(f"producer cannot connect: {exc}") from exc
            self._started = True

    async def aclose(self) -> None:
        if self._started:
            self._started = False
            await self._producer.stop()  # flushes what is buffered

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
        await self.start()
        try:
            future = await self._producer.send(
                topic,
                value=value,
                key=key,
                partition=partition,
                timestamp_ms=timestamp_ms,
                headers=[(k, v if v is not None else b"") for k, v in headers] or None,
            )
        except KafkaError as exc:
            raise TransportError(f"send to {topic}-{partition} failed: {exc}") from exc
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return _Metadata(future)

    async def flush(self) -> None:
        if not self._started:
            return
        await self._producer.flush()
        pending = list(self._pending)
        if pending:
            results = await asyncio.gather(*pending, return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise TransportError(f"a send failed: {result}") from result


class _Metadata:
    """Awaitable ``RecordMetadata`` of one send; nothing happens if nobody awaits it."""

    __slots__ = ("_future",)

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self._future = future

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        try:
            md = yield from self._future.__await__()
        except KafkaError as exc:
            raise TransportError(f"send failed: {exc}") from exc
        return RecordMetadata(md.topic, md.partition, md.offset, md.timestamp)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, listener: RebalanceListener) -> None:
        self._listener = listener

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._listener.on_partitions_revoked({TopicPartition(tp.topic, tp.partition) for tp in revoked})

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self._listener.on_partitions_assigned({TopicPartition(tp.topic, tp.partition) for tp in assigned})


class KafkaConsumer:
    def __init__(self, bootstrap_servers: str, group_id: str, auto_offset_reset: str) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            partition_assignment_strategy=(RangePartitionAssignor,),
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            max_poll_interval_ms=300_000,
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        self.group_id = group_id
        self._topics: list[str] = []
        self._listener: RebalanceListener | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._started = False

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener) -> None:
        self._topics = list(topics)
        self._listener = listener

    async def start(self) -> None:
        try:
            await self._consumer.start()
        except KafkaError as exc:
            await self._consumer.stop()
            raise TransportError(f"consumer cannot connect: {exc}") from exc
        self._started = True
        if self._topics:
            listener = _Listener(self._listener) if self._listener is not None else ConsumerRebalanceListener()
            self._consumer.subscribe(self._topics, listener=listener)

    async def aclose(self) -> None:
        if self._started:
            self._started = False
            await self._consumer.stop()

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

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if not offsets:
            return
        try:
            await self._consumer.commit({KafkaTP(tp.topic, tp.partition): off for tp, off in offsets.items()})
        except KafkaError as exc:
            raise TransportError(f"commit failed: {exc}") from exc

    async def committed(self, tp: TopicPartition) -> int | None:
        if not self._started:
            await self.start()  # an unsubscribed member can still read the group's offsets
        result = await self._consumer.committed(KafkaTP(tp.topic, tp.partition))
        return None if result is None else int(result)

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
        return self._positions.get(tp)

    def highwater(self, tp: TopicPartition) -> int | None:
        hw = self._consumer.highwater(KafkaTP(tp.topic, tp.partition))
        return None if hw is None else int(hw)
