"""Committed offsets read stable (KIP-447, ``streamkit/transport/kafka_offsets.py``; issue 26).

On Kafka, offsets a transaction sent (TxnOffsetCommit) are pending until its marker reaches
``__consumer_offsets``. The window between EndTxn's answer and the marker is too short to hit
on purpose, so these tests widen it to as long as they like: a transaction sends offsets and is
held open, and a reader must wait for it (UNSTABLE_OFFSET_COMMIT) instead of answering the
offset before it; it answers the transaction's offset once it commits, the previous one once it
aborts. A plain OffsetFetch (v3, aiokafka's) answers the previous offset at once: each test
here fails so on a reader without ``require_stable``.

On Apache Kafka and on ``streamkit broker`` once it offers OffsetFetch v7 (skipped until then,
with the reason); the encoding, the version choice and the answers' errors are checked on
their own below, without a broker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from io import BytesIO
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka import TopicPartition as KafkaTP
from aiokafka.errors import GroupLoadInProgressError, KafkaError
from aiokafka.protocol.commit import OffsetFetchRequest_v3, OffsetFetchResponse_v3
from aiokafka.structs import OffsetAndMetadata

from streamkit._core.types import TopicPartition
from streamkit.log.server.apis import ADVERTISED, OFFSET_FETCH
from streamkit.transport.base import READ_COMMITTED, LogClient, TransportError
from streamkit.transport.connect import open_log_client
from streamkit.transport.kafka import KafkaConsumer
from streamkit.transport.kafka_offsets import (
    OffsetFetchRequest_v7,
    OffsetFetchResponse_v7,
    StableOffsetFetch,
    UnstableOffsetCommitError,
    fetch_offsets,
)
from tests.support.broker import BrokerProcess
from tests.support.kafka import KafkaCluster

HELD_S = 1.5  # how long a reader must keep waiting while the transaction is held open


class Quiet:
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


@pytest.fixture(params=["broker", "kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    if request.param == "kafka":
        kafka: KafkaCluster = request.getfixturevalue("kafka")
        return kafka.bootstrap
    low, high = ADVERTISED[OFFSET_FETCH]
    if high < 7:
        pytest.skip(f"streamkit broker offers OffsetFetch v{low}-v{high}: require_stable needs v7")
    broker: BrokerProcess = request.getfixturevalue("broker")
    return broker.bootstrap


@pytest.fixture
async def client(bootstrap: str) -> AsyncIterator[LogClient]:
    c = open_log_client(f"kafka://{bootstrap}")
    await c.start()
    yield c
    await c.aclose()


class Held:
    """A transaction that sent offsets to the group and is held open (aiokafka's producer:
    streamkit's commits its offsets at once)."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=transactional_id, enable_idempotence=True
        )

    async def open(self, tp: TopicPartition, offset: int, metadata: str, group: str) -> None:
        await self.producer.start()
        await self.producer.begin_transaction()
        await self.producer.send_offsets_to_transaction(
            {KafkaTP(tp.topic, tp.partition): OffsetAndMetadata(offset, metadata)}, group
        )

    async def end(self, commit: bool) -> None:
        if commit:
            await self.producer.commit_transaction()
        else:
            await self.producer.abort_transaction()

    async def close(self) -> None:
        await self.producer.stop()


async def _commit_stable(client: LogClient, tp: TopicPartition, group: str, offset: int, metadata: str, tid: str) -> None:
    producer = client.transactional_producer(tid, timeout_ms=30_000)
    await producer.start()
    try:
        await producer.commit_transaction({tp: offset}, group, metadata={tp: metadata})
    finally:
        await producer.aclose()


