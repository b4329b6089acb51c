"""DeleteRecords (api key 21) on ``streamkit broker``: Kafka's answers per partition (the low
watermark, or -1 and the error code ``ReplicaManager.deleteRecords`` gives), at v0-v1 over a raw
socket and v2 (flexible) through aiokafka's admin client; then ListOffsets EARLIEST, a fetch
below the start (OFFSET_OUT_OF_RANGE, so ``auto.offset.reset`` applies) and a SIGKILL restart.
``tests/interop/test_kafka_tools_on_broker.py`` runs Kafka's ``kafka-delete-records`` on it."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.protocol.admin import (
    ApiVersionRequest_v0,
    DeleteRecordsRequest_v0,
    DeleteRecordsRequest_v1,
)
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import BrokerProcess, WireClient

pytestmark = pytest.mark.timeout(60)

NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC, POLICY_VIOLATION = 0, 1, 3, 17, 44


def make_topic(bootstrap: str, name: str, partitions: int, records: int, config: dict[str, str] | None = None) -> None:
    """Topic ``name`` with ``records`` records in each partition, keyed so compaction keeps them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for p in range(partitions):
        for i in range(records):
            producer.produce(name, f"v{i}".encode(), key=f"k{i}".encode(), partition=p)
            producer.poll(0)
    assert producer.flush(30) == 0


def answers(response: object) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (low watermark, error code)} of a DeleteRecords response."""
    out = {}
    for name, partitions in response.topics:  # type: ignore[attr-defined]
        for index, low_watermark, error in partitions:
            out[(name, index)] = (low_watermark, error)
    return out


def earliest_and_first_read(bootstrap: str, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(ListOffsets EARLIEST, offset of the first record a consumer reads when it starts at
    ``offset`` with ``auto.offset.reset=earliest``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, offset)])
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                return low, msg.offset()
        raise AssertionError(f"nothing read from {topic}-{partition}")
    finally:
        consumer.close()


@pytest.mark.parametrize("request_type", [DeleteRecordsRequest_v0, DeleteRecordsRequest_v1], ids=["v0", "v1"])
def test_delete_records_answers_each_partition_as_kafka(
    broker: BrokerProcess, unique: str, request_type: type
) -> None:
    b = broker.bootstrap
    make_topic(b, unique, 2, 10)
    make_topic(b, f"{unique}-c", 1, 3, {"cleanup.policy": "compact"})
    request = request_type(
        topics=[
            (unique, [(0, 4), (1, -1), (5, 0)]),
            (f"{unique}-c", [(0, 1)]),
            ("no-such-topic", [(0, 1)]),
            ("__consumer_offsets", [(0, 0)]),
        ],
        timeout_ms=30_000,
    )
    with WireClient(broker.host, broker.port) as wire:
        got = answers(wire.call(request))
        # Above the high watermark, or below -1: out of range, the start stays.
        again = answers(wire.call(request_type(topics=[(unique, [(0, 11), (1, -2)])], timeout_ms=1000)))
        # Never backwards: an offset below the start answers the start.
        back = answers(wire.call(request_type(topics=[(unique, [(0, 2)])], timeout_ms=1000)))
    assert got == {
        (unique, 0): (4, NONE),
        (unique, 1): (10, NONE),
        (unique, 5): (-1, UNKNOWN_TOPIC_OR_PARTITION),
        (f"{unique}-c", 0): (-1, POLICY_VIOLATION),
        ("no-such-topic", 0): (-1, UNKNOWN_TOPIC_OR_PARTITION),
        ("__consumer_offsets", 0): (-1, INVALID_TOPIC),
    }
    assert again == {(unique, 0): (-1, OFFSET_OUT_OF_RANGE), (unique, 1): (-1, OFFSET_OUT_OF_RANGE)}
    assert back == {(unique, 0): (4, NONE)}
    # ListOffsets EARLIEST says 4; a fetch at 2 is out of range and auto.offset.reset restarts at 4.
    assert earliest_and_first_read(b, unique, 0, 2) == (4, 4)
    assert broker.alive()


async def test_delete_records_v2_through_aiokafkas_admin_client(broker: BrokerProcess, unique: str) -> None:
    make_topic(broker.bootstrap, unique, 1, 6)
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        low = await admin.delete_records({AioTopicPartition(unique, 0): RecordsToDelete(before_offset=5)})
    finally:
        await admin.close()
    assert low == {AioTopicPartition(unique, 0): 5}
    with WireClient(broker.host, broker.port) as wire:
        versions = {key: (lo, hi) for key, lo, hi in wire.call(ApiVersionRequest_v0()).api_versions}
    assert versions[21] == (0, 2)  # as Kafka 4.4


def test_the_start_offset_survives_a_sigkill(broker_factory: type[BrokerProcess], unique: str) -> None:
    broker = broker_factory("--default-partitions", "1").start(same_port=False)
    make_topic(broker.bootstrap, unique, 1, 8)
    with WireClient(broker.host, broker.port) as wire:
        assert answers(wire.call(DeleteRecordsRequest_v1(topics=[(unique, [(0, 6)])], timeout_ms=1000))) == {
            (unique, 0): (6, NONE)
        }
    broker.kill()
    broker.start()
    assert earliest_and_first_read(broker.bootstrap, unique, 0, 0) == (6, 6)
