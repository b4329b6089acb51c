"""The embedded producer: records buffered per partition, appended as whole batches.

Records are buffered per partition and appended as one batch when the buffer is full or when
the event loop next turns (``call_soon``), so an agent that handles a whole fetched batch
without suspending produces whole batches too. Appends to topics whose flush policy fsyncs
run in a worker thread, others inline (a page-cache write). A failed append fails the
records' acknowledgements and is raised by the next ``flush``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from streamkit._core.types import TopicPartition
from streamkit.log.errors import InvalidRecordError, LogError, UnknownTopicError
from streamkit.log.partition import Partition
from streamkit.log.records import BatchBuilder
from streamkit.transport.base import BatchAck, Header, RecordMetadata, TransportError

if TYPE_CHECKING:
    from streamkit.transport.embedded.client import EmbeddedLogClient

MAX_BATCH_RECORDS = 2000
# Well below max.message.bytes' default (1 MiB): a batch of large records is appended sooner.
MAX_BATCH_BYTES = 256 * 1024


class BufferedBatch:
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
        self._buffers: dict[TopicPartition, BufferedBatch] = {}
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
    ) -> tuple[BufferedBatch, int]:
        """Buffer a record in its partition's batch: (batch, index in it)."""
        # A plain tuple finds the TopicPartition key (equal and same hash) without building one.
        batch = self._buffers.get((topic, partition))  # type: ignore[call-overload]
        if batch is None:
            tp = TopicPartition(topic, partition)
            batch = self._buffers[tp] = BufferedBatch(asyncio.get_running_loop().create_future())
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

    def _partition(self, tp: TopicPartition, batch: BufferedBatch) -> Partition | None:
        try:
            return self._client.log.partition(tp.topic, tp.partition)
        except (UnknownTopicError, TransportError) as exc:
            self._fail(batch, refused(f"cannot send to {tp}", exc))
            return None

    def _append_inline(self, partition: Partition, batch: BufferedBatch) -> None:
        try:
            result = partition.append(batch.encoded(), verify_crc=False)
        except LogError as exc:
            self._fail(batch, refused(f"append to {partition.tp} failed", exc))
        else:
            batch.future.set_result(result.base_offset)

    async def _append(self, tp: TopicPartition, batch: BufferedBatch) -> None:
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
            self._fail(batch, refused(f"append to {tp} failed", exc))
        else:
            batch.future.set_result(result.base_offset)
        finally:
            self._inflight.discard(batch.future)

    def _fail(self, batch: BufferedBatch, error: TransportError) -> None:
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


def refused(what: str, exc: Exception) -> TransportError:
    """The error of a batch the log refused, retriable as the log's own error is: a log in this
    process refuses a batch for what it is (too large, its topic missing), so sending it again
    changes nothing, and an at-least-once worker must stop rather than process it again."""
    error = TransportError(f"{what}: {exc}")
    error.retriable = bool(getattr(exc, "retriable", False))
    return error
