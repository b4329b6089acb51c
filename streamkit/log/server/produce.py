"""Produce (v3-v8) and InitProducerId (v0-v1).

The request is decoded by ``frames.decode_produce_request``: each partition's records are a
view into the request frame, checked and written from there without a copy. Each partition's
data must be exactly one magic-2 record batch. It is checked from its
61-byte header and CRC only (``check_batch``), never decoded record by record, then handed
to ``ProducerStates.append``, which applies the idempotence checks and appends the bytes as
they came, with only the base offset stamped. Errors are per partition; one bad partition
does not fail the others. acks=0 requests get no response at all (the client reserved no
slot for one); acks 1 and -1 are the same on a single node.

Appends that may fsync (a topic with ``flush.messages`` set, or any under ``--durable``)
run in a worker thread, so the event loop never waits on a partition an fsync holds; plain
appends are page-cache writes and run inline. Under ``--durable`` (``BrokerConfig.durable``)
the response to acks 1 or -1 waits for the group fsync (``group_sync.py``) of the partitions
it appended to; when that fsync fails they answer KAFKA_STORAGE_ERROR.

With an authorizer (``BrokerConfig.authorizer``) each request is first checked as Kafka's
``KafkaApis`` checks it, answered with Kafka's authorization error at Kafka's granularity
(``access.py``; the checks are listed in ``docs/security.md``).
"""

from __future__ import annotations

import functools

from streamkit.log.errors import InvalidRecordError, LogError, UnknownTopicError
from streamkit.log.manager import INTERNAL_TOPICS
from streamkit.log.partition import AppendResult, Partition
from streamkit.log.producers import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateError,
)
from streamkit.log.records import BATCH_OVERHEAD, check_batch, parse_header
from streamkit.log.server import access
from streamkit.log.server.authorizer import Operation
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode, code_for, txn_code
from streamkit.log.server.frames import ProducePartitionView, ProduceRequestView
from streamkit.log.server.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProducePartitionProduceResponse,
    ProduceResponse,
    ProduceTopicProduceResponse,
)
from streamkit.log.server.state import BrokerState

_ZSTD = 4
_MAX_CODEC = 4
_ZSTD_MIN_VERSION = 7


