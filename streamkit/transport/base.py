"""What the engine codes against: ``LogClient``, ``Producer`` and ``Consumer``.

Bytes cross this interface, never typed values: serialization belongs to the engine.
Both drivers give the same guarantees:

* ``Producer.send`` buffers a record and returns an awaitable ``RecordMetadata``; awaiting it
  waits for the log's acknowledgement. ``flush`` returns when every record sent before it is
  acknowledged (the commit protocol relies on this);
* a record's partition is chosen by the engine's partitioner (murmur2 of the key bytes, as
  Kafka's clients do), so the embedded log and a Kafka cluster place keys alike;
* ``Consumer.getmany`` returns records of assigned partitions in offset order per
  partition; ``commit`` stores "next offset to read" per partition, Kafka's convention,
  with a short metadata string per partition if asked (the runtime keeps each source
  partition's stream time there, as Kafka Streams does); ``committed_metadata`` reads it back.
  The log refuses metadata longer than its ``offset.metadata.max.bytes`` (Kafka's default and
  the embedded log's: 4096 bytes of UTF-8) with ``OffsetMetadataTooLargeError`` and keeps the
  partition's previous commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from streamkit._core.errors import ConfigError, StreamkitError
from streamkit._core.types import TopicPartition
from streamkit.transport.placement import GroupInfo, MemberInfo

Header = tuple[str, bytes | None]


class TransportError(StreamkitError):
    """A log operation failed in the transport (retriable unless stated)."""

    retriable = True


class OffsetMetadataTooLargeError(TransportError):
    """The log refused a commit's metadata as longer than its ``offset.metadata.max.bytes``
    (Kafka's OFFSET_METADATA_TOO_LARGE): nothing was stored for the partitions it names, which
    keep their previous commit. Not retriable: the same commit is refused again."""

    retriable = False


class TransactionAbortedError(TransportError):
    """The open transaction could not commit and was (or must be) aborted: the task rewinds
    to its last commit."""


class ProducerFencedError(TransactionAbortedError):
    """A newer producer with the same transactional id (or the coordinator, on a timeout)
    fenced this one: its transaction was aborted."""


READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def check_isolation_level(isolation_level: str) -> str:
    if isolation_level not in ISOLATION_LEVELS:
        raise ConfigError(
            f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, not {isolation_level!r}"
        )
    return isolation_level


def with_metadata(
    offsets: Mapping[TopicPartition, int], metadata: Mapping[TopicPartition, str] | None
) -> dict[TopicPartition, tuple[int, str]]:
    """``(offset, metadata)`` per partition to commit, "" where ``metadata`` has none (a commit
    replaces a partition's metadata, as in Kafka). Metadata for a partition not in
    ``offsets`` is refused: it would be dropped without a word.

    >>> tp = TopicPartition("t", 0)
    >>> with_metadata({tp: 5}, {tp: "st=1700000000000"})
    {TopicPartition(topic='t', partition=0): (5, 'st=1700000000000')}
    >>> with_metadata({tp: 5}, None)
    {TopicPartition(topic='t', partition=0): (5, '')}
    """
    metadata = metadata or {}
    stray = sorted(tp for tp in metadata if tp not in offsets)
    if stray:
        raise TransportError(f"metadata for {', '.join(map(str, stray))} but no offset to commit there")
    for tp, text in metadata.items():
        if not isinstance(text, str):
            raise TransportError(f"the metadata of {tp} must be a str, not {type(text).__name__}")
    return {tp: (offset, metadata.get(tp, "")) for tp, offset in offsets.items()}


def metadata_too_large(refused: Mapping[TopicPartition, str], where: str) -> OffsetMetadataTooLargeError:
    """The error for metadata the log refused, naming each partition and its size."""
    sizes = ", ".join(f"{tp} ({len(text.encode())} bytes)" for tp, text in sorted(refused.items()))
    return OffsetMetadataTooLargeError(
        f"{where}: OFFSET_METADATA_TOO_LARGE: the metadata of {sizes} is longer than the log's "
        "offset.metadata.max.bytes; the previous commit stays"
    )


class ConsumerRecord(Protocol):
    """A consumed record; its topic and partition are the key it is filed under.

    The log's ``Record`` and aiokafka's ``ConsumerRecord`` both have this shape, so neither
    driver copies records.
    """

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[Header]: ...


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        """Where the record is (Faust's ``RecordMetadata.topic_partition``)."""
        return TopicPartition(self.topic, self.partition)


class BatchAck:
    """Awaitable ``RecordMetadata`` of one record, resolved with its batch's base offset.

    Both drivers batch records themselves: one future per batch, not per record.
    """

    __slots__ = ("_future", "_index", "_partition", "_timestamp", "_topic")

    def __init__(self, future: asyncio.Future[int], topic: str, partition: int, index: int, timestamp: int) -> None:
        self._future = future
        self._topic = topic
        self._partition = partition
        self._index = index
        self._timestamp = timestamp

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        base = yield from self._future.__await__()
        return RecordMetadata(self._topic, self._partition, self._offset(base), self._timestamp)

    def _offset(self, base: int) -> int:
        """The record's offset; -1 when the log told none (a producer with acks=0, as Kafka's)."""
        return base + self._index if base >= 0 else -1

    # Read as Faust's send future is (``fut.done()``, ``fut.result()``), without a future per record.
    def done(self) -> bool:
        return self._future.done()

    def result(self) -> RecordMetadata:
        """The metadata once acknowledged; raises the send's error, or
        ``asyncio.InvalidStateError`` while it is not acknowledged yet."""
        return RecordMetadata(self._topic, self._partition, self._offset(self._future.result()), self._timestamp)

    def exception(self) -> BaseException | None:
        return self._future.exception()


class RebalanceListener(Protocol):
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class Producer(Protocol):
    async def start(self) -> None: ...

    async def aclose(self) -> None:
        """Flush what is buffered, then release the producer."""
        ...

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
        """Buffer one record for ``partition``; the result resolves when it is acknowledged."""
        ...

    def send_nowait(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Sequence[Header] = (),
    ) -> Awaitable[None] | None:
        """Buffer one record without a coroutine or an acknowledgement object:
        the engine's per-record path, which learns of failures from ``flush``. Returns
        ``None``, or an awaitable to wait on before sending more (back-pressure: the
        partition's backlog is full). The producer must be started."""
        ...

    async def flush(self) -> None:
        """Wait until every record sent so far is acknowledged (raises if one failed)."""
        ...


class TransactionalProducer(Producer, Protocol):
    """A producer whose records become visible to read_committed consumers only when the
    transaction they are in commits, together with a consumer group's offsets (exactly-once).

    A transaction opens with the first record sent after the last commit or abort.
    """

    transactional_id: str
    commits: int
    aborts: int
    fenced: bool
    """True once the log refused this producer because a newer instance took its
    transactional id (it stays True: the worker says which task was fenced)."""

    @property
    def transaction_open(self) -> bool: ...

    async def commit_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group_id: str,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """Flush, then commit the open transaction with ``offsets`` as ``group_id``'s
        committed offsets, each with its ``metadata`` ("" where none is given). Raises
        ``TransactionAbortedError`` (``ProducerFencedError``) when it could not commit: call
        ``abort_transaction`` and redo from the last commit. Raises
        ``OffsetMetadataTooLargeError`` when the log refused a metadata: nothing of the
        transaction is committed; call ``abort_transaction`` before going on."""
        ...

    async def abort_transaction(self) -> None:
        """Drop the buffered records and abort the open transaction; the producer goes on
        (after a fence, with a new epoch)."""
        ...


class Consumer(Protocol):
    def subscribe(self, topics: Sequence[str], listener: RebalanceListener) -> None: ...

    def advertise(self, info: MemberInfo) -> None:
        """What this member tells the group (before ``start``): its URL, its standby wishes."""
        ...

    def group_info(self) -> GroupInfo | None:
        """Owners and standbys from the last assignment (None before the first)."""
        ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def getmany(
        self, timeout_ms: int, max_records: int
    ) -> Mapping[TopicPartition, Sequence[ConsumerRecord]]: ...

    async def commit(
        self, offsets: Mapping[TopicPartition, int], metadata: Mapping[TopicPartition, str] | None = None
    ) -> None:
        """Commit ``offsets`` for the group, each with its ``metadata`` ("" where none is
        given). Metadata longer than the log allows raises ``OffsetMetadataTooLargeError``;
        those partitions keep their previous commit."""
        ...

    async def committed(self, tp: TopicPartition) -> int | None: ...

    async def committed_metadata(self, tp: TopicPartition) -> str | None:
        """The metadata of the group's committed offset for ``tp`` (a transaction's
        included, once committed); None when nothing is committed, "" when it was
        committed without metadata."""
        ...

    def assignment(self) -> set[TopicPartition]: ...

    def pause(self, tps: Sequence[TopicPartition]) -> None: ...

    def resume(self, tps: Sequence[TopicPartition]) -> None: ...

    def seek(self, tp: TopicPartition, offset: int) -> None: ...

    def highwater(self, tp: TopicPartition) -> int | None: ...

    def position(self, tp: TopicPartition) -> int | None: ...

    def unavailable(self) -> dict[TopicPartition, str]:
        """Assigned partitions the last fetches could not read because the log does not know
        them (the topic was deleted), with the reason. When the topic comes back, the
        consumer's position is past its end or before its start: it resets per
        ``auto_offset_reset`` (logged) and the partition leaves this map."""
        ...


@dataclass(frozen=True, slots=True)
class ReadChunk:
    """Records of one partition from an offset on (see ``PartitionReader.read``)."""

    records: Sequence[ConsumerRecord]  # in offset order; control records left out
    next_offset: int  # where the next read starts (past control batches and compacted gaps)
    high_watermark: int


class PartitionReader(Protocol):
    """Reads chosen partitions from chosen offsets, outside any consumer group (restoring
    tables from their changelogs)."""

    async def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """The log start offset and the high watermark of ``tp``."""
        ...

    async def read(self, tp: TopicPartition, offset: int, max_records: int) -> ReadChunk:
        """Records from ``offset`` on; empty with ``next_offset == offset`` at the end."""
        ...

    async def aclose(self) -> None: ...


class LogClient(Protocol):
    url: str

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def ensure_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> int:
        """Create the topic unless it exists; return its partition count."""
        ...

    async def partition_count(self, name: str) -> int | None: ...

    async def delete_records(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Kafka's DeleteRecords: move each partition's log start offset up to its offset (the
        worker's purge of its repartition topics). Raises ``TransportError``."""
        ...

    def producer(self) -> Producer: ...

    def transactional_producer(self, transactional_id: str, *, timeout_ms: int = 60_000) -> TransactionalProducer:
        """A producer of ``transactional_id``; the log aborts a transaction open longer than
        ``timeout_ms`` (and fences the producer). No I/O until ``start``."""
        ...

    def consumer(
        self, group_id: str, *, auto_offset_reset: str = "earliest", isolation_level: str = READ_UNCOMMITTED
    ) -> Consumer: ...

    def reader(self, *, isolation_level: str = READ_UNCOMMITTED) -> PartitionReader: ...
