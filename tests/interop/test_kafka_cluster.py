"""The Apache Kafka fixtures: nodes that start, answer Kafka's own tools, survive a node's
crash, and end with the test (``tests/support/kafka.py``)."""

from __future__ import annotations

import subprocess
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.interop import classpath
from tests.support.kafka import KafkaCluster


def _tool(cluster: KafkaCluster, cls: str, *args: str) -> str:
    done = subprocess.run(
        ["java", "-Xmx256m", "-cp", classpath("kafka"), cls, "--bootstrap-server", cluster.bootstrap, *args],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_cluster_of_three_keeps_a_replicated_topic_through_a_node_crash(kafka_cluster: KafkaCluster, unique: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap})
    admin.create_topics([NewTopic(unique, 2, 3)])[unique].result(30)
    described = _tool(kafka_cluster, "org.apache.kafka.tools.TopicCommand", "--describe", "--topic", unique)
    assert described.count("Replicas:") == 2 and "ReplicationFactor: 3" in described

    producer = Producer({"bootstrap.servers": kafka_cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(100):
        producer.produce(unique, key=str(i % 5).encode(), value=str(i).encode())
    assert producer.flush(30) == 0
    kafka_cluster.kill(1)  # a crash: the partitions it led move to the other two
    for i in range(100, 200):
        producer.produce(unique, key=str(i % 5).encode(), value=str(i).encode())
    assert producer.flush(60) == 0
    kafka_cluster.restart(1)

    consumer = Consumer({"bootstrap.servers": kafka_cluster.bootstrap, "group.id": unique, "auto.offset.reset": "earliest"})
    consumer.subscribe([unique])
    seen: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < 200 and time.monotonic() < deadline:
            for m in consumer.consume(500, 1.0):
                assert m.error() is None, m.error()
                seen.append(int(m.value()))
    finally:
        consumer.close()
    assert sorted(seen) == list(range(200))
