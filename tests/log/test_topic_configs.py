"""Topic configs: every name Kafka 4.4 knows is accepted and kept; bad ones get Kafka's message."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamkit.log.config import TopicConfig
from streamkit.log.errors import InvalidTopicError
from streamkit.log.manager import LogManager
from streamkit.log.topic_configs import SPECS, check

# What Kafka Streams 4.4 sets on its internal topics (a changelog and a repartition topic).
KAFKA_STREAMS_CHANGELOG = {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"}
KAFKA_STREAMS_REPARTITION = {
    "cleanup.policy": "delete",
    "segment.bytes": "52428800",
    "retention.ms": "-1",
    "message.timestamp.type": "CreateTime",
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_kafka_default_is_accepted_and_shown(name: str) -> None:
    config = TopicConfig.from_kafka({name: SPECS[name].default})
    assert set(config.to_kafka()) == set(SPECS)
    assert config.to_kafka()[name] == SPECS[name].default


def test_stored_configs_are_kept_and_honoured_ones_change_behaviour() -> None:
    config = TopicConfig.from_kafka({**KAFKA_STREAMS_REPARTITION, "min.insync.replicas": "2", "preallocate": "TRUE"})
    assert config.segment_bytes == 52428800 and config.retention_ms == -1 and config.delete
    shown = config.to_kafka()
    assert shown["min.insync.replicas"] == "2"
    assert shown["preallocate"] == "true"  # normalized as Kafka stores it
    assert shown["compression.type"] == "producer"  # Kafka's default, not set
    assert config.overrides == {*KAFKA_STREAMS_REPARTITION, "min.insync.replicas", "preallocate"}
    later = TopicConfig.from_kafka({"min.insync.replicas": "3"}, base=config)
    assert later.to_kafka()["min.insync.replicas"] == "3" and later.to_kafka()["preallocate"] == "true"


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"retention.ms": "soon"}, "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        ({"segment.index.bytes": "9999999999"}, "Invalid value 9999999999 for configuration segment.index.bytes: Not a number of type INT"),
        ({"min.insync.replicas": "0"}, "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
        ({"preallocate": "yes"}, "Invalid value yes for configuration preallocate: Expected value to be either true or false"),
        ({"message.timestamp.type": "Now"}, "String must be one of: CreateTime, LogAppendTime"),
        ({"compression.type": "brotli"}, "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ({"compression.gzip.level": "0"}, "Value must be between 1 and 9 or equal to -1"),
        ({"compression.zstd.level": "23"}, "Value must be no more than 22"),
        ({"cleanup.policy": "compact,forever"}, "for configuration cleanup.policy: String must be one of: compact, delete"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"),
        ({"leader.replication.throttled.replicas": "0-1"}, "must be the literal '*' or a list of replicas"),
        ({"segment.bytes": "13"}, "Invalid value 13 for configuration segment.bytes: Value must be at least 14"),
    ],
)
def test_bad_configs_are_refused_with_kafkas_message(configs: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidTopicError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        TopicConfig.from_kafka(configs)


def test_check_normalizes_as_kafka_stores() -> None:
    assert check("leader.replication.throttled.replicas", " 0:0 , 1:0 ") == "0:0,1:0"
    assert check("leader.replication.throttled.replicas", "*") == "*"
    assert check("remote.storage.enable", "False") == "false"
    assert check("compression.gzip.level", "-1") == "-1"


def test_stored_configs_survive_a_restart(tmp_path: Path) -> None:
    with LogManager(tmp_path, background=False) as log:
        log.create_topic("app-store-changelog", 1, KAFKA_STREAMS_CHANGELOG)
        log.alter_topic_config("app-store-changelog", {"min.insync.replicas": "2"})
    with LogManager(tmp_path, background=False) as log:
        config = log.describe_topic("app-store-changelog").config
    assert config.compact and not config.delete
    assert config.to_kafka()["message.timestamp.type"] == "CreateTime"
    assert config.to_kafka()["min.insync.replicas"] == "2"
    assert config.overrides == {"cleanup.policy", "message.timestamp.type", "min.insync.replicas"}
