"""aiokafka (and so faust) against a real broker: produce, consume, groups, admin, offsets."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30  # every client wait is bounded by this


async def consume_values(consumer: AIOKafkaConsumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(values) < count:
        assert time.monotonic() < deadline, f"only {len(values)} of {count} records arrived"
        batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), WAIT_S)
        for messages in batches.values():
            values.extend(m.value for m in messages)
    return values


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_produce_and_consume(broker: BrokerProcess, unique: str, acks: int | str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks=acks, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(unique, f"value-{i}".encode(), key=f"key-{i % 7}".encode(),
                                headers=[("h", b"x")])
            for i in range(500)
        ]
        await producer.flush()
        await asyncio.wait_for(asyncio.gather(*futures), WAIT_S)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(unique, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        batches = []
        deadline = time.monotonic() + WAIT_S
        while sum(len(b) for b in batches) < 500:
            assert time.monotonic() < deadline
            got = await consumer.getmany(timeout_ms=500)
            batches.extend(got.values())
        messages = [m for b in batches for m in b]
    finally:
        await consumer.stop()
    assert [m.value for m in messages] == [f"value-{i}".encode() for i in range(500)]
    assert [m.offset for m in messages] == list(range(500))
    assert messages[3].key == b"key-3" and messages[3].headers == (("h", b"x"),)


async def test_compressed_batches_and_read_committed(broker: BrokerProcess, unique: str) -> None:
    for codec in ("gzip", "lz4", "zstd", "snappy"):
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec,
                                    enable_idempotence=True)
        await producer.start()
        try:
            for i in range(50):
                await producer.send(unique, f"{codec}-{i}".encode())
            await asyncio.wait_for(producer.flush(), WAIT_S)
        finally:
            await producer.stop()
    consumer = AIOKafkaConsumer(unique, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                isolation_level="read_committed")
    await consumer.start()
    try:
        values = await consume_values(consumer, 200)
    finally:
        await consumer.stop()
    assert values == [f"{c}-{i}".encode() for c in ("gzip", "lz4", "zstd", "snappy") for i in range(50)]


async def test_offsets_for_times_and_seek(broker: BrokerProcess, unique: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(unique, b"v%d" % i, timestamp_ms=1_000_000 + i * 1000)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(unique, 0)
        found = await consumer.offsets_for_times({tp: 1_004_500})
        assert found[tp].offset == 5 and found[tp].timestamp == 1_005_000
        assert (await consumer.offsets_for_times({tp: 9_999_999}))[tp] is None
        assert (await consumer.beginning_offsets([tp]))[tp] == 0
        assert (await consumer.end_offsets([tp]))[tp] == 10
        consumer.assign([tp])
        consumer.seek(tp, 7)
        assert await consume_values(consumer, 3) == [b"v7", b"v8", b"v9"]
    finally:
        await consumer.stop()


async def test_admin_create_describe_delete(broker: BrokerProcess, unique: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        created = await admin.create_topics(
            [NewTopic(unique, 3, 1, topic_configs={"cleanup.policy": "compact"})]
        )
        assert created.topic_errors[0][1] == 0
        again = await admin.create_topics([NewTopic(unique, 3, 1)])
        assert again.topic_errors[0][1] == TopicAlreadyExistsError.errno
        assert unique in await admin.list_topics()
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, unique)])
        entries = {e[0]: e[1] for e in described[0].resources[0][4]}
        assert entries["cleanup.policy"] == "compact"
        await admin.delete_topics([unique])
        assert unique not in await admin.list_topics()
    finally:
        await admin.close()


async def test_group_of_three_members_joining_and_leaving_loses_nothing(
    broker: BrokerProcess, unique: str
) -> None:
    """At-least-once through rebalances: every record processed, offsets committed at the end."""
    topic, group, total = unique, unique + "-group", 3000
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, 6, 1)])
    await admin.close()

    seen: dict[bytes, int] = {}
    stop_flags: dict[str, asyncio.Event] = {}

    async def member(name: str) -> None:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=broker.bootstrap, group_id=group, client_id=name,
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=200, max_poll_interval_ms=10_000,
        )
        await consumer.start()
        try:
            while not stop_flags[name].is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=100)
                for messages in batches.values():
                    for m in messages:
                        seen[m.value] = seen.get(m.value, 0) + 1
                if batches:
                    with contextlib.suppress(Exception):  # a commit during a rebalance may fail
                        await consumer.commit()
        finally:
            with contextlib.suppress(Exception):
                await consumer.commit()
            await consumer.stop()

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
        await producer.start()
        try:
            for i in range(total):
                await producer.send(topic, f"r{i}".encode(), key=str(i).encode())
                if i % 100 == 99:
                    await producer.flush()
                    await asyncio.sleep(0.05)
        finally:
            await producer.stop()

    async def until(predicate: object, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not predicate():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.05)

    tasks: dict[str, asyncio.Task[None]] = {}

    def start(name: str) -> None:
        stop_flags[name] = asyncio.Event()
        tasks[name] = asyncio.create_task(member(name))

    async def leave(name: str) -> None:
        stop_flags[name].set()
        await asyncio.wait_for(tasks[name], WAIT_S)

    producing = asyncio.create_task(produce())
    start("a")
    await until(lambda: len(seen) >= 300, "member a to consume")
    start("b")
    await until(lambda: len(seen) >= 900, "a and b to consume")
    start("c")
    await until(lambda: len(seen) >= 1500, "three members to consume")
    await leave("a")
    await until(lambda: len(seen) >= 2100, "b and c to consume")
    await leave("b")
    await asyncio.wait_for(producing, WAIT_S)
    await until(lambda: len(seen) >= total, "c to consume everything")
    await leave("c")

    expected = {f"r{i}".encode() for i in range(total)}
    assert set(seen) == expected  # nothing lost; duplicates are allowed (at-least-once)

    checker = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    await checker.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(6)]
        ends = await checker.end_offsets(tps)
        for tp in tps:
            assert await checker.committed(tp) == ends[tp]
    finally:
        await checker.stop()
