"""Fetch (v4-v11) and ListOffsets (v1-v3).

Fetch serves whole batches straight from segment bytes (``Partition.read_range``: a file
range sent by ``sendfile`` when its bytes were CRC-checked before, else bytes read and
checked now, see ``segment.py``): the batch
holding the fetch offset comes first, whole, even if it starts before the offset or is
larger than the byte limits (KIP-74), so a consumer always makes progress. Every requested
partition is in the response, with empty records when there is nothing to send, because
kafka-python drops a full-fetch response that leaves one out.

Long poll: while fewer than ``min_bytes`` are ready and ``max_wait_ms`` has not passed, the
request waits for an append to one of its partitions (``AppendNotifier``). It registers
before re-reading, so no append is missed. Errors answer at once.

read_committed (``isolation_level=1``) reads only below the last stable offset and lists
the aborted transactions overlapping the data returned; with no transactions open the LSO
is the high watermark and the list is empty. Producer state is loaded lazily; once any
transactional id exists, a read_committed fetch loads it (off the loop) for its partitions
first, so markers written before a restart are seen. Sessions (KIP-227) are not kept: every answer
has session id 0, which makes clients send full fetches.

With an authorizer (``BrokerConfig.authorizer``) each request is first checked as Kafka's
``KafkaApis`` checks it, answered with Kafka's authorization error at Kafka's granularity
(``access.py``; the checks are listed in ``docs/security.md``).
"""

from __future__ import annotations

import asyncio

