"""Transactions against a real broker: aiokafka (faust's exactly-once path), confluent-kafka,
fencing, timeouts and recovery of a transaction left open by a crash."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition

from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30


async def read_all(bootstrap: str, topic: str, *, committed: bool, expect: int, partitions: int = 1) -> list[bytes]:
    """Every value in ``topic`` (read until ``expect`` arrived and then 0.5 s of silence)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed" if committed else "read_uncommitted",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        values: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        quiet_since = time.monotonic()
        while len(values) < expect or time.monotonic() - quiet_since < 0.5:
            assert time.monotonic() < deadline, f"got {len(values)} of {expect}"
            batches = await consumer.getmany(timeout_ms=100)
            for messages in batches.values():
                values.extend(m.value for m in messages)
                quiet_since = time.monotonic()
        return values
    finally:
        await consumer.stop()


async def wait_until_stable(bootstrap: str, tp: TopicPartition) -> None:
    """Wait (at most WAIT_S) until no open transaction holds back ``tp``'s last stable offset."""
    committed = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_uncommitted")
    await committed.start()
    await uncommitted.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            stable = (await committed.end_offsets([tp]))[tp]
            high = (await uncommitted.end_offsets([tp]))[tp]
            if stable == high:
                return
            assert time.monotonic() < deadline, f"last stable offset {stable} stays below {high}"
            await asyncio.sleep(0.05)
    finally:
        await committed.stop()
        await uncommitted.stop()


async def test_aiokafka_commit_and_abort(broker: BrokerProcess, unique: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique)
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(5):
                await producer.send(unique, b"committed-%d" % i)
        await producer.begin_transaction()
        for i in range(5):
            await producer.send(unique, b"aborted-%d" % i)
        await producer.flush()
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send(unique, b"after")
    finally:
        await producer.stop()
    committed = await read_all(broker.bootstrap, unique, committed=True, expect=6)
    assert committed == [b"committed-%d" % i for i in range(5)] + [b"after"]
    everything = await read_all(broker.bootstrap, unique, committed=False, expect=11)
    assert len(everything) == 11  # read_uncommitted also sees the aborted records


async def test_aiokafka_consume_transform_produce_commits_offsets_in_the_transaction(
    broker: BrokerProcess, unique: str
) -> None:
    source, sink, group = unique + "-in", unique + "-out", unique + "-g"
    plain = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await plain.start()
    for i in range(20):
        await plain.send(source, b"%d" % i)
    await plain.stop()
    consumer = AIOKafkaConsumer(source, bootstrap_servers=broker.bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level="read_committed")
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique)
    await consumer.start()
    await producer.start()
    try:
        done = 0
        while done < 20:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), WAIT_S)
            if not batches:
                continue
            async with producer.transaction():
                offsets = {}
                for tp, messages in batches.items():
                    for m in messages:
                        await producer.send(sink, m.value * 2)
                    offsets[tp] = messages[-1].offset + 1
                    done += len(messages)
                await producer.send_offsets_to_transaction(offsets, group)
        assert await consumer.committed(TopicPartition(source, 0)) == 20
    finally:
        await producer.stop()
        await consumer.stop()
    assert await read_all(broker.bootstrap, sink, committed=True, expect=20) == [b"%d" % i * 2 for i in range(20)]


async def test_a_new_instance_fences_the_old_one(broker: BrokerProcess, unique: str) -> None:
    old = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique)
    await old.start()
    await old.begin_transaction()
    await old.send_and_wait(unique, b"from the zombie")
    new = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique)
    await new.start()  # InitProducerId: aborts the zombie's transaction, bumps the epoch
    try:
        with pytest.raises((ProducerFenced, KafkaError)):
            await asyncio.wait_for(old.commit_transaction(), WAIT_S)
        async with new.transaction():
            await new.send(unique, b"from the new instance")
    finally:
        await new.stop()
        await old.stop()
    assert await read_all(broker.bootstrap, unique, committed=True, expect=1) == [b"from the new instance"]


def test_confluent_transactions_and_read_committed_default(broker: BrokerProcess, unique: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(unique, b"yes-%d" % i)
    producer.commit_transaction(WAIT_S)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(unique, b"no-%d" % i)
    producer.flush(WAIT_S)
    producer.abort_transaction(WAIT_S)
    producer.begin_transaction()
    producer.produce(unique, b"last")
    producer.commit_transaction(WAIT_S)
    # librdkafka consumers read_committed by default.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.assign([ConfluentTopicPartition(unique, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            assert time.monotonic() < deadline, values
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF
                    break
                raise KafkaException(msg.error())
            values.append(msg.value())
    finally:
        consumer.close()
    assert values == [b"yes-%d" % i for i in range(10)] + [b"last"]


async def test_open_transaction_is_aborted_after_a_crash_and_times_out_otherwise(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory().start(same_port=False)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="crashy",
                                transaction_timeout_ms=60_000)
    await producer.start()
    await producer.begin_transaction()
    await producer.send_and_wait("t", b"never committed")
    broker.kill()  # the transaction is open in the log and in the transaction log
    await producer.stop()
    broker.start()
    plain = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await plain.start()
    await plain.send_and_wait("t", b"plain")
    await plain.stop()
    # The LSO is not stuck behind the dead transaction, and its record stays invisible.
    assert await read_all(broker.bootstrap, "t", committed=True, expect=1) == [b"plain"]

    slow = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="slow",
                            transaction_timeout_ms=1000)
    await slow.start()
    try:
        await slow.begin_transaction()
        await slow.send_and_wait("t", b"too slow")
        # The coordinator aborts it once it times out: its abort marker moves the last stable
        # offset up to the high watermark, which the open transaction held back until then.
        await wait_until_stable(broker.bootstrap, TopicPartition("t", 0))
        with pytest.raises(KafkaError):
            await asyncio.wait_for(slow.commit_transaction(), WAIT_S)
    finally:
        await slow.stop()
    assert await read_all(broker.bootstrap, "t", committed=True, expect=1) == [b"plain"]
    assert broker.stop() == 0
