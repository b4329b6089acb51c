"""Transaction requests, translated to and from ``TransactionCoordinator`` calls
(``log/txn``), whose ``TxnErrorCode`` answers ``txn_code`` turns into ``ErrorCode`` members.

AddPartitionsToTxn v0-1, AddOffsetsToTxn v0-1, EndTxn v0-1 and TxnOffsetCommit v0-3 (the
group-coordinator side of ``send_offsets_to_transaction``). InitProducerId with a
transactional id is in ``produce.py`` beside the idempotent case.

TxnOffsetCommit v3 names the consumer's member id, generation and group instance id: the
group coordinator checks them first, as Kafka's does, so a zombie of an old generation is
fenced (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID for every partition, no
offset held) before the transaction coordinator checks the producer.
"""

from __future__ import annotations

from streamkit._core.types import TopicPartition
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import txn_code
from streamkit.log.server.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from streamkit.log.server.state import BrokerState
from streamkit.log.txn.coordinator import TransactionCoordinator


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
