"""Kafka's broker defaults of topic configs (``log.retention.ms``...), from ``server.properties``
or ``--override``, and retention as Kafka's: a partition whose newest record is past
``retention.ms`` is emptied whole, active segment too, at the next retention check."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from streamkit._core.errors import ConfigError
from streamkit.log.server.server_properties import read_server_properties
from tests.support.broker import BrokerProcess, assert_stops_cleanly

OLD = 1_577_836_800_000  # 2020-01-01


def test_broker_defaults_of_topic_configs_are_read_as_kafka_names_them(tmp_path: Path) -> None:
    props = read_server_properties(
        "log.retention.hours=2\nlog.roll.hours=1\nlog.segment.bytes=1048576\n"
        "log.cleanup.policy=compact,delete\nlog.retention.check.interval.ms=5000\n", "s.properties", tmp_path,
    )
    assert dict(props.settings["topic_defaults"]) == {
        "retention.ms": "7200000", "segment.ms": "3600000", "segment.bytes": "1048576", "cleanup.policy": "compact,delete",
    }
    assert props.settings["retention_check_interval_ms"] == 5000 and props.unknown == []
    finer = read_server_properties("log.retention.hours=2\nlog.retention.minutes=3\n", "s", tmp_path, {"log.retention.ms": "-1"})
    assert dict(finer.settings["topic_defaults"]) == {"retention.ms": "-1"}  # ms over minutes over hours
    with pytest.raises(ConfigError, match=r"s\.properties"):
        read_server_properties("log.cleanup.policy=sometimes\n", "s.properties", tmp_path)


def test_an_expired_partition_is_emptied_whole_and_the_defaults_are_the_topics(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data", "--override", "log.retention.ms=60000", "--override", "log.retention.check.interval.ms=200",
    ).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("expiring", 1), NewTopic("kept", 1, config={"retention.ms": "-1"})]).values():
            future.result(10)
        described = admin.describe_configs([ConfigResource("topic", "expiring")])
        config = next(iter(described.values())).result(10)
        assert config["retention.ms"].value == "60000"  # the broker's default, not Kafka's 7 days
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for topic in ("expiring", "kept"):
            for i in range(5):
                producer.produce(topic, value=b"v", timestamp=OLD + i)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watch"})
        try:
            deadline = time.monotonic() + 20
            while True:
                low, high = consumer.get_watermark_offsets(TopicPartition("expiring", 0), timeout=5)
                if (low, high) == (5, 5):
                    break  # everything went, the active segment too, as on Kafka
                assert time.monotonic() < deadline, f"expiring is at {low}..{high}"
                time.sleep(0.2)
            assert consumer.get_watermark_offsets(TopicPartition("kept", 0), timeout=5) == (0, 5)
        finally:
            consumer.close()
        producer.produce("expiring", value=b"after", timestamp=int(time.time() * 1000))
        assert producer.flush(10) == 0  # appends go on at the log end
    finally:
        assert_stops_cleanly(broker)
