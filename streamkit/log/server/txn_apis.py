"""Transaction requests, translated to and from ``TransactionCoordinator`` calls
(``log/txn``), whose ``TxnErrorCode`` answers ``txn_code`` turns into ``ErrorCode`` members.

AddPartitionsToTxn v0-1, AddOffsetsToTxn v0-1, EndTxn v0-1 and TxnOffsetCommit v0-3 (the
group-coordinator side of ``send_offsets_to_transaction``). InitProducerId with a
transactional id is in ``produce.py`` beside the idempotent case.

ListTransactions v0-1 and DescribeTransactions v0 (``kafka-transactions list|describe``)
report the coordinator's state under Kafka's state names, filtered as Kafka's
``listTransactionStates`` does. DescribeTransactions answers each id named, in order: an
empty id INVALID_REQUEST, one never seen TRANSACTIONAL_ID_NOT_FOUND; the partitions are those
of the open transaction (none once it is complete), the start time -1 while Empty.

TxnOffsetCommit v3 names the consumer's member id, generation and group instance id: the
group coordinator checks them first, as Kafka's does, so a zombie of an old generation is
fenced (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID for every partition, no
offset held) before the transaction coordinator checks the producer.

With an authorizer (``BrokerConfig.authorizer``) each request is first checked as Kafka's
``KafkaApis`` checks it, answered with Kafka's authorization error at Kafka's granularity
(``access.py``; the checks are listed in ``docs/security.md``).
"""

from __future__ import annotations

from streamkit._core.types import TopicPartition
from streamkit.log.server import access
from streamkit.log.server.authorizer import Operation
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode, txn_code
from streamkit.log.server.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsTopicData,
    DescribeTransactionsTransactionState,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    ListTransactionsTransactionState,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from streamkit.log.server.state import BrokerState
from streamkit.log.txn.coordinator import TransactionCoordinator, start_time_ms


def _may_write(state: BrokerState, header: RequestHeader, transactional_id: str) -> bool:
    return access.allowed(state, header, Operation.WRITE, access.TRANSACTIONAL_ID, transactional_id)


def _coordinator(state: BrokerState) -> TransactionCoordinator:
    # Handlers are registered only when transactions are enabled.
    assert state.transactions is not None
    return state.transactions


async def add_partitions_to_txn(
    state: BrokerState, header: RequestHeader, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    wanted = [TopicPartition(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    # Kafka: WRITE on the transactional id, else every partition fails; WRITE on each topic,
    # else its partitions fail and the others are not attempted.
    codes: dict[TopicPartition, int]
    writable = access.allowed_names(state, header, Operation.WRITE, access.TOPIC, (tp.topic for tp in wanted))
    if not _may_write(state, header, request.v3_and_below_transactional_id):
        codes = dict.fromkeys(wanted, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    elif any(tp.topic not in writable for tp in wanted):
        codes = {
            tp: ErrorCode.OPERATION_NOT_ATTEMPTED if tp.topic in writable else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            for tp in wanted
        }
    else:
        errors = await _coordinator(state).add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            wanted,
        )
        codes = {tp: txn_code(errors[tp]) for tp in wanted}
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for tp in wanted:
        by_topic.setdefault(tp.topic, []).append(
            AddPartitionsToTxnPartitionResult(partition_index=tp.partition, partition_error_code=codes[tp])
        )
    return AddPartitionsToTxnResponse(
        results_by_topic_v3_and_below=[
            AddPartitionsToTxnTopicResult(name=name, results_by_partition=parts)
            for name, parts in by_topic.items()
        ]
    )


async def add_offsets_to_txn(
    state: BrokerState, header: RequestHeader, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    if not _may_write(state, header, request.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not access.allowed(state, header, Operation.READ, access.GROUP, request.group_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = await _coordinator(state).add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
    )
    return AddOffsetsToTxnResponse(error_code=txn_code(error))


async def end_txn(state: BrokerState, header: RequestHeader, request: EndTxnRequest) -> EndTxnResponse:
    if not _may_write(state, header, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    error = await _coordinator(state).end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return EndTxnResponse(error_code=txn_code(error))


async def txn_offset_commit(
    state: BrokerState, header: RequestHeader, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    every = [TopicPartition(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    readable = access.allowed_names(state, header, Operation.READ, access.TOPIC, (t.name for t in request.topics))
    offsets = {
        TopicPartition(t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "")
        for t in request.topics
        if t.name in readable
        for p in t.partitions
    }
    codes: dict[TopicPartition, int] = dict.fromkeys(every, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    if not _may_write(state, header, request.transactional_id):
        codes = dict.fromkeys(every, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    elif not access.allowed(state, header, Operation.READ, access.GROUP, request.group_id):
        codes = dict.fromkeys(every, int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    elif offsets:
        fenced = await state.coordinator.validate_txn_offset_commit(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id
        )
        if fenced != 0:
            codes.update(dict.fromkeys(offsets, int(fenced)))
        else:
            errors = _coordinator(state).txn_offset_commit(
                request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, offsets
            )
            codes.update({tp: txn_code(error) for tp, error in errors.items()})
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=codes[TopicPartition(t.name, p.partition_index)],
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


async def list_transactions(
    state: BrokerState, header: RequestHeader, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    entries, unknown = _coordinator(state).list_transactions(
        request.state_filters, request.producer_id_filters, request.duration_filter
    )
    return ListTransactionsResponse(
        unknown_state_filters=unknown,
        transaction_states=[
            ListTransactionsTransactionState(
                transactional_id=e.transactional_id, producer_id=e.producer_id, transaction_state=e.state.value
            )
            for e in entries
            # Kafka lists only the ids the principal may describe.
            if access.allowed(state, header, Operation.DESCRIBE, access.TRANSACTIONAL_ID, e.transactional_id)
        ],
    )


async def describe_transactions(
    state: BrokerState, header: RequestHeader, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    coordinator = _coordinator(state)
    return DescribeTransactionsResponse(
        transaction_states=[
            _describe(coordinator, tid)
            if access.allowed(state, header, Operation.DESCRIBE, access.TRANSACTIONAL_ID, tid)
            else DescribeTransactionsTransactionState(
                transactional_id=tid, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            )
            for tid in request.transactional_ids
        ]
    )


def _describe(coordinator: TransactionCoordinator, transactional_id: str) -> DescribeTransactionsTransactionState:
    described = DescribeTransactionsTransactionState(transactional_id=transactional_id)
    if not transactional_id:
        described.error_code = ErrorCode.INVALID_REQUEST
        return described
    entry = coordinator.describe(transactional_id)
    if entry is None:
        described.error_code = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        return described
    by_topic: dict[str, list[int]] = {}
    for topic, partition in entry.partitions:
        by_topic.setdefault(topic, []).append(partition)
    described.transaction_state = entry.state.value
    described.transaction_timeout_ms = entry.timeout_ms
    described.transaction_start_time_ms = start_time_ms(entry)
    described.producer_id = entry.producer_id
    described.producer_epoch = entry.epoch
    described.topics = [DescribeTransactionsTopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]
    return described