@pytest.mark.parametrize("ending", ["commit", "abort"])
async def test_committed_waits_for_a_transaction_holding_the_offset(
    client: LogClient, bootstrap: str, unique: str, ending: str
) -> None:
    topic, group = f"{unique}-in", f"{unique}-g"
    await client.ensure_topic(topic, 1)
    p0 = TopicPartition(topic, 0)
    await _commit_stable(client, p0, group, 3, "st=old", f"{unique}-first")
    reader = client.consumer(group)
    held = Held(bootstrap, f"{unique}-held")
    try:
        assert await reader.committed(p0) == 3  # stable: answered at once
        await held.open(p0, 7, "st=new", group)
        offset = asyncio.ensure_future(reader.committed(p0))
        metadata = asyncio.ensure_future(reader.committed_metadata(p0))
        await asyncio.sleep(HELD_S)
        # A plain OffsetFetch has answered (3, "st=old") by now: the offset a committed
        # transaction is about to replace.
        assert not offset.done() and not metadata.done(), (offset, metadata)
        await held.end(ending == "commit")
        expected = (7, "st=new") if ending == "commit" else (3, "st=old")
        assert await asyncio.wait_for(asyncio.gather(offset, metadata), 15) == list(expected)
    finally:
        await held.close()
        await reader.aclose()


async def test_a_read_committed_member_starts_after_the_held_transaction(
    client: LogClient, bootstrap: str, unique: str
) -> None:
    """The positions of an assignment: a member that reads committed takes no record of a
    partition whose offset a transaction holds, then starts at that transaction's offset."""
    topic, group = f"{unique}-in", f"{unique}-g"
    await client.ensure_topic(topic, 1)
    p0 = TopicPartition(topic, 0)
    producer = client.producer()
    await producer.start()
    try:
        for i in range(10):
            await producer.send(topic, None, b"%d" % i, partition=0)
        await producer.flush()
    finally:
        await producer.aclose()
    await _commit_stable(client, p0, group, 3, "st=old", f"{unique}-first")
    held = Held(bootstrap, f"{unique}-held")
    member = client.consumer(group, isolation_level=READ_COMMITTED)
    try:
        await held.open(p0, 7, "st=new", group)
        member.subscribe([topic], Quiet())
        await member.start()
        deadline = time.monotonic() + 30
        while not member.assignment():
            assert time.monotonic() < deadline, "never assigned"
            assert not await member.getmany(100, 100)
        until = time.monotonic() + HELD_S
        while time.monotonic() < until:
            # Without require_stable the member starts at 3, the offset before the transaction.
            assert not await member.getmany(100, 100), "a record fetched while the offset was pending"
        assert member.position(p0) is None
        await held.end(commit=True)
        first: list[int] = []
        while not first:
            assert time.monotonic() < deadline + 30, "no record after the transaction committed"
            fetched = await member.getmany(200, 100)
            first = [r.offset for r in fetched.get(p0, ())]
        assert first == [7, 8, 9]
    finally:
        await held.close()
        await member.aclose()


async def test_an_offset_unstable_past_the_request_timeout_is_a_clear_error(
    client: LogClient, bootstrap: str, unique: str
) -> None:
    topic, group = f"{unique}-in", f"{unique}-g"
    await client.ensure_topic(topic, 1)
    p0 = TopicPartition(topic, 0)
    held = Held(bootstrap, f"{unique}-held")
    reader = KafkaConsumer(bootstrap, group, "earliest", request_timeout_ms=2_000)
    try:
        await held.open(p0, 7, "st=new", group)
        started = time.monotonic()
        with pytest.raises(TransportError, match=rf"{topic}-0 stayed unstable for 2000 ms \(UNSTABLE_OFFSET_COMMIT\)"):
            await reader.committed(p0)
        assert 1.0 < time.monotonic() - started < 10
        await held.end(commit=False)
        assert await reader.committed(p0) is None  # aborted: nothing was ever committed
    finally:
        await held.close()
        await reader.aclose()


# Without a broker: the request each broker gets, and what an answer means.


