"""Log tools over the Kafka wire protocol, for command-line use: ``streamkit broker`` or Kafka.

One of the two modules that import aiokafka (the engine's driver is ``transport.kafka``).
``KafkaTools`` is what ``streamkit topics/produce/consume --bootstrap`` need and no more:
list, create, delete and describe topics (admin client, Metadata, ListOffsets and
DescribeConfigs); delete records below an offset (DeleteRecords); append records to a partition as one batch (the producer's
``create_batch``/``send_batch``); read a partition from an offset (a group-less consumer
with ``assign``/``seek``/``getmany``); read a group's committed offsets and commit offsets
for a group without joining it (generation -1, the "simple consumer" commit).

Invariants:

* nothing here asks the broker to auto-create a topic: topics are looked up in the Metadata
  of all topics (a request naming a missing topic creates it on brokers that auto-create,
  with the broker's default partition count), a client is only told to track a topic by name
  once that lookup found it, and ``delete_topic`` first closes the clients whose metadata
  refreshes would name it. (Another process still reading a topic that is deleted may bring
  it back on such a broker, as any Kafka client does.)
* a topic created or grown here can be written at once: ``create_topic``, ``ensure_topic`` and
  ``add_partitions`` return when every partition has a leader that answers ListOffsets (on
  Kafka, metadata and leaders reach the brokers a moment after CreateTopics/CreatePartitions
  answered); and every writer waits, bounded, for its producer's metadata to show the
  partition (``wait_for_partition``), which aiokafka's producer asserts instead of checking.
  A partition the cluster does not have is a ``PartitionNotFoundError`` naming the range.
* offsets follow Kafka: ``FetchResult.next_offset`` and committed offsets are the offset of
  the next record to read;
* aiokafka errors leave as ``TransportError`` subclasses, with ``raise ... from``:
  ``BrokerUnreachableError`` (no connection), ``TopicNotFoundError``, ``BrokerRejectedError``
  (the broker refused the request and said why), ``PartitionNotFoundError`` (the topic has no
  such partition), ``FetchOutOfRangeError`` (the offset lies outside the partition's log),
  and plain ``TransportError`` for the rest.

Usage::

    async with KafkaTools("127.0.0.1:9092") as tools:
        await tools.create_topic("orders", 3, {"retention.ms": "3600000"})
        first = await tools.produce("orders", 0, records)  # NewRecord-shaped, one batch
        got = await tools.fetch("orders", 0, first, max_bytes=1 << 20)
        await tools.commit("billing", "orders", {0: got.next_offset})
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    MessageSizeTooLargeError,
    PolicyViolationError,
    RecordListTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    for_code,
)
from aiokafka.errors import OffsetOutOfRangeError as KafkaOffsetOutOfRange
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest

from streamkit.transport.base import Header, TransportError
from streamkit.transport.kafka_security import aiokafka_security, refusal
from streamkit.transport.security import PLAINTEXT, ClientSecurity

_UNKNOWN_TOPIC: int = UnknownTopicOrPartitionError.errno
_EXISTS: int = TopicAlreadyExistsError.errno
_CODECS: dict[str, str | None] = {"none": None, "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}
_FETCH_WAIT_MS = 100  # the broker's long-poll wait: how soon an empty partition is known empty
_POLL_MS = 20  # how often fetch() looks at what the background fetcher has learnt
_DEFAULT_FETCH_BYTES = 1024 * 1024
# How long a topic or partition the cluster's metadata does not show may still be on its way
# (created or grown by another client a moment ago, through another broker) before a writer
# says it does not exist.
_SETTLE_S = 2.0
_RETRY_S = 0.05  # between metadata lookups while waiting for a topic or partition
_LATEST = -1  # ListOffsets: the offset after the last record


# -- closing a client whose log may not answer (``transport/kafka.py``'s module doc) ----------


def cancelling() -> bool:
    """Whether the running task is being cancelled: a ``CancelledError`` it catches is its
    own, not one aiokafka let out of a task of its own."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def end_tasks(tasks: Iterable[asyncio.Future[Any] | None]) -> None:
    """Cancel aiokafka's background ``tasks`` and wait until they end; what they ended with is
    read and dropped (asyncio would report it as never retrieved)."""
    every = [t for t in tasks if t is not None]
    pending = [t for t in every if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    for task in every:
        if not task.cancelled():
            task.exception()


async def abandon_consumer(consumer: AIOKafkaConsumer) -> None:
    """Close ``consumer`` without waiting for the log: its coordinator's and fetcher's tasks
    end (no LeaveGroup, no commit), its connections close. aiokafka has no such close; these
    are the parts its ``stop`` ends one by one, each waiting for the log."""
    consumer._closed = True
    tasks: list[asyncio.Future[Any] | None] = []
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is not None:
        closing = getattr(coordinator, "_closing", None)
        if closing is not None and not closing.done():
            closing.set_result(None)
        for name in ("_coordination_task", "_heartbeat_task", "_commit_refresh_task", "_reset_committed_task"):
            tasks.append(getattr(coordinator, name, None))
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is not None:
        fetcher._closed = True
        tasks.append(getattr(fetcher, "_fetch_task", None))
        tasks.extend(getattr(fetcher, "_pending_tasks", ()))
    await end_tasks(tasks)
    # aiokafka commits through ``asyncio.shield(_do_commit_offsets(...))``: a commit cancelled
    # while its request was out leaves that task behind, and a shield drops its outcome, so
    # the failure that closing the connection gives it would be logged as never retrieved.
    for task in asyncio.all_tasks():
        frame = getattr(task.get_coro(), "cr_frame", None)
        if frame is not None and frame.f_code.co_name == "_do_commit_offsets" and frame.f_locals.get("self") is coordinator:
            task.add_done_callback(_drop_outcome)
    await consumer._client.close()


def _drop_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class BrokerUnreachableError(TransportError):
    """No connection to the broker (refused, timed out, closed)."""

    retriable = True


class TopicNotFoundError(TransportError):
    """The broker has no such topic."""

    retriable = False

    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic


class PartitionNotFoundError(TransportError):
    """The topic exists but has no such partition."""

    retriable = False

    def __init__(self, where: str, topic: str, partition: int, count: int) -> None:
        super().__init__(f"{where}: topic {topic!r} has partitions 0 to {count - 1}")
        self.topic = topic
        self.partition = partition
        self.count = count


class BrokerRejectedError(TransportError):
    """The broker refused a request; the message says why (in the broker's words if it gave them)."""

    retriable = False


class FetchOutOfRangeError(TransportError):
    """A fetch offset lies outside ``[log_start_offset, high_watermark]``."""

    retriable = False

    def __init__(self, offset: int, log_start_offset: int, high_watermark: int) -> None:
        super().__init__(f"offset {offset} is out of range [{log_start_offset}, {high_watermark}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


class OutgoingRecord(Protocol):
    """A record to append; ``streamkit.log.records.NewRecord`` has this shape."""

    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def headers(self) -> Sequence[Header]: ...


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    partition: int
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionOffsets, ...]
    config: dict[str, str]  # every config the broker reports, by its Kafka name
    internal: bool


@dataclass(frozen=True, slots=True)
class FetchedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class FetchResult:
    records: list[FetchedRecord]  # control records left out
    next_offset: int  # where the next fetch starts (past control batches and compacted gaps)
    high_watermark: int


@dataclass(frozen=True, slots=True)
class RawFetch:
    data: bytes  # record batches as the broker sent them: whole ones, then maybe a cut-off one
    high_watermark: int


@asynccontextmanager
async def _errors(what: str) -> AsyncIterator[None]:
    """aiokafka's errors as ours, prefixed with what was being done."""
    try:
        yield
    except KafkaConnectionError as exc:
        raise BrokerUnreachableError(f"{what}: lost the connection to the broker") from exc
    except KafkaError as exc:
        raise TransportError(f"{what}: {exc}") from exc


def _rejected(what: str, code: int, message: str | None) -> BrokerRejectedError:
    """The broker's own message when it gave one (it names the topic), else ``what`` and the code."""
    return BrokerRejectedError(message or f"{what} ({getattr(for_code(code), 'message', code)})")


async def wait_for_partition(client: AIOKafkaClient, topic: str, partition: int, where: str, *, timeout_s: float) -> None:
    """Return once ``client``'s metadata shows ``topic``-``partition``: an aiokafka producer's
    ``send_batch`` asserts it does (``AssertionError: Unrecognized partition``) rather than
    asking. A cache hit costs one lookup. Else the cluster's word comes from the Metadata of
    all topics (naming a missing topic would auto-create it, with the broker's default count):
    a missing topic or partition is given ``_SETTLE_S`` to appear (created by another client a
    moment ago) and then is a ``TopicNotFoundError`` / ``PartitionNotFoundError``; a present
    one is then tracked by ``client``, whose refreshes it waits for up to ``timeout_s``.
    """
    tp = KafkaTP(topic, partition)
    if partition >= 0 and client.cluster.leader_for_partition(tp) is not None:
        return
    now = time.monotonic()
    settle, deadline = now + _SETTLE_S, now + max(timeout_s, _SETTLE_S)
    while True:
        async with _errors(where):
            cluster = await client.fetch_all_metadata()
        count = len(cluster.partitions_for_topic(topic) or ())
        if 0 <= partition < count:
            break
        if partition < 0 < count or time.monotonic() >= settle:
            if not count:
                raise TopicNotFoundError(topic)
            raise PartitionNotFoundError(where, topic, partition, count)
        await asyncio.sleep(_RETRY_S)
    async with _errors(where):
        await client.add_topic(topic)  # it exists: naming it creates nothing
        while client.cluster.leader_for_partition(tp) is None:
            if time.monotonic() >= deadline:
                raise TransportError(f"{where}: the client's metadata did not show the partition in {timeout_s:g} s")
            await asyncio.sleep(_RETRY_S)
            await client.force_metadata_update()


async def wait_until_answering(client: AIOKafkaClient, name: str, where: str, *, at_least: int, timeout_s: float) -> int:
    """Wait until topic ``name`` shows at least ``at_least`` partitions, each with a leader that
    answers ListOffsets for it; its partition count. Kafka answers CreateTopics and
    CreatePartitions before every broker's metadata shows the partitions and before their
    leaders serve them ("not leader" for a moment); its advice is to wait so. The lookups read
    the Metadata of all topics: none may auto-create the topic waited for.
    """
    deadline = time.monotonic() + timeout_s
    waiting_for = "the topic to appear in the cluster's metadata"
    while True:
        async with _errors(where):
            cluster = await client.fetch_all_metadata()
        numbers = sorted(cluster.partitions_for_topic(name) or ())
        by_leader: dict[int, list[int]] = {}
        for p in numbers:
            by_leader.setdefault(cluster.leader_for_partition(KafkaTP(name, p)), []).append(p)
        if numbers and len(numbers) < at_least:
            waiting_for = f"{at_least} partitions in the cluster's metadata (it shows {len(numbers)})"
        elif numbers and -1 in by_leader:
            waiting_for = f"a leader for partitions {by_leader[-1]}"
        elif numbers:
            silent = await _not_answering(client, name, by_leader, where)
            if not silent:
                return len(numbers)
            waiting_for = f"partitions {silent} to answer ListOffsets"
        if time.monotonic() >= deadline:
            raise TransportError(f"{where}: waited {timeout_s:g} s for {waiting_for}")
        await asyncio.sleep(_RETRY_S)


async def _not_answering(client: AIOKafkaClient, name: str, by_leader: Mapping[int, list[int]], where: str) -> list[int]:
    """The partitions of ``name`` whose leader does not answer ListOffsets for them yet (a
    retriable error, or no connection to it yet); a refusal for good raises."""
    silent: list[int] = []
    for leader, numbers in sorted(by_leader.items()):
        try:
            response = await client.send(leader, OffsetRequest(-1, 0, [(name, [(p, _LATEST) for p in numbers])]))
        except KafkaError as exc:
            if not getattr(exc, "retriable", False) and not isinstance(exc, KafkaConnectionError):
                raise TransportError(f"{where}: {exc}") from exc
            silent.extend(numbers)
            continue
        answered: set[int] = set()
        for _topic, parts in response.topics:
            for number, code, *_rest in parts:
                if code and not getattr(for_code(code), "retriable", False):
                    raise _rejected(where, code, None)
                if not code:
                    answered.add(number)
        silent.extend(p for p in numbers if p not in answered)
    return sorted(silent)


class KafkaTools:
    """Connections to one cluster, opened as they are first needed and closed by ``aclose``.

    ``start`` connects the admin client, so an unreachable broker is known at once; the
    producer (one per compression codec), the fetch consumer and one consumer per group
    (for commits) are started on first use. ``fetch``'s ``max_bytes`` is the fetch
    consumer's per-partition fetch size: a call with another size restarts that consumer.
    Every client is made with ``security`` (TLS, SASL: ``security.py``); one that cannot
    connect because the broker refused its handshake or login raises
    ``BrokerAuthenticationError`` saying why (``kafka_security.py``).
    """

    def __init__(
        self, bootstrap_servers: str, *, request_timeout_ms: int = 15_000, isolation_level: str = "read_uncommitted",
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security  # TLS and SASL of every client made here (``security.py``)
        self._security_kwargs: dict[str, Any] | None = None
        self.request_timeout_ms = request_timeout_ms
        # read_committed: ``fetch`` reads below the last stable offset, without aborted records.
        self.isolation_level = isolation_level
        self._admin: AIOKafkaAdminClient | None = None
        self._producers: dict[str, AIOKafkaProducer] = {}
        self._fetcher: AIOKafkaConsumer | None = None
        self._fetch_bytes = _DEFAULT_FETCH_BYTES
        self._positions: dict[KafkaTP, int] = {}  # where the fetch consumer stands, per partition
        self._sought_ms: dict[KafkaTP, int] = {}  # when fetch() last moved a partition
        self._committers: dict[str, AIOKafkaConsumer] = {}
        self._raw: AIOKafkaClient | None = None

    async def __aenter__(self) -> KafkaTools:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        await self._admin_client()

    def _secured(self) -> dict[str, Any]:
        """aiokafka's TLS and SASL arguments, made once (the TLS context reads the CA file)."""
        if self._security_kwargs is None:
            self._security_kwargs = aiokafka_security(self.security)
        return self._security_kwargs

    @asynccontextmanager
    async def _starting(self, what: str) -> AsyncIterator[None]:
        """``_errors`` for starting a client: a secured connection that failed says why, when
        it was the TLS handshake or the SASL login (``kafka_security.refusal``)."""
        try:
            async with _errors(what):
                yield
        except BrokerUnreachableError as exc:
            refused = await refusal(self.bootstrap_servers, self.security)
            if refused is not None:
                raise refused from exc
            raise

    async def aclose(self) -> None:
        """Close every client; idempotent."""
        await self._stop_fetcher()
        clients: list[AIOKafkaProducer | AIOKafkaConsumer] = [*self._producers.values(), *self._committers.values()]
        self._producers, self._committers = {}, {}
        for client in clients:
            await client.stop()
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()
        raw, self._raw = self._raw, None
        if raw is not None:
            await raw.close()

    # -- topics --------------------------------------------------------------------------

    async def unreachable(self, timeout_s: float) -> str | None:
        """Ask every broker the admin client knows for the cluster's metadata: None when one
        answered within ``timeout_s``, else why none did (``kafka_outage.py``)."""
        admin = await self._admin_client()
        try:
            await asyncio.wait_for(admin._client.fetch_all_metadata(), timeout_s)
        except TimeoutError:
            return f"no answer to a metadata request in {timeout_s:.0f} s"
        except (KafkaError, OSError) as exc:
            return str(exc) or type(exc).__name__
        return None

    async def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return sorted(await self._partition_counts(internal_too=include_internal))

    async def create_topic(
        self, name: str, partitions: int, config: Mapping[str, str], *, replication_factor: int = 1
    ) -> None:
        """Create topic ``name``; return once every partition of it answers."""
        await self._create(name, partitions, config, replication_factor, exist_ok=False)

    async def ensure_topic(
        self, name: str, partitions: int, config: Mapping[str, str], *, replication_factor: int = 1
    ) -> int:
        """Create topic ``name`` unless it exists; once every partition of it answers, its
        partition count (an existing topic's own, which may differ from ``partitions``)."""
        return await self._create(name, partitions, config, replication_factor, exist_ok=True)

    async def replication_factor(self, name: str) -> int | None:
        """The replicas of ``name``'s partition 0 (None: no such topic). Call it for a topic
        known to exist: the Metadata request names it."""
        admin = await self._admin_client()
        async with _errors(f"cannot describe topic {name!r}"):
            topics = await admin.describe_topics([name])
        for topic in topics:
            if topic["topic"] == name and not topic["error_code"]:
                first = min(topic["partitions"], key=lambda p: p["partition"], default=None)
                return None if first is None else len(first["replicas"])
        return None

    async def partition_count(self, name: str) -> int | None:
        """``name``'s partition count, None when there is no such topic (never creates it)."""
        found = (await self._partition_counts(internal_too=True)).get(name)
        return None if found is None else found[0]

    async def _create(
        self, name: str, partitions: int, config: Mapping[str, str], replication_factor: int, *, exist_ok: bool
    ) -> int:
        where = f"cannot create topic {name!r}"
        admin = await self._admin_client()
        created = False
        try:
            async with _errors(where):
                response = await admin.create_topics(
                    [NewTopic(name, partitions, replication_factor, topic_configs=dict(config))]
                )
        except TransportError as exc:
            if not (exist_ok and getattr(exc.__cause__, "errno", None) == _EXISTS):
                raise
        else:
            for topic, code, *rest in response.topic_errors:
                if topic == name and code and not (exist_ok and code == _EXISTS):
                    raise _rejected(where, code, rest[0] if rest else None)
                created = created or (topic == name and not code)
        return await wait_until_answering(
            await self._raw_client(), name, where, at_least=partitions if created else 1,
            timeout_s=self.request_timeout_ms / 1000,
        )

    async def add_partitions(self, name: str, total: int) -> None:
        """Grow topic ``name`` to ``total`` partitions (CreatePartitions)."""
        admin = await self._admin_client()
        try:
            async with _errors(f"cannot add partitions to topic {name!r}"):
                await admin.create_partitions({name: NewPartitions(total)})
        except TransportError as exc:
            # aiokafka raises on the response's error code, with the broker's message after
            # its own "Could not create partitions for <topic>: " prefix.
            cause = exc.__cause__
            if getattr(cause, "errno", None) == _UNKNOWN_TOPIC:
                raise TopicNotFoundError(name) from exc
            if isinstance(cause, KafkaError) and cause.args:
                broker_says = str(cause.args[0]).split(": ", 1)[-1]
                raise _rejected(f"cannot add partitions to topic {name!r}", cause.errno, broker_says) from exc
            raise
        await self._forget(name)  # clients that cached the old partition count
        await wait_until_answering(
            await self._raw_client(), name, f"cannot add partitions to topic {name!r}", at_least=total,
            timeout_s=self.request_timeout_ms / 1000,
        )

    async def delete_topic(self, name: str) -> None:
        await self._forget(name)
        admin = await self._admin_client()
        async with _errors(f"cannot delete topic {name!r}"):
            response = await admin.delete_topics([name])
        for topic, code in response.topic_error_codes:
            if topic == name and code == _UNKNOWN_TOPIC:
                raise TopicNotFoundError(name)
            if topic == name and code:
                raise _rejected(f"topic {name!r} cannot be deleted", code, None)

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Move ``topic``-``partition``'s log start offset up to ``offset`` (-1: the high
        watermark), as ``kafka-delete-records`` does; return the new log start offset."""
        where = f"cannot delete records of {topic}-{partition}"
        count = await self.partition_count(topic)
        if count is None:
            raise TopicNotFoundError(topic)
        if not 0 <= partition < count:
            raise PartitionNotFoundError(where, topic, partition, count)
        admin = await self._admin_client()
        tp = KafkaTP(topic, partition)
        try:
            async with _errors(where):
                low = await admin.delete_records({tp: RecordsToDelete(before_offset=offset)})
        except TransportError as exc:
            code = getattr(exc.__cause__, "errno", None)
            if code == KafkaOffsetOutOfRange.errno:
                raise BrokerRejectedError(f"{where}: offset {offset} is past the partition's high watermark") from exc
            if code == PolicyViolationError.errno:
                raise BrokerRejectedError(f"{where}: the topic's cleanup.policy does not include delete") from exc
            if isinstance(code, int):
                raise _rejected(where, code, None) from exc
            raise
        return int(low[tp])

    async def _forget(self, topic: str) -> None:
        """Close the clients that may track ``topic`` (they start again when needed).

        aiokafka's metadata refreshes name the topics a client has used, always allowing
        auto-creation: on a broker that auto-creates topics they would bring a deleted one back.
        """
        await self._stop_fetcher()
        clients: list[AIOKafkaProducer | AIOKafkaConsumer] = list(self._producers.values())
        self._producers = {}
        for group, consumer in list(self._committers.items()):
            if any(tp.topic == topic for tp in consumer.assignment()):
                clients.append(self._committers.pop(group))
        for client in clients:
            await client.stop()

    async def describe_topic(self, name: str) -> TopicDescription:
        counts = await self._partition_counts(internal_too=True)
        if name not in counts:
            raise TopicNotFoundError(name)
        count, internal = counts[name]
        tps = [KafkaTP(name, p) for p in range(count)]
        consumer = await self._fetch_consumer()
        async with _errors(f"cannot read the offsets of {name!r}"):
            starts = await consumer.beginning_offsets(tps)
            ends = await consumer.end_offsets(tps)
        offsets = tuple(PartitionOffsets(tp.partition, int(starts[tp]), int(ends[tp])) for tp in tps)
        return TopicDescription(name, offsets, await self._topic_config(name), internal)

    async def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """The log start offset and high watermark of ``topic``-``partition``."""
        tp = KafkaTP(topic, partition)
        consumer = await self._fetch_consumer()
        where = f"cannot read the offsets of {topic}-{partition}"
        try:
            async with _errors(where):
                starts = await consumer.beginning_offsets([tp])
                ends = await consumer.end_offsets([tp])
        except TransportError as exc:
            missing = await self._missing(topic, partition, where)
            if missing is None:
                raise
            raise missing from exc
        return int(starts[tp]), int(ends[tp])

    async def _missing(self, topic: str, partition: int, where: str) -> TransportError | None:
        """Why a read of ``topic``-``partition`` got no answer, when the reason is that the
        cluster has no such topic or partition (aiokafka's consumer waits for it until its
        timeout and then says only that it timed out); else None."""
        found = (await self._partition_counts(internal_too=True)).get(topic)
        if found is None:
            return TopicNotFoundError(topic)
        if not 0 <= partition < found[0]:
            return PartitionNotFoundError(where, topic, partition, found[0])
        return None

    async def _partition_counts(self, *, internal_too: bool = False) -> dict[str, tuple[int, bool]]:
        """(partition count, internal) of every topic, from the Metadata of all topics."""
        admin = await self._admin_client()
        async with _errors("cannot list topics"):
            described: list[dict[str, Any]] = await admin.describe_topics(None)
        return {
            t["topic"]: (len(t["partitions"]), bool(t.get("is_internal")))
            for t in described
            if t["error_code"] == 0 and (internal_too or not t.get("is_internal"))
        }

    async def _topic_config(self, name: str) -> dict[str, str]:
        admin = await self._admin_client()
        async with _errors(f"cannot describe the configs of {name!r}"):
            responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        config: dict[str, str] = {}
        for response in responses:
            for code, message, _type, resource, entries in response.resources:
                if code == _UNKNOWN_TOPIC:
                    raise TopicNotFoundError(name)
                if code:
                    raise _rejected(f"cannot describe the configs of {name!r}", code, message)
                if resource == name:
                    config.update((entry[0], entry[1]) for entry in entries if entry[1] is not None)
        return config

    # -- produce -------------------------------------------------------------------------

    async def produce(
        self, topic: str, partition: int, records: Sequence[OutgoingRecord], *, compression: str = "none"
    ) -> int:
        """Append ``records`` as one batch; return the offset of the first.

        ``compression`` is a Kafka codec name: none, gzip, snappy, lz4 or zstd.
        """
        if not records:
            raise ValueError("produce needs at least one record")
        producer = await self._producer(compression)
        where = f"cannot produce to {topic}-{partition}"
        await wait_for_partition(producer.client, topic, partition, where, timeout_s=self.request_timeout_ms / 1000)
        batch = producer.create_batch()
        for record in records:
            appended = batch.append(
                key=record.key, value=record.value, timestamp=record.timestamp, headers=list(record.headers)
            )
            if appended is None:
                raise BrokerRejectedError(f"{where}: {len(records)} records do not fit in one batch")
        batch.close()
        async with _errors(where):
            try:
                delivered = await producer.send_batch(batch, topic, partition=partition)
                metadata = await delivered
            except (MessageSizeTooLargeError, RecordListTooLargeError) as exc:
                raise BrokerRejectedError(
                    f"{where}: the batch of {batch.size()} bytes exceeds the topic's max.message.bytes"
                ) from exc
        return int(metadata.offset)

    async def _producer(self, compression: str) -> AIOKafkaProducer:
        if compression not in _CODECS:
            raise BrokerRejectedError(f"unknown compression {compression!r}")
        producer = self._producers.get(compression)
        if producer is None:
            async with self._starting(f"cannot start a producer with compression {compression}"):
                producer = AIOKafkaProducer(
                    bootstrap_servers=self.bootstrap_servers,
                    **self._secured(),
                    acks="all",
                    compression_type=_CODECS[compression],
                    max_batch_size=64 * 1024 * 1024,  # callers size batches to the topic's limit
                    max_request_size=64 * 1024 * 1024,
                    request_timeout_ms=self.request_timeout_ms,
                )
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
            self._producers[compression] = producer
        return producer

    # -- fetch ---------------------------------------------------------------------------

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, timeout_ms: int | None = None,
        max_records: int | None = None,
    ) -> FetchResult:
        """Records of ``topic``-``partition`` from ``offset`` on (at most ``max_records``: the
        consumer keeps the rest of what it fetched for the next call from where this one ends).

        Returns as soon as records arrive, or with none once a fetch made from ``offset``
        shows the partition has nothing more (``next_offset`` reached the high watermark).
        Raises ``FetchOutOfRangeError`` outside the log, ``TransportError`` when the broker
        has not answered within ``timeout_ms`` (default: the request timeout).
        """
        if max_bytes != self._fetch_bytes:
            await self._stop_fetcher()
            self._fetch_bytes = max_bytes
        consumer = await self._fetch_consumer()
        tp = KafkaTP(topic, partition)
        self._move_to(consumer, tp, offset)
        asked_ms = int(time.time() * 1000)
        deadline = time.monotonic() + (timeout_ms or self.request_timeout_ms) / 1000
        where = f"cannot fetch from {topic}-{partition}"
        while True:
            try:
                async with _errors(where):
                    got = await consumer.getmany(tp, timeout_ms=_POLL_MS, max_records=max_records)
                    position = int(await consumer.position(tp))
            except TransportError as exc:
                if isinstance(exc.__cause__, KafkaOffsetOutOfRange):
                    await self._out_of_range(consumer, tp, offset)
                raise
            self._positions[tp] = position
            records = [
                FetchedRecord(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got.get(tp, ())
            ]
            high_watermark = self._fresh_high_watermark(consumer, tp, asked_ms)
            if records or (high_watermark is not None and position >= high_watermark):
                return FetchResult(records, position, max(position, high_watermark or 0))
            if time.monotonic() >= deadline:
                missing = await self._missing(topic, partition, where)
                if missing is not None:
                    await self._stop_fetcher()  # no longer assigned a partition that is not there
                    raise missing
                raise TransportError(f"{where}: no answer from the broker in time")

    async def fetch_batches(self, topic: str, partition: int, offset: int, max_bytes: int) -> RawFetch:
        """The record batches of ``topic``-``partition`` from the one holding ``offset`` on, as
        the broker sends them (read uncommitted, control batches included): one Fetch request
        that does not wait, nothing decoded, for a caller that decodes batches itself. Raises
        ``FetchOutOfRangeError`` outside the log."""
        where = f"cannot fetch from {topic}-{partition}"
        client = await self._raw_client()
        tp = KafkaTP(topic, partition)
        await wait_for_partition(client, topic, partition, where, timeout_s=self.request_timeout_ms / 1000)
        async with _errors(where):
            leader = client.cluster.leader_for_partition(tp)
            if leader is None or leader < 0:  # no leader now: as Kafka says it, retriable
                await client.force_metadata_update()
                leader = client.cluster.leader_for_partition(tp)
            if leader is None or leader < 0:
                raise TransportError(f"{where}: the partition has no leader now")
            # No wait, no minimum, read uncommitted; the version is the one both sides speak.
            request = FetchRequest(0, 0, max_bytes, 0, [(topic, [(partition, offset, max_bytes)])])
            response = await client.send(leader, request)
        for _name, parts in response.topics:
            for number, code, high_watermark, *fields in parts:
                data = fields[-1]  # the record batches come last in every version
                if number != partition:
                    continue
                if code == KafkaOffsetOutOfRange.errno:
                    for p in (await self.describe_topic(topic)).partitions:
                        if p.partition == partition:
                            raise FetchOutOfRangeError(offset, p.log_start_offset, p.high_watermark)
                if code:
                    raise _rejected(where, code, None)
                return RawFetch(bytes(data or b""), int(high_watermark))
        raise TransportError(f"{where}: the broker's answer holds no such partition")

    async def _raw_client(self) -> AIOKafkaClient:
        if self._raw is None:
            client = AIOKafkaClient(
                bootstrap_servers=self.bootstrap_servers, request_timeout_ms=self.request_timeout_ms, **self._secured()
            )
            try:
                async with self._starting(f"cannot connect to {self.bootstrap_servers}"):
                    await client.bootstrap()
            except BaseException:
                await client.close()
                raise
            self._raw = client
        return self._raw

    def _move_to(self, consumer: AIOKafkaConsumer, tp: KafkaTP, offset: int) -> None:
        """Assign ``tp`` (keeping the others where they were) and seek it to ``offset``."""
        if tp not in consumer.assignment():
            consumer.assign([*self._positions, tp])  # resets every position: seek them all back
            now_ms = int(time.time() * 1000)
            for other, position in self._positions.items():
                consumer.seek(other, position)
                self._sought_ms[other] = now_ms
        if self._positions.get(tp) != offset or tp not in self._sought_ms:
            consumer.seek(tp, offset)
            self._positions[tp] = offset
            self._sought_ms[tp] = int(time.time() * 1000)

    def _fresh_high_watermark(self, consumer: AIOKafkaConsumer, tp: KafkaTP, asked_ms: int) -> int | None:
        """The high watermark of a fetch answered after the last seek of ``tp`` and after
        this ``fetch`` began (``asked_ms``), else None.

        The consumer drops answers to fetches from an old position, so an answer timed after
        the seek is for the position fetch() asked for. It keeps fetching assigned partitions
        between calls, though, and no seek happens when a read goes on where the last one
        ended: an answer from before this call may hold an old end (a last stable offset
        below a transaction that committed since), and a restore would stop there.
        """
        polled_ms = consumer.last_poll_timestamp(tp)
        if self.isolation_level == "read_committed":
            high_watermark = consumer.last_stable_offset(tp)  # where committed reading ends
        else:
            high_watermark = consumer.highwater(tp)
        if polled_ms is None or high_watermark is None or polled_ms <= max(self._sought_ms[tp], asked_ms):
            return None
        return int(high_watermark)

    async def _out_of_range(self, consumer: AIOKafkaConsumer, tp: KafkaTP, offset: int) -> None:
        self._positions.pop(tp, None)  # the next fetch seeks again
        async with _errors(f"cannot read the offsets of {tp.topic}-{tp.partition}"):
            start = (await consumer.beginning_offsets([tp]))[tp]
            end = (await consumer.end_offsets([tp]))[tp]
        raise FetchOutOfRangeError(offset, int(start), int(end))

    async def _stop_fetcher(self) -> None:
        consumer, self._fetcher = self._fetcher, None
        self._positions.clear()
        self._sought_ms.clear()
        if consumer is not None:
            try:
                await consumer.stop()
            except asyncio.CancelledError:
                # Ours, or aiokafka's fetcher re-raising the cancellation of a fetch that was
                # sleeping out its retry back-off (the log did not answer): close the rest.
                await abandon_consumer(consumer)
                if cancelling():
                    raise

    async def _fetch_consumer(self) -> AIOKafkaConsumer:
        if self._fetcher is None:
            async with self._starting("cannot start a consumer"):
                consumer = AIOKafkaConsumer(
                    bootstrap_servers=self.bootstrap_servers,
                    **self._secured(),
                    group_id=None,
                    enable_auto_commit=False,
                    auto_offset_reset="none",  # fetch() always seeks; out of range is the caller's
                    isolation_level=self.isolation_level,
                    fetch_max_wait_ms=_FETCH_WAIT_MS,
                    max_partition_fetch_bytes=self._fetch_bytes,
                    fetch_max_bytes=max(self._fetch_bytes, 50 * 1024 * 1024),
                    request_timeout_ms=self.request_timeout_ms,
                )
                try:
                    await consumer.start()
                except BaseException:
                    await consumer.stop()
                    raise
            self._fetcher = consumer
        return self._fetcher

    # -- groups --------------------------------------------------------------------------

    async def committed(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offset of each partition of ``topic`` that has one."""
        admin = await self._admin_client()
        where = f"cannot read the offsets of group {group!r}"
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            try:
                offsets = await admin.list_consumer_group_offsets(group)
                break
            except KafkaError as exc:
                # Kafka answers COORDINATOR_NOT_AVAILABLE while it creates __consumer_offsets
                # for the cluster's first group, and COORDINATOR_LOAD_IN_PROGRESS while a new
                # coordinator loads it: retriable, and Kafka's admin client retries them.
                if not exc.retriable or isinstance(exc, KafkaConnectionError) or time.monotonic() >= deadline:
                    async with _errors(where):
                        raise
            await asyncio.sleep(_RETRY_S)
        return {
            tp.partition: int(meta.offset)
            for tp, meta in offsets.items()
            if tp.topic == topic and meta.offset >= 0
        }

    async def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Commit ``offsets`` for ``group`` without joining it (generation -1, no member id)."""
        if not offsets:
            return
        tps = {KafkaTP(topic, p): offset for p, offset in offsets.items()}
        consumer = await self._committer(group, tps)
        async with _errors(f"cannot commit offsets of group {group!r}"):
            await consumer.commit(tps)

    async def _committer(self, group: str, tps: Iterable[KafkaTP]) -> AIOKafkaConsumer:
        """A consumer of ``group`` assigned ``tps`` by hand, paused: it commits, never fetches."""
        consumer = self._committers.get(group)
        if consumer is None:
            async with self._starting(f"cannot start a consumer for group {group!r}"):
                consumer = AIOKafkaConsumer(
                    bootstrap_servers=self.bootstrap_servers,
                    **self._secured(),
                    group_id=group,
                    enable_auto_commit=False,
                    auto_offset_reset="latest",
                    request_timeout_ms=self.request_timeout_ms,
                )
                try:
                    await consumer.start()
                except BaseException:
                    await consumer.stop()
                    raise
            self._committers[group] = consumer
        assigned = consumer.assignment()
        wanted = set(assigned) | set(tps)
        if wanted != assigned:
            consumer.assign(sorted(wanted))
            consumer.pause(*wanted)
        return consumer

    # -- connections ---------------------------------------------------------------------

    async def _admin_client(self) -> AIOKafkaAdminClient:
        if self._admin is None:
            admin = AIOKafkaAdminClient(
                bootstrap_servers=self.bootstrap_servers, request_timeout_ms=self.request_timeout_ms, **self._secured()
            )
            try:
                await admin.start()
            except KafkaConnectionError as exc:
                await admin.close()
                refused = await refusal(self.bootstrap_servers, self.security)
                if refused is not None:
                    raise refused from exc
                raise BrokerUnreachableError(f"cannot reach a broker at {self.bootstrap_servers}") from exc
            except KafkaError as exc:
                await admin.close()
                raise TransportError(f"cannot connect to {self.bootstrap_servers}: {exc}") from exc
            except BaseException:
                await admin.close()
                raise
            self._admin = admin
        return self._admin
