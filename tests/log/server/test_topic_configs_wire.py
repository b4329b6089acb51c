"""Topic configs over the wire: what Kafka Streams sets on its internal topics is accepted,
kept and described with its source; unknown names and bad values get INVALID_CONFIG."""

from __future__ import annotations

import pytest
from aiokafka.protocol.admin import CreateTopicsRequest_v2, DescribeConfigsRequest_v1

from tests.support.broker import BrokerProcess, WireClient

pytestmark = pytest.mark.timeout(60)

INVALID_CONFIG = 40
DYNAMIC_TOPIC_CONFIG = 1
DEFAULT_CONFIG = 5


@pytest.fixture
def wire(broker: BrokerProcess) -> WireClient:
    client = WireClient(broker.host, broker.port)
    yield client  # type: ignore[misc]
    client.close()


def create(wire: WireClient, name: str, configs: dict[str, str]) -> tuple[int, str | None]:
    response = wire.call(
        CreateTopicsRequest_v2(
            create_topic_requests=[(name, 1, 1, [], list(configs.items()))], timeout=10_000, validate_only=False
        )
    )
    _name, code, message = response.topic_errors[0]
    return int(code), message


def describe(wire: WireClient, name: str) -> dict[str, tuple[str, int]]:
    response = wire.call(DescribeConfigsRequest_v1(resources=[(2, name, None)], include_synonyms=False))
    resource = response.resources[0]
    assert resource[0] == 0, resource
    return {e[0]: (e[1], e[3]) for e in resource[4]}  # name: (value, config_source)


def test_kafka_streams_internal_topic_configs_are_accepted_and_described(wire: WireClient, unique: str) -> None:
    configs = {
        "cleanup.policy": "delete",
        "segment.bytes": "52428800",
        "retention.ms": "-1",
        "message.timestamp.type": "CreateTime",
        "min.insync.replicas": "1",
    }
    assert create(wire, unique, configs) == (0, None)
    entries = describe(wire, unique)
    for name, value in configs.items():
        assert entries[name] == (value, DYNAMIC_TOPIC_CONFIG)
    assert entries["compression.type"] == ("producer", DEFAULT_CONFIG)
    assert entries["unclean.leader.election.enable"] == ("false", DEFAULT_CONFIG)
    assert len(entries) == 37  # every topic config of Kafka 4.4


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
        ({"message.timestamp.type": "Wallclock"},
         "Invalid value Wallclock for configuration message.timestamp.type: String must be one of: CreateTime, LogAppendTime"),
        ({"max.compaction.lag.ms": "0"}, "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1"),
    ],
)
def test_unknown_names_and_bad_values_get_invalid_config(
    wire: WireClient, unique: str, configs: dict[str, str], message: str
) -> None:
    assert create(wire, unique, configs) == (INVALID_CONFIG, message)
