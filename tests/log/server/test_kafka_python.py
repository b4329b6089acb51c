"""kafka-python 3 against a real broker, and committed offsets shared between client libraries."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.structs import OffsetAndMetadata as AioOffsetAndMetadata
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata as KpOffsetAndMetadata

from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30


def kp_produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        # kafka-python 3 turns idempotence (and acks=all) on by default.
        assert producer.config["enable_idempotence"] is True
        futures = [producer.send(topic, value=v, key=v[:2]) for v in values]
        producer.flush(WAIT_S)
        for future in futures:
            future.get(WAIT_S)
    finally:
        producer.close(WAIT_S)


def test_kafka_python_idempotent_producer_and_group(broker: BrokerProcess, unique: str) -> None:
    values = [f"kp-{i}".encode() for i in range(1000)]
    kp_produce(broker, unique, values)
    consumers = [
        KafkaConsumer(
            unique, bootstrap_servers=broker.bootstrap, group_id=unique, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
        )
        for _ in range(2)
    ]
    seen: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(seen) < len(values):
            assert time.monotonic() < deadline, f"only {len(seen)} of {len(values)}"
            for consumer in consumers:
                for messages in consumer.poll(timeout_ms=100).values():
                    seen.extend(m.value for m in messages)
                    consumer.commit()
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(seen) == sorted(values)


def test_kafka_python_seek_and_end_offsets(broker: BrokerProcess, unique: str) -> None:
    kp_produce(broker, unique, [b"a", b"b", b"c", b"d"])
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000)
    try:
        tp = KpTopicPartition(unique, 0)
        consumer.assign([tp])
        assert consumer.end_offsets([tp])[tp] == 4
        consumer.seek(tp, 2)
        assert [m.value for m in consumer] == [b"c", b"d"]
    finally:
        consumer.close()


def test_offsets_committed_by_one_client_are_read_by_the_others(broker: BrokerProcess, unique: str) -> None:
    kp_produce(broker, unique, [b"%d" % i for i in range(30)])
    group = unique

    # aiokafka commits offset 11 with metadata ...
    async def aiokafka_commit() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition(unique, 0)
            consumer.assign([tp])
            await consumer.commit({tp: AioOffsetAndMetadata(11, "from-aiokafka")})
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(aiokafka_commit(), WAIT_S))

    # ... kafka-python reads it back, then commits 17 ...
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        tp = KpTopicPartition(unique, 0)
        assert consumer.committed(tp) == 11
        consumer.assign([tp])
        consumer.commit({tp: KpOffsetAndMetadata(17, "from-kafka-python", -1)})
        again = consumer.committed(tp, metadata=True)
        assert (again.offset, again.metadata) == (17, "from-kafka-python")
    finally:
        consumer.close()

    # ... and confluent-kafka (librdkafka) sees 17 with its metadata, and starts there.
    confluent = ConfluentConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                   "enable.auto.commit": False})
    try:
        committed = confluent.committed([ConfluentTopicPartition(unique, 0)], timeout=WAIT_S)[0]
        assert committed.offset == 17
        # confluent-kafka hands committed metadata to Python as a C string that librdkafka
        # does not terminate (librdkafka#4649): bytes past it are whatever memory holds, so
        # only its start can be compared (kafka-python's read-back below checks it whole).
        try:
            assert committed.metadata.startswith("from-kafka-python")
        except UnicodeDecodeError:
            pass
        confluent.subscribe([unique])
        deadline = time.monotonic() + WAIT_S
        while True:
            assert time.monotonic() < deadline
            msg = confluent.poll(0.5)
            if msg is not None and msg.error() is None:
                break
        assert msg.value() == b"17"
    finally:
        confluent.close()


def test_kafka_python_admin_and_inferred_broker_version(broker: BrokerProcess, unique: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        # The advertised table makes kafka-python infer Kafka 2.4: record format v2,
        # idempotence, and fetch sessions it then keeps full (we answer session id 0).
        assert admin._client.check_version() == (2, 4)
        admin.create_topics([NewTopic(unique, num_partitions=2, replication_factor=1,
                                      topic_configs={"retention.ms": "60000"})])
        assert unique in admin.list_topics()
        assert admin.describe_cluster()["controller_id"] == 0
        kp_produce(broker, unique, [b"x"])
        consumer = KafkaConsumer(unique, bootstrap_servers=broker.bootstrap, group_id=unique,
                                 auto_offset_reset="earliest", consumer_timeout_ms=2000)
        assert [m.value for m in consumer] == [b"x"]
        consumer.commit()
        consumer.close()
        groups = {g["group_id"] for g in admin.list_groups()}
        assert unique in groups
        admin.delete_topics([unique])
        assert unique not in admin.list_topics()
    finally:
        admin.close()


def test_kafka_python_admin_deletes_an_empty_group_and_its_offsets(broker: BrokerProcess, unique: str) -> None:
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.structs import OffsetAndMetadata

    kp_produce(broker, unique, [b"x", b"y"])
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=unique)
    consumer.commit({TopicPartition(unique, 0): OffsetAndMetadata(2, "", -1)})
    consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert unique in {g["group_id"] for g in admin.list_groups()}
        results = admin.delete_groups([unique, f"{unique}-unknown"])
        assert results == {unique: "OK", f"{unique}-unknown": "GroupIdNotFoundError"}
        assert unique not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
    after = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=unique)
    try:
        assert after.committed(TopicPartition(unique, 0)) is None
    finally:
        after.close()


def test_kafka_python_admin_adds_partitions(broker: BrokerProcess, unique: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(unique, num_partitions=1, replication_factor=1)])
        admin.create_partitions({unique: NewPartitions(total_count=3)})
        described = admin.describe_topics([unique])[0]
        assert len(described["partitions"]) == 3
    finally:
        admin.close()
