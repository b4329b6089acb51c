"""librdkafka against a real broker: confluent-kafka (2.x) and kcat (Debian's, on an older
librdkafka), including compression, idempotence and consumer groups."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from streamkit.log.manager import LogManager
from streamkit.log.records import iter_batches
from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30
KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat not installed (scripts/install-system-deps.sh)")


def produce_all(bootstrap: str, topic: str, values: list[bytes], **config: object) -> None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, **config})

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for value in values:
        producer.produce(topic, value=value, key=value[-1:], on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0, "messages left unacknowledged"
    assert errors == []


def consume_all(bootstrap: str, topic: str, count: int, group: str, **config: object) -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, **config,
    })
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(values) < count:
            assert time.monotonic() < deadline, f"only {len(values)} of {count} arrived"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            values.append(msg.value())
            if len(values) == count:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def stored_codecs(broker: BrokerProcess, topic: str) -> set[int]:
    """The compression codec of every batch on disk, read with the broker stopped."""
    with LogManager(broker.data_dir, background=False) as log:
        codecs = set()
        for partition in log.partitions(topic):
            data = partition.read(partition.log_start_offset, 64 * 1024 * 1024)
            codecs |= {header.compression for _pos, header in iter_batches(data)}
        return codecs


@pytest.mark.parametrize("codec,number", [("gzip", 1), ("lz4", 3), ("zstd", 4)])
def test_confluent_idempotent_compressed_producer_and_group(
    broker_factory: type[BrokerProcess], codec: str, number: int
) -> None:
    broker = broker_factory().start(same_port=False)
    values = [f"{codec}-{i:05d}-".encode() * 3 for i in range(2000)]
    produce_all(broker.bootstrap, "compressed", values, **{
        "acks": "all", "enable.idempotence": True, "compression.type": codec, "linger.ms": 5,
    })
    got = consume_all(broker.bootstrap, "compressed", len(values), "g-" + codec)
    assert got == values
    assert broker.stop() == 0
    assert stored_codecs(broker, "compressed") == {number}  # stored as the producer sent it


def test_confluent_group_of_two_shares_partitions(broker: BrokerProcess, unique: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(unique, num_partitions=4, replication_factor=1)])
    futures[unique].result(WAIT_S)
    values = [f"v{i}".encode() for i in range(400)]
    produce_all(broker.bootstrap, unique, values, **{"acks": "all", "linger.ms": 2})
    members = [
        Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique, "auto.offset.reset": "earliest",
                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        for _ in range(2)
    ]
    for member in members:
        member.subscribe([unique])
    seen: set[bytes] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(seen) < len(values):
            assert time.monotonic() < deadline, f"only {len(seen)} of {len(values)}"
            for member in members:
                msg = member.poll(0.1)
                if msg is not None and msg.error() is None:
                    seen.add(msg.value())
        assignments = [{tp.partition for tp in m.assignment()} for m in members]
    finally:
        for member in members:
            member.close()
    assert seen == set(values)
    assert assignments[0] | assignments[1] == {0, 1, 2, 3}
    assert not assignments[0] & assignments[1]


def test_confluent_commits_and_committed(broker: BrokerProcess, unique: str) -> None:
    produce_all(broker.bootstrap, unique, [b"a", b"b", b"c"])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique})
    try:
        tp = TopicPartition(unique, 0, 2, metadata="checkpoint-7")
        consumer.commit(offsets=[tp], asynchronous=False)
        committed = consumer.committed([TopicPartition(unique, 0)], timeout=WAIT_S)[0]
        assert (committed.offset, committed.metadata) == (2, "checkpoint-7")
    finally:
        consumer.close()


def kcat(broker: BrokerProcess, *args: str, stdin: bytes | None = None) -> bytes:
    assert KCAT is not None
    result = subprocess.run(
        [KCAT, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, timeout=WAIT_S, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout


@needs_kcat
def test_kcat_metadata(broker: BrokerProcess, unique: str) -> None:
    produce_all(broker.bootstrap, unique, [b"x"])
    listing = kcat(broker, "-L").decode()
    assert f'topic "{unique}" with 1 partitions' in listing
    assert f"broker 0 at {broker.bootstrap} (controller)" in listing


@needs_kcat
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_kcat_produce_and_consume(broker_factory: type[BrokerProcess], compression: str) -> None:
    broker = broker_factory().start(same_port=False)
    lines = [f"line {i} " * 5 for i in range(300)]
    kcat(broker, "-P", "-t", "kc", "-z", compression, stdin="\n".join(lines).encode() + b"\n")
    out = kcat(broker, "-C", "-t", "kc", "-o", "beginning", "-e", "-q")
    assert out.decode().splitlines() == lines
    assert broker.stop() == 0
    # Old librdkafka compresses only when Produce v0 is advertised (KAFKA-18659).
    assert stored_codecs(broker, "kc") == {0 if compression == "none" else 1}


@needs_kcat
def test_kcat_consumer_group(broker: BrokerProcess, unique: str) -> None:
    values = [f"g{i}".encode() for i in range(50)]
    produce_all(broker.bootstrap, unique, values)
    out = kcat(broker, "-G", unique, "-o", "beginning", "-e", "-q", unique)
    assert sorted(out.split()) == sorted(values)
    # kcat committed its position; a confluent consumer of the same group resumes after it.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique})
    try:
        committed = consumer.committed([TopicPartition(unique, 0)], timeout=WAIT_S)[0]
    finally:
        consumer.close()
    assert committed.offset == 50


def test_confluent_admin_deletes_groups(broker: BrokerProcess, unique: str) -> None:
    """DeleteGroups as Kafka: a group with members is refused, an unknown one is not found,
    an empty one goes with its committed offsets."""
    from confluent_kafka.admin import AdminClient

    produce_all(broker.bootstrap, unique, [b"a", b"b"])
    idle, busy = f"{unique}-idle", f"{unique}-busy"
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": idle})
    committer.commit(offsets=[TopicPartition(unique, 0, 2)], asynchronous=False)
    committer.close()
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": busy, "auto.offset.reset": "earliest"})
    member.subscribe([unique])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        deadline = time.monotonic() + WAIT_S
        while not member.assignment():  # joined: the group has a member
            assert time.monotonic() < deadline
            member.poll(0.2)
        futures = admin.delete_consumer_groups([idle, busy, f"{unique}-never"], request_timeout=WAIT_S)
        futures[idle].result(WAIT_S)
        for group, code in ((busy, KafkaError.NON_EMPTY_GROUP), (f"{unique}-never", KafkaError.GROUP_ID_NOT_FOUND)):
            with pytest.raises(Exception) as refused:
                futures[group].result(WAIT_S)
            assert refused.value.args[0].code() == code, refused.value
    finally:
        member.close()
    again = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": idle})
    try:
        committed = again.committed([TopicPartition(unique, 0)], timeout=WAIT_S)[0]
        assert committed.offset < 0  # no commit any more (OFFSET_INVALID)
    finally:
        again.close()


def test_confluent_admin_adds_partitions(broker: BrokerProcess, unique: str) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(unique, num_partitions=2, replication_factor=1)])[unique].result(WAIT_S)
    admin.create_partitions([NewPartitions(unique, 4)], validate_only=True)[unique].result(WAIT_S)
    assert len(admin.list_topics(unique, timeout=WAIT_S).topics[unique].partitions) == 2  # only validated
    admin.create_partitions([NewPartitions(unique, 4)])[unique].result(WAIT_S)
    assert len(admin.list_topics(unique, timeout=WAIT_S).topics[unique].partitions) == 4
    for total, code in ((3, KafkaError.INVALID_PARTITIONS), (4, KafkaError.INVALID_PARTITIONS)):
        with pytest.raises(Exception) as refused:
            admin.create_partitions([NewPartitions(unique, total)])[unique].result(WAIT_S)
        assert refused.value.args[0].code() == code, refused.value
    with pytest.raises(Exception) as unknown:
        admin.create_partitions([NewPartitions(f"{unique}-nope", 3)])[f"{unique}-nope"].result(WAIT_S)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, unknown.value
    # The new partitions take records like the first ones.
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(unique, value=b"in-3", partition=3)
    assert producer.flush(WAIT_S) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique})
    consumer.assign([TopicPartition(unique, 3, 0)])
    try:
        deadline = time.monotonic() + WAIT_S
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is None and msg.value() == b"in-3"
    finally:
        consumer.close()