async def produce(
    state: BrokerState, header: RequestHeader, request: ProduceRequestView
) -> ProduceResponse | None:
    acks_ok = request.acks in (0, 1, -1)
    responses = []
    appended: dict[tuple[str, int], Partition] = {}
    denied_txn = _denied_transactional_id(state, header, request)
    writable = access.allowed_names(state, header, Operation.WRITE, access.TOPIC, (t.name for t in request.topic_data))
    for topic in request.topic_data:
        partitions = []
        for data in topic.partition_data:
            if denied_txn:
                result = _error(data.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            elif topic.name not in writable:
                result = _error(data.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif acks_ok:
                result = await _produce_partition(state, header, request, topic.name, data, appended)
            else:
                result = _error(data.index, ErrorCode.INVALID_REQUIRED_ACKS, f"acks={request.acks}")
            partitions.append(result)
        responses.append(ProduceTopicProduceResponse(name=topic.name, partition_responses=partitions))
    if request.acks == 0:
        return None
    if state.group_sync is not None and appended:
        try:
            await state.group_sync.sync(appended.values())
        except (OSError, LogError) as exc:
            message = f"could not fsync: {exc}"
            for topic_response in responses:
                topic_response.partition_responses = [
                    _error(p.index, ErrorCode.KAFKA_STORAGE_ERROR, message)
                    if (topic_response.name, p.index) in appended
                    else p
                    for p in topic_response.partition_responses
                ]
    return ProduceResponse(responses=responses)


def _denied_transactional_id(state: BrokerState, header: RequestHeader, request: ProduceRequestView) -> bool:
    """Kafka's first check: a request with transactional batches needs WRITE on its
    transactional id, else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    if state.acls is None:
        return False
    transactional = any(
        d.records is not None and len(d.records) >= BATCH_OVERHEAD and parse_header(d.records).is_transactional
        for t in request.topic_data
        for d in t.partition_data
    )
    if not transactional:
        return False
    txn_id = request.transactional_id
    return txn_id is None or not access.allowed(state, header, Operation.WRITE, access.TRANSACTIONAL_ID, txn_id)


def _error(index: int, code: ErrorCode, message: str | None = None) -> ProducePartitionProduceResponse:
    return ProducePartitionProduceResponse(
        index=index, error_code=code, base_offset=-1, log_start_offset=-1, error_message=message
    )


async def _produce_partition(
    state: BrokerState,
    header: RequestHeader,
    request: ProduceRequestView,
    topic: str,
    data: ProducePartitionView,
    appended: dict[tuple[str, int], Partition],
) -> ProducePartitionProduceResponse:
    index = data.index
    if topic in INTERNAL_TOPICS:
        return _error(index, ErrorCode.INVALID_TOPIC_EXCEPTION, f"{topic} is internal")
    try:
        partition = state.log.partition(topic, index)
    except UnknownTopicError as exc:
        return _error(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc))
    records = data.records
    if not records:
        return _error(index, ErrorCode.INVALID_RECORD, "no record batch")
    if len(records) > partition.config.max_message_bytes:
        return _error(
            index,
            ErrorCode.MESSAGE_TOO_LARGE,
            f"{len(records)} bytes exceed max.message.bytes={partition.config.max_message_bytes}",
        )
    if len(records) >= BATCH_OVERHEAD:
        first = parse_header(records)
        if first.size < len(records) and first.magic == 2:
            return _error(index, ErrorCode.INVALID_RECORD, "more than one record batch")
    try:
        batch = check_batch(records)
    except InvalidRecordError as exc:
        return _error(index, code_for(exc), str(exc))
    if batch.compression > _MAX_CODEC:
        return _error(index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"codec {batch.compression}")
    if batch.compression == _ZSTD and header.api_version < _ZSTD_MIN_VERSION:
        return _error(index, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7+")
    if batch.is_control:
        return _error(index, ErrorCode.INVALID_RECORD, "clients may not write control batches")
    if batch.is_transactional:
        txn = state.transactions
        if txn is None or request.transactional_id is None:
            return _error(index, ErrorCode.INVALID_TXN_STATE, "transactions are not enabled")
        refusal = txn.check_produce(request.transactional_id, batch, partition.tp)
        if refusal is not None:
            return _error(index, txn_code(refusal), f"transactional batch refused for {request.transactional_id!r}")
    try:
        if partition.config.flush_messages or state.group_sync is not None:
            result: AppendResult = await state.run_blocking(
                functools.partial(state.producers.append, partition, batch, records, crc_checked=True)
            )
        else:
            result = state.producers.append(partition, batch, records, crc_checked=True)
    except ProducerStateError as exc:
        return _error(index, _producer_error_code(exc), str(exc))
    except LogError as exc:
        return _error(index, code_for(exc), str(exc))
    appended[(topic, index)] = partition
    return ProducePartitionProduceResponse(
        index=index,
        base_offset=result.base_offset,
        log_append_time_ms=result.log_append_time_ms,
        log_start_offset=result.log_start_offset,
    )


def _producer_error_code(exc: ProducerStateError) -> ErrorCode:
    if isinstance(exc, OutOfOrderSequenceError):
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    if isinstance(exc, InvalidProducerEpochError):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return ErrorCode.UNKNOWN_PRODUCER_ID


async def init_producer_id(
    state: BrokerState, header: RequestHeader, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        if not access.allowed(state, header, Operation.WRITE, access.TRANSACTIONAL_ID, request.transactional_id):
            return InitProducerIdResponse(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1
            )
        txn = state.transactions
        if txn is None:
            return InitProducerIdResponse(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                producer_id=-1,
                producer_epoch=-1,
            )
        error, producer_id, epoch = await txn.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms
        )
        return InitProducerIdResponse(error_code=txn_code(error), producer_id=producer_id, producer_epoch=epoch)
    if not (
        access.allowed_on_cluster(state, header, Operation.IDEMPOTENT_WRITE)
        or access.allowed_on_some(state, header, Operation.WRITE, access.TOPIC)
    ):
        return InitProducerIdResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    producer_id = await state.run_blocking(state.producer_ids.allocate)
    return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)
