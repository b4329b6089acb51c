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
"""

from __future__ import annotations

from streamkit._core.types import TopicPartition
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


def _coordinator(state: BrokerState) -> TransactionCoordinator:
    # Handlers are registered only when transactions are enabled.
    assert state.transactions is not None
    return state.transactions


async def add_partitions_to_txn(
    state: BrokerState, header: RequestHeader, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    wanted = [TopicPartition(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    errors = await _coordinator(state).add_partitions(
        request.v3_and_below_transactional_id,
        request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch,
        wanted,
    )
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for tp in wanted:
        by_topic.setdefault(tp.topic, []).append(
            AddPartitionsToTxnPartitionResult(partition_index=tp.partition, partition_error_code=txn_code(errors[tp]))
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
    error = await _coordinator(state).add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
    )
    return AddOffsetsToTxnResponse(error_code=txn_code(error))


async def end_txn(state: BrokerState, header: RequestHeader, request: EndTxnRequest) -> EndTxnResponse:
    error = await _coordinator(state).end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return EndTxnResponse(error_code=txn_code(error))


async def txn_offset_commit(
    state: BrokerState, header: RequestHeader, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse:
    offsets = {
        TopicPartition(t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "")
        for t in request.topics
        for p in t.partitions
    }
    fenced = await state.coordinator.validate_txn_offset_commit(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id
    )
    codes: dict[TopicPartition, int]
    if fenced != 0:
        codes = dict.fromkeys(offsets, int(fenced))
    else:
        errors = _coordinator(state).txn_offset_commit(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, offsets
        )
        codes = {tp: txn_code(error) for tp, error in errors.items()}
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
        ],
    )


async def describe_transactions(
    state: BrokerState, header: RequestHeader, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    coordinator = _coordinator(state)
    return DescribeTransactionsResponse(
        transaction_states=[_describe(coordinator, tid) for tid in request.transactional_ids]
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