from streamkit._core.types import TopicPartition
from streamkit.log.errors import OffsetOutOfRangeError, UnknownTopicError
from streamkit.log.manager import INTERNAL_TOPICS
from streamkit.log.partition import Partition
from streamkit.log.producers import last_stable_offset as producers_lso
from streamkit.log.records import iter_batches
from streamkit.log.segment import FileRange
from streamkit.log.server import access
from streamkit.log.server.authorizer import Operation
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode
from streamkit.log.server.frames import FetchAnswer, Records
from streamkit.log.server.messages import (
    FetchableTopicResponse,
    FetchAbortedTransaction,
    FetchPartitionData,
    FetchRequest,
    FetchResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from streamkit.log.server.state import BrokerState

READ_COMMITTED = 1
LATEST = -1
EARLIEST = -2
_MAX_WAIT_MS = 30_000


async def fetch(state: BrokerState, header: RequestHeader, request: FetchRequest) -> FetchAnswer:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(max(request.max_wait_ms, 0), _MAX_WAIT_MS) / 1000
    readable = access.allowed_names(state, header, Operation.READ, access.TOPIC, (t.topic for t in request.topics))
    tps = [TopicPartition(t.topic, p.partition) for t in request.topics if t.topic in readable for p in t.partitions]
    if request.isolation_level == READ_COMMITTED:
        await _load_transaction_state(state, tps)
    response, ready, failed = _collect(state, request, readable)
    while ready < request.min_bytes and not failed:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        waiter = state.notifier.register(tps)
        try:
            response, ready, failed = _collect(state, request, readable)
            if ready >= request.min_bytes or failed:
                break
            await asyncio.wait([waiter], timeout=remaining)
        finally:
            state.notifier.discard(waiter, tps)
        response, ready, failed = _collect(state, request, readable)
    return response


async def _load_transaction_state(state: BrokerState, tps: list[TopicPartition]) -> None:
    """Make sure read_committed sees markers written before this run (lazily loaded state)."""
    if state.transactions is None or not state.transactions.ever_used:
        return
    for tp in tps:
        if state.producers.peek(tp) is None:
            try:
                partition = state.log.partition(tp.topic, tp.partition)
            except UnknownTopicError:
                continue
            await state.run_blocking(state.producers.load, partition)


def _collect(state: BrokerState, request: FetchRequest, readable: set[str]) -> tuple[FetchAnswer, int, bool]:
    """Read every requested partition now: (answer, bytes of records, any partition failed).
    A topic not in ``readable`` is TOPIC_AUTHORIZATION_FAILED (Kafka checks READ per topic)."""
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    failed = False
    topics = []
    records: list[Records] = []
    for topic in request.topics:
        parts = []
        for wanted in topic.partitions:
            if topic.topic not in readable:
                failed = True
                parts.append(_failed(wanted.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                records.append(b"")
                continue
            # The first data in the response may exceed the budget (one whole batch); after
            # that each partition gets what is left of it.
            max_bytes = wanted.partition_max_bytes
            if total:
                max_bytes = min(max_bytes, budget - total)
            data, data_records = _read_partition(
                state,
                topic.topic,
                wanted.partition,
                wanted.fetch_offset,
                max_bytes,
                request.isolation_level,
                skip=total > 0 and max_bytes <= 0,
            )
            if data.error_code:
                failed = True
            total += len(data_records)
            parts.append(data)
            records.append(data_records)
        topics.append(FetchableTopicResponse(topic=topic.topic, partitions=parts))
    return FetchAnswer(FetchResponse(responses=topics, session_id=0), records), total, failed


def _failed(index: int, code: ErrorCode) -> FetchPartitionData:
    return FetchPartitionData(
        partition_index=index, error_code=code, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1
    )


def _read_partition(
    state: BrokerState,
    topic: str,
    index: int,
    offset: int,
    max_bytes: int,
    isolation_level: int,
    *,
    skip: bool,
) -> tuple[FetchPartitionData, Records]:
    """The partition's answer (its ``records`` field unused) and the records it sends."""
    try:
        if topic in INTERNAL_TOPICS:
            raise UnknownTopicError(topic)
        partition = state.log.partition(topic, index)
    except UnknownTopicError:
        return _failed(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), b""
    hw = partition.high_watermark
    lso = last_stable_offset(state, partition)
    committed = isolation_level == READ_COMMITTED
    records: Records = b""
    error = ErrorCode.NONE
    if not skip:
        try:
            # Verified bytes come back as a file range and go out by sendfile, unchecked
            # again; anything else is read and CRC-checked now (Segment.read_range).
            records = partition.read_range(
                offset, max(max_bytes, 1), max_offset=lso if committed else None
            )
        except OffsetOutOfRangeError:
            error = ErrorCode.OFFSET_OUT_OF_RANGE
    aborted: list[FetchAbortedTransaction] | None = None
    if committed:
        aborted = _aborted(state, partition, offset, records)
    return FetchPartitionData(
        partition_index=index,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=partition.log_start_offset,
        aborted_transactions=aborted,
    ), records


def last_stable_offset(state: BrokerState, partition: Partition) -> int:
    return producers_lso(state.producers.peek(partition.tp), partition.high_watermark, partition.log_start_offset)


def _aborted(
    state: BrokerState, partition: Partition, offset: int, records: Records
) -> list[FetchAbortedTransaction]:
    producers = state.producers.peek(partition.tp)
    if producers is None or not producers.aborted or not records:
        return []
    end = offset
    batches = records.headers() if isinstance(records, FileRange) else iter_batches(records)
    for _pos, batch in batches:
        end = batch.next_offset
    return [
        FetchAbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
        for a in producers.aborted_between(offset, end)
    ]


async def list_offsets(
    state: BrokerState, header: RequestHeader, request: ListOffsetsRequest
) -> ListOffsetsResponse:
    topics = []
    described = access.allowed_names(state, header, Operation.DESCRIBE, access.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        parts = []
        for wanted in topic.partitions:
            if topic.name not in described:
                parts.append(
                    ListOffsetsPartitionResponse(
                        partition_index=wanted.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    )
                )
                continue
            parts.append(
                await _list_offset(
                    state, topic.name, wanted.partition_index, wanted.timestamp, request.isolation_level
                )
            )
        topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=parts))
    return ListOffsetsResponse(topics=topics)


async def _list_offset(
    state: BrokerState, topic: str, index: int, timestamp: int, isolation_level: int
) -> ListOffsetsPartitionResponse:
    try:
        if topic in INTERNAL_TOPICS:
            raise UnknownTopicError(topic)
        partition = state.log.partition(topic, index)
    except UnknownTopicError:
        return ListOffsetsPartitionResponse(
            partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
    if timestamp == LATEST:
        offset = (
            last_stable_offset(state, partition)
            if isolation_level == READ_COMMITTED
            else partition.high_watermark
        )
        return ListOffsetsPartitionResponse(partition_index=index, timestamp=-1, offset=offset)
    if timestamp == EARLIEST:
        return ListOffsetsPartitionResponse(
            partition_index=index, timestamp=-1, offset=partition.log_start_offset
        )
    if timestamp < 0:
        return ListOffsetsPartitionResponse(
            partition_index=index, error_code=ErrorCode.INVALID_REQUEST
        )
    found = await state.run_blocking(partition.offset_for_timestamp, timestamp)
    if found is None:
        return ListOffsetsPartitionResponse(partition_index=index, timestamp=-1, offset=-1)
    return ListOffsetsPartitionResponse(partition_index=index, timestamp=found[1], offset=found[0])
