"""AlterConfigs and IncrementalAlterConfigs (``kafka-configs --alter``) through librdkafka's
admin client: the overrides are replaced or changed as Kafka does, and kept across a restart."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.timeout(60)


def admin_for(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def make_topic(admin: AdminClient, name: str, config: dict[str, str]) -> None:
    for future in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        future.result(10)


def overrides(admin: AdminClient, name: str) -> dict[str, str]:
    resource = ConfigResource("topic", name)
    entries = admin.describe_configs([resource])[resource].result(10)
    return {k: e.value for k, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def incremental(admin: AdminClient, name: str, *ops: ConfigEntry, validate_only: bool = False) -> None:
    resource = ConfigResource("topic", name, incremental_configs=list(ops))
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(10)


def op(name: str, value: str | None, kind: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=kind)


def test_incremental_alter_sets_deletes_appends_and_subtracts(broker: BrokerProcess, unique: str) -> None:
    admin = admin_for(broker)
    make_topic(admin, unique, {"retention.ms": "60000", "message.timestamp.type": "CreateTime"})
    incremental(
        admin, unique,
        op("retention.ms", "120000", AlterConfigOpType.SET),
        op("message.timestamp.type", None, AlterConfigOpType.DELETE),
        op("cleanup.policy", "compact", AlterConfigOpType.APPEND),
        op("min.insync.replicas", "2", AlterConfigOpType.SET),
    )
    assert overrides(admin, unique) == {
        "retention.ms": "120000", "cleanup.policy": "compact,delete", "min.insync.replicas": "2",
    }
    incremental(admin, unique, op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert overrides(admin, unique)["cleanup.policy"] == "compact"
    incremental(admin, unique, op("retention.ms", "1", AlterConfigOpType.SET), validate_only=True)
    assert overrides(admin, unique)["retention.ms"] == "120000"


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([op("retention.ms", "soon", AlterConfigOpType.SET)],
         "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        ([op("no.such.config", "1", AlterConfigOpType.SET)], "Unknown topic config name: no.such.config"),
        ([op("retention.ms", "5", AlterConfigOpType.APPEND)],
         "Config value append is not allowed for config key: retention.ms"),
    ],
)
def test_bad_incremental_changes_are_refused_and_change_nothing(
    broker: BrokerProcess, unique: str, ops: list[ConfigEntry], message: str
) -> None:
    admin = admin_for(broker)
    make_topic(admin, unique, {"retention.ms": "60000"})
    with pytest.raises(KafkaException, match=message):
        incremental(admin, unique, *ops)
    assert overrides(admin, unique) == {"retention.ms": "60000"}


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_every_override(broker: BrokerProcess, unique: str) -> None:
    admin = admin_for(broker)
    make_topic(admin, unique, {"retention.ms": "60000", "segment.bytes": "1048576"})
    resource = ConfigResource("topic", unique, set_config={"min.insync.replicas": "1", "retention.ms": "-1"})
    admin.alter_configs([resource])[resource].result(10)
    assert overrides(admin, unique) == {"min.insync.replicas": "1", "retention.ms": "-1"}


def test_unknown_topics_and_broker_settings_are_refused(broker: BrokerProcess, unique: str) -> None:
    admin = admin_for(broker)
    missing = ConfigResource("topic", unique, incremental_configs=[op("retention.ms", "1", AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="unknown topic"):
        admin.incremental_alter_configs([missing])[missing].result(10)
    node = ConfigResource("broker", "0", incremental_configs=[op("log.retention.ms", "1", AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="command-line options"):
        admin.incremental_alter_configs([node])[node].result(10)


def test_altered_configs_survive_a_restart(broker_factory: type[BrokerProcess], unique: str) -> None:
    broker = broker_factory().start()
    admin = admin_for(broker)
    make_topic(admin, unique, {})
    incremental(admin, unique, op("retention.ms", "5000", AlterConfigOpType.SET),
                op("unclean.leader.election.enable", "true", AlterConfigOpType.SET))
    del admin
    assert broker.stop() == 0
    broker.start()
    assert overrides(admin_for(broker), unique) == {"retention.ms": "5000", "unclean.leader.election.enable": "true"}
