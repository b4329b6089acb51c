"""OffsetFetch v7 (RequireStable) and TxnOffsetCommit v3 (the consumer's generation) on the wire.

aiokafka's structs stop below these (flexible) versions, so the two requests and responses
are encoded and decoded here by hand from Kafka's schemas: compact strings and arrays
(unsigned-varint length + 1), a tagged-field section (empty: one 0 byte) after every struct,
request header v2 and response header v1. The rest of a transaction (InitProducerId,
AddOffsetsToTxn, EndTxn) and the group (JoinGroup, SyncGroup) go through aiokafka's structs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pytest
from aiokafka.protocol.admin import ApiVersionRequest_v0
from aiokafka.protocol.commit import OffsetFetchRequest_v3
from aiokafka.protocol.group import JoinGroupRequest_v1, SyncGroupRequest_v1
from aiokafka.protocol.transaction import (
    AddOffsetsToTxnRequest_v0,
    EndTxnRequest_v0,
    InitProducerIdRequest_v0,
)

from tests.support.broker import BrokerProcess, WireClient

pytestmark = pytest.mark.timeout(60)

OFFSET_FETCH, TXN_OFFSET_COMMIT = 9, 28
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, UNSTABLE_OFFSET_COMMIT = 22, 25, 82, 88


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    data = s.encode()
    return uvarint(len(data) + 1) + data


def compact_array(items: list[bytes] | None) -> bytes:
    return uvarint(0) if items is None else uvarint(len(items) + 1) + b"".join(items)


TAGS = uvarint(0)


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        text = self.data[self.at : self.at + n].decode()
        self.at += n
        return text

    def tags(self) -> None:
        assert self.uvarint() == 0, "no tagged fields expected"


def flexible_call(wire: WireClient, api_key: int, version: int, body: bytes) -> Reader:
    """Send with request header v2; the body after response header v1."""
    wire.correlation_id += 1
    client = b"wire-test"
    header = struct.pack(">hhih", api_key, version, wire.correlation_id, len(client)) + client + TAGS
    wire.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
    reader = Reader(wire.recv_frame())
    assert reader.take(">i") == wire.correlation_id
    reader.tags()
    return reader


def offset_fetch_v7(wire: WireClient, group: str, topic: str, partitions: list[int], *, require_stable: bool) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code)."""
    body = (
        compact_string(group)
        + compact_array([compact_string(topic) + compact_array([struct.pack(">i", p) for p in partitions]) + TAGS])
        + struct.pack(">?", require_stable)
        + TAGS
    )
    r = flexible_call(wire, OFFSET_FETCH, 7, body)
    r.take(">i")  # throttle
    out: dict[int, tuple[int, int]] = {}
    for _ in range(r.uvarint() - 1):
        assert r.string() == topic
        for _ in range(r.uvarint() - 1):
            partition, offset, _epoch = r.take(">i"), r.take(">q"), r.take(">i")
            r.string()  # metadata
            out[partition] = (offset, r.take(">h"))
            r.tags()
        r.tags()
    assert r.take(">h") == 0  # the request's error
    r.tags()
    return out


@dataclass
class Txn:
    transactional_id: str
    producer_id: int
    epoch: int


def txn_offset_commit_v3(
    wire: WireClient, txn: Txn, group: str, topic: str, offsets: dict[int, int], *,
    generation_id: int = -1, member_id: str = "", group_instance_id: str | None = None,
) -> dict[int, int]:
    """partition -> error code."""
    partitions = [struct.pack(">iqi", p, o, -1) + compact_string("") + TAGS for p, o in offsets.items()]
    body = (
        compact_string(txn.transactional_id) + compact_string(group)
        + struct.pack(">qhi", txn.producer_id, txn.epoch, generation_id)
        + compact_string(member_id) + compact_string(group_instance_id)
        + compact_array([compact_string(topic) + compact_array(partitions) + TAGS])
        + TAGS
    )
    r = flexible_call(wire, TXN_OFFSET_COMMIT, 3, body)
    r.take(">i")  # throttle
    out: dict[int, int] = {}
    for _ in range(r.uvarint() - 1):
        assert r.string() == topic
        for _ in range(r.uvarint() - 1):
            partition = r.take(">i")
            out[partition] = r.take(">h")
            r.tags()
        r.tags()
    r.tags()
    return out


def begin_with_offsets(wire: WireClient, transactional_id: str, group: str) -> Txn:
    init = wire.call(InitProducerIdRequest_v0(transactional_id=transactional_id, transaction_timeout_ms=60_000))
    assert init.error_code == 0
    txn = Txn(transactional_id, init.producer_id, init.producer_epoch)
    added = wire.call(AddOffsetsToTxnRequest_v0(
        transactional_id=transactional_id, producer_id=txn.producer_id, producer_epoch=txn.epoch, group_id=group
    ))
    assert added.error_code == 0
    return txn


def end(wire: WireClient, txn: Txn, *, commit: bool) -> None:
    ended = wire.call(EndTxnRequest_v0(
        transactional_id=txn.transactional_id, producer_id=txn.producer_id, producer_epoch=txn.epoch,
        transaction_result=commit,
    ))
    assert ended.error_code == 0


