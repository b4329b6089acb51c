"""Transactional commit metadata on the wire, checked with aiokafka's own request structs (an
encoder independent of ours): TxnOffsetCommit holds it until EndTxn, OffsetFetch returns it, a
metadata past ``offset.metadata.max.bytes`` (4096) gets OFFSET_METADATA_TOO_LARGE (12) for its
partition alone and is held nowhere (as OffsetCommit answers it: ``tests/log/groups``), and an
aborted transaction's offsets are never seen."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiokafka.protocol.commit import OffsetFetchRequest_v3
from aiokafka.protocol.transaction import (
    AddOffsetsToTxnRequest_v0,
    EndTxnRequest_v0,
    InitProducerIdRequest_v0,
    TxnOffsetCommitRequest_v0,
)

from tests.support.broker import BrokerProcess, WireClient

TOO_LARGE = "x" * 4097
OFFSET_METADATA_TOO_LARGE = 12


@pytest.fixture
def wire(broker: BrokerProcess) -> Iterator[WireClient]:
    client = WireClient(broker.host, broker.port)
    yield client
    client.close()


def fetch(wire: WireClient, group: str, topic: str) -> list[tuple[int, int, str, int]]:
    """(partition, offset, metadata, error) of partitions 0 and 1, as OffsetFetch v3 answers."""
    response = wire.call(OffsetFetchRequest_v3(consumer_group=group, topics=[(topic, [0, 1])]))
    assert response.error_code == 0
    [(name, partitions)] = response.topics
    assert name == topic
    return [tuple(p) for p in partitions]


def txn_offsets(wire: WireClient, tid: str, pid: int, epoch: int, group: str, topic: str,
                partitions: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
    """AddOffsetsToTxn, then TxnOffsetCommit of ``partitions``: the per-partition errors."""
    assert wire.call(AddOffsetsToTxnRequest_v0(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)).error_code == 0
    response = wire.call(TxnOffsetCommitRequest_v0(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch,
        topics=[(topic, partitions)]))
    [(name, errors)] = response.errors
    assert name == topic
    return [tuple(e) for e in errors]


def test_txn_offset_commit_carries_metadata_refuses_it_too_large_and_drops_it_on_abort(
    wire: WireClient, unique: str
) -> None:
    group, topic, tid = f"{unique}-g", f"{unique}-t", f"{unique}-tid"
    init = wire.call(InitProducerIdRequest_v0(transactional_id=tid, transaction_timeout_ms=60_000))
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch

    errors = txn_offsets(wire, tid, pid, epoch, group, topic, [(0, 5, "st=5"), (1, 6, TOO_LARGE)])
    assert errors == [(0, 0), (1, OFFSET_METADATA_TOO_LARGE)]
    assert fetch(wire, group, topic) == [(0, -1, "", 0), (1, -1, "", 0)]  # not before the commit
    assert wire.call(EndTxnRequest_v0(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, transaction_result=True)).error_code == 0
    assert fetch(wire, group, topic) == [(0, 5, "st=5", 0), (1, -1, "", 0)]

    # An aborted transaction's offsets and metadata are never seen.
    assert txn_offsets(wire, tid, pid, epoch, group, topic, [(0, 7, "st=aborted"), (1, 7, "st=aborted")]) == [
        (0, 0), (1, 0)]
    assert wire.call(EndTxnRequest_v0(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, transaction_result=False)).error_code == 0
    assert fetch(wire, group, topic) == [(0, 5, "st=5", 0), (1, -1, "", 0)]
