"""The embedded partition reader, and the reads of a partition it shares with the consumer.

``EmbeddedReader`` reads straight from the data directory's partitions. Read committed
(``read_committed``) returns only records below the partition's last stable offset, without
those of aborted transactions; the producer state that says which those are is loaded the
first time it is needed, a scan of batch headers off the event loop
(``load_producer_states``). A read that finds only control batches or compacted-away records
goes on past them (``next_offset``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from streamkit._core.types import TopicPartition
from streamkit.log.errors import LogError, OffsetOutOfRangeError
from streamkit.log.partition import Partition
from streamkit.log.producers import ProducerStates, committed_records, last_stable_offset
from streamkit.log.records import Record, decode_batches, iter_batches
from streamkit.transport.base import READ_COMMITTED, ReadChunk, TransportError

if TYPE_CHECKING:
    from streamkit.transport.embedded.client import EmbeddedLogClient

MAX_FETCH_BYTES = 4 * 1024 * 1024


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
            await load_producer_states(self._client, states, [tp])
            try:
                read = read_committed(part, states, offset, max_records)
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
        return ReadChunk((), next_offset(data, offset) if data else offset, high_watermark)

    async def aclose(self) -> None:
        return None  # nothing of its own to release: the client owns the log


async def load_producer_states(client: EmbeddedLogClient, states: ProducerStates, tps: Any) -> None:
    """Load the producer state of ``tps`` not loaded yet (a scan of batch headers: off the loop)."""
    log = client.log
    for tp in tps:
        if states.peek(tp) is None:
            try:
                part = log.partition(tp.topic, tp.partition)
            except LogError:
                continue
            await asyncio.to_thread(states.load, part)


def read_committed(
    part: Partition, states: ProducerStates, position: int, max_records: int
) -> tuple[list[Record], int] | None:
    """Committed records of ``part`` from ``position`` and where to go on; None when nothing
    below the last stable offset is left to read."""
    state = states.peek(part.tp)
    stable = last_stable_offset(state, part.high_watermark, part.log_start_offset)
    if position >= stable:
        return None
    data = part.read(position, MAX_FETCH_BYTES)
    if not data:
        return None
    records, resume = committed_records(data, position, stable, list(state.aborted) if state else [], max_records)
    return records, resume


def next_offset(data: bytes, position: int) -> int:
    """Where a read of ``data`` from ``position`` that returned no record goes on: past its
    last batch."""
    last = position
    for _pos, header in iter_batches(data):
        last = max(last, header.next_offset)
    return last