@pytest.fixture
def wire(broker: BrokerProcess) -> WireClient:
    client = WireClient(broker.host, broker.port)
    yield client  # type: ignore[misc]
    client.close()


def test_api_versions_offer_what_exactly_once_v2_needs(wire: WireClient) -> None:
    table = {key: (lo, hi) for key, lo, hi in wire.call(ApiVersionRequest_v0()).api_versions}
    assert table[OFFSET_FETCH] == (1, 7)
    assert table[TXN_OFFSET_COMMIT] == (0, 3)


def test_require_stable_sees_a_pending_transactional_offset_as_unstable(wire: WireClient, unique: str) -> None:
    topic, group = f"{unique}-t", f"{unique}-g"
    wire.call(OffsetFetchRequest_v3(consumer_group=group, topics=[(topic, [0])]))  # any topic name will do
    txn = begin_with_offsets(wire, f"{unique}-tx", group)
    assert txn_offset_commit_v3(wire, txn, group, topic, {0: 42}) == {0: 0}

    assert offset_fetch_v7(wire, group, topic, [0, 1], require_stable=True) == {0: (-1, UNSTABLE_OFFSET_COMMIT), 1: (-1, 0)}
    assert offset_fetch_v7(wire, group, topic, [0], require_stable=False) == {0: (-1, 0)}
    old = wire.call(OffsetFetchRequest_v3(consumer_group=group, topics=[(topic, [0])]))
    assert old.topics[0][1][0][1] == -1 and old.topics[0][1][0][3] == 0  # v3 has no RequireStable

    end(wire, txn, commit=True)
    assert offset_fetch_v7(wire, group, topic, [0], require_stable=True) == {0: (42, 0)}


def test_an_aborted_transaction_leaves_the_offset_stable_and_unchanged(wire: WireClient, unique: str) -> None:
    topic, group = f"{unique}-t", f"{unique}-g"
    txn = begin_with_offsets(wire, f"{unique}-tx", group)
    assert txn_offset_commit_v3(wire, txn, group, topic, {0: 7}) == {0: 0}
    end(wire, txn, commit=False)
    assert offset_fetch_v7(wire, group, topic, [0], require_stable=True) == {0: (-1, 0)}


def join_alone(wire: WireClient, group: str) -> tuple[str, int]:
    """Join ``group`` as its only member and complete the rebalance: (member id, generation)."""
    joined = wire.call(JoinGroupRequest_v1(
        group=group, session_timeout=30_000, rebalance_timeout=10_000, member_id="",
        protocol_type="consumer", group_protocols=[("range", b"")],
    ))
    assert joined.error_code == 0
    synced = wire.call(SyncGroupRequest_v1(
        group=group, generation_id=joined.generation_id, member_id=joined.member_id,
        group_assignment=[(joined.member_id, b"")],
    ))
    assert synced.error_code == 0
    return joined.member_id, joined.generation_id


def test_txn_offset_commit_v3_fences_stale_generations_and_unknown_members(wire: WireClient, unique: str) -> None:
    topic, group = f"{unique}-t", f"{unique}-g"
    member, generation = join_alone(wire, group)
    txn = begin_with_offsets(wire, f"{unique}-tx", group)

    stale = txn_offset_commit_v3(wire, txn, group, topic, {0: 5, 1: 6}, generation_id=generation - 1, member_id=member)
    assert stale == {0: ILLEGAL_GENERATION, 1: ILLEGAL_GENERATION}
    unknown = txn_offset_commit_v3(wire, txn, group, topic, {0: 5}, generation_id=generation, member_id="zombie")
    assert unknown == {0: UNKNOWN_MEMBER_ID}
    fenced_instance = txn_offset_commit_v3(
        wire, txn, group, topic, {0: 5}, generation_id=generation, member_id="zombie", group_instance_id="ghost"
    )
    assert fenced_instance == {0: UNKNOWN_MEMBER_ID}  # an instance id the group never saw
    # A fenced commit holds nothing: the partition is not pending.
    assert offset_fetch_v7(wire, group, topic, [0], require_stable=True) == {0: (-1, 0)}

    assert txn_offset_commit_v3(wire, txn, group, topic, {0: 5}, generation_id=generation, member_id=member) == {0: 0}
    # v0-v2 name no member: not checked against the group, as in Kafka.
    assert txn_offset_commit_v3(wire, txn, group, topic, {1: 6}) == {1: 0}
    end(wire, txn, commit=True)
    assert offset_fetch_v7(wire, group, topic, [0, 1], require_stable=True) == {0: (5, 0), 1: (6, 0)}


def test_txn_offset_commit_to_a_group_gone_with_a_generation_is_illegal(wire: WireClient, unique: str) -> None:
    txn = begin_with_offsets(wire, f"{unique}-tx", f"{unique}-g")
    assert txn_offset_commit_v3(
        wire, txn, f"{unique}-g", f"{unique}-t", {0: 1}, generation_id=3, member_id="m"
    ) == {0: ILLEGAL_GENERATION}