def test_the_request_is_v7_with_the_flag_where_offered_and_v3_without_it_elsewhere() -> None:
    request = StableOffsetFetch("g", [("t", [0, 2])], require_stable=True)
    v7 = request.prepare({OFFSET_FETCH: (1, 9)})
    assert isinstance(v7, OffsetFetchRequest_v7)
    assert v7.FLEXIBLE_VERSION
    # Compact strings and arrays count length + 1 (unsigned varints); each struct ends in an
    # empty tagged-field section.
    assert v7.encode() == b"\x02g" + b"\x02" + b"\x02t" + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x02" + b"\x00" + b"\x01" + b"\x00"
    v3 = request.prepare({OFFSET_FETCH: (1, 3)})  # streamkit broker when this was written
    assert isinstance(v3, OffsetFetchRequest_v3)
    assert v3.encode() == OffsetFetchRequest_v3("g", [("t", [0, 2])]).encode()


def _v7_answer(partitions: list[tuple[int, int, str | None, int]], error_code: int = 0) -> bytes:
    """A v7 response body: throttle, topics (each: name, partitions, tags), error, tags."""
    out = b"\x00\x00\x00\x00" + b"\x02" + b"\x02t" + bytes([len(partitions) + 1])
    for partition, offset, metadata, code in partitions:
        meta = b"\x00" if metadata is None else bytes([len(metadata) + 1]) + metadata.encode()
        out += partition.to_bytes(4, "big") + offset.to_bytes(8, "big", signed=True) + b"\xff\xff\xff\xff"
        out += meta + code.to_bytes(2, "big") + b"\x00"
    return out + b"\x00" + error_code.to_bytes(2, "big") + b"\x00"


class FakeCoordinator:
    """What ``fetch_offsets`` uses of aiokafka's group coordinator: one canned answer."""

    group_id = "g"

    def __init__(self, response: Any) -> None:
        self.response = response
        self.dead = 0

    async def _send_req(self, request: StableOffsetFetch) -> Any:
        return self.response

    def coordinator_dead(self) -> None:
        self.dead += 1


async def test_answers_decode_into_offsets_and_errors() -> None:
    tps = [KafkaTP("t", 0), KafkaTP("t", 1), KafkaTP("t", 2)]
    answer = OffsetFetchResponse_v7.decode(BytesIO(_v7_answer([(0, 7, "st=1", 0), (1, -1, None, 0), (2, 4, None, 0)])))
    found = await fetch_offsets(FakeCoordinator(answer), tps, require_stable=True)
    assert found == {tps[0]: OffsetAndMetadata(7, "st=1"), tps[2]: OffsetAndMetadata(4, "")}
    # One partition pending in a transaction: nothing is answered, the error names it.
    unstable = OffsetFetchResponse_v7.decode(BytesIO(_v7_answer([(0, 7, "", 0), (1, -1, None, 88)])))
    with pytest.raises(UnstableOffsetCommitError, match=r"UNSTABLE_OFFSET_COMMIT.*t-1") as raised:
        await fetch_offsets(FakeCoordinator(unstable), tps[:2], require_stable=True)
    assert raised.value.retriable and raised.value.partitions == [tps[1]]
    # A group-level error with no partitions (Kafka's answer while the coordinator loads) is
    # that error, not "nothing committed"; v3's top-level code too.
    loading = OffsetFetchResponse_v7.decode(BytesIO(_v7_answer([], error_code=14)))
    with pytest.raises(GroupLoadInProgressError):
        await fetch_offsets(FakeCoordinator(loading), tps, require_stable=True)
    moved = FakeCoordinator(OffsetFetchResponse_v3(0, [], 16))
    with pytest.raises(KafkaError, match=r"\[Error 16\]") as not_coordinator:
        await fetch_offsets(moved, tps, require_stable=True)
    assert not_coordinator.value.retriable and moved.dead == 1
    v3 = OffsetFetchResponse_v3(0, [("t", [(0, 5, "m", 0), (1, 2, "", 3)])], 0)  # 3: unknown topic
    assert await fetch_offsets(FakeCoordinator(v3), tps[:2], require_stable=False) == {tps[0]: OffsetAndMetadata(5, "m")}
