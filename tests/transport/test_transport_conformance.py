"""The transport interface (``transport/base.py``) on both drivers, same test code: what the
engine relies on from a consumer and a producer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence

import pytest

import streamkit as sk
from streamkit.transport.base import Consumer, ConsumerRecord, LogClient, RecordMetadata
from streamkit.transport.connect import open_log_client


class Recorder:
    def __init__(self) -> None:
        self.assigned: list[set[sk.TopicPartition]] = []
        self.revoked: list[set[sk.TopicPartition]] = []

    async def on_partitions_revoked(self, revoked: set[sk.TopicPartition]) -> None:
        self.revoked.append(set(revoked))

    async def on_partitions_assigned(self, assigned: set[sk.TopicPartition]) -> None:
        self.assigned.append(set(assigned))


async def fetch_until(
    consumer: Consumer, want: int, timeout: float = 30
) -> dict[sk.TopicPartition, list[ConsumerRecord]]:
    """Fetch until ``want`` records came (bounded)."""
    out: dict[sk.TopicPartition, list[ConsumerRecord]] = {}
    deadline = time.monotonic() + timeout
    while sum(len(v) for v in out.values()) < want:
        assert time.monotonic() < deadline, f"fetched {sum(len(v) for v in out.values())} of {want}"
        fetched: Mapping[sk.TopicPartition, Sequence[ConsumerRecord]] = await consumer.getmany(100, 1000)
        for tp, records in fetched.items():
            out.setdefault(tp, []).extend(records)
    return out


async def produce(client: LogClient, topic: str, partition: int, values: list[bytes]) -> None:
    producer = client.producer()
    await producer.start()
    try:
        for i, value in enumerate(values):
            await producer.send(topic, f"k{i}".encode(), value, partition=partition, timestamp_ms=1_700_000_000_000 + i)
        await producer.flush()
    finally:
        await producer.aclose()


@pytest.fixture
async def client(log_url: str) -> AsyncIterator[LogClient]:
    c = open_log_client(log_url)
    await c.start()
    yield c
    await c.aclose()


async def test_a_consumer_reads_in_order_and_reports_positions(client: LogClient, unique: str) -> None:
    topic = f"{unique}-order"
    assert await client.ensure_topic(topic, 2) == 2
    assert await client.ensure_topic(topic, 5) == 2  # exists: its count, not the one asked
    assert await client.partition_count(topic) == 2
    await produce(client, topic, 1, [b"%d" % i for i in range(20)])
    listener = Recorder()
    consumer = client.consumer(f"{unique}-g")
    consumer.subscribe([topic], listener)
    await consumer.start()
    try:
        got = await fetch_until(consumer, 20)
        tp = sk.TopicPartition(topic, 1)
        assert [r.offset for r in got[tp]] == list(range(20))
        assert [r.value for r in got[tp]] == [b"%d" % i for i in range(20)]
        assert got[tp][3].key == b"k3" and got[tp][3].timestamp == 1_700_000_000_003
        assert consumer.position(tp) == 20 and consumer.highwater(tp) == 20
        assert listener.assigned[-1] == {sk.TopicPartition(topic, 0), tp}
        assert consumer.assignment() == {sk.TopicPartition(topic, 0), tp}
        assert consumer.unavailable() == {}
    finally:
        await consumer.aclose()


async def test_commits_are_where_the_next_member_of_the_group_starts(client: LogClient, unique: str) -> None:
    topic = f"{unique}-commit"
    await client.ensure_topic(topic, 1)
    await produce(client, topic, 0, [b"%d" % i for i in range(10)])
    tp = sk.TopicPartition(topic, 0)
    first = client.consumer(f"{unique}-g")
    first.subscribe([topic], Recorder())
    await first.start()
    try:
        await fetch_until(first, 10)
        await first.commit({tp: 4})
        assert await first.committed(tp) == 4
    finally:
        await first.aclose()
    second = client.consumer(f"{unique}-g")
    second.subscribe([topic], Recorder())
    await second.start()
    try:
        got = await fetch_until(second, 6)
        assert [r.offset for r in got[tp]] == list(range(4, 10))
    finally:
        await second.aclose()


async def test_seek_pause_and_resume(client: LogClient, unique: str) -> None:
    topic = f"{unique}-seek"
    await client.ensure_topic(topic, 2)
    await produce(client, topic, 0, [b"a%d" % i for i in range(10)])
    await produce(client, topic, 1, [b"b%d" % i for i in range(10)])
    p0, p1 = sk.TopicPartition(topic, 0), sk.TopicPartition(topic, 1)
    consumer = client.consumer(f"{unique}-g")
    consumer.subscribe([topic], Recorder())
    await consumer.start()
    try:
        await fetch_until(consumer, 20)
        consumer.seek(p0, 7)
        consumer.seek(p1, 5)
        consumer.pause([p1])
        got = await fetch_until(consumer, 3)
        assert [r.offset for r in got[p0]] == [7, 8, 9] and p1 not in got
        # Paused: nothing of p1 comes, however long one asks.
        for _ in range(3):
            assert p1 not in await consumer.getmany(100, 1000)
        consumer.resume([p1])
        got = await fetch_until(consumer, 5)
        assert [r.offset for r in got[p1]] == [5, 6, 7, 8, 9]
    finally:
        await consumer.aclose()


async def test_a_producer_flush_waits_for_every_acknowledgement(client: LogClient, unique: str) -> None:
    topic = f"{unique}-flush"
    await client.ensure_topic(topic, 3)
    producer = client.producer()
    await producer.start()
    try:
        acks = [await producer.send(topic, None, b"%d" % i, partition=i % 3) for i in range(300)]
        for i in range(300, 600):
            assert producer.send_nowait(topic, i % 3, None, b"%d" % i, 1_700_000_000_000) is None
        await producer.flush()
        done = await asyncio.gather(*(asyncio.ensure_future(_resolve(a)) for a in acks))
    finally:
        await producer.aclose()
    assert [(m.partition, m.offset) for m in done[:6]] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    consumer = client.consumer(f"{unique}-g")
    consumer.subscribe([topic], Recorder())
    await consumer.start()
    try:
        got = await fetch_until(consumer, 600)
    finally:
        await consumer.aclose()
    for p in range(3):
        assert [int(r.value or b"") for r in got[sk.TopicPartition(topic, p)]] == list(range(p, 600, 3))


async def _resolve(ack: Awaitable[RecordMetadata]) -> RecordMetadata:
    return await ack
