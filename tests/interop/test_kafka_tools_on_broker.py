"""Apache Kafka 4.4's own command-line tools against ``streamkit broker`` (issue 26).

One test per tool, each running the tool's Java main class as its ``kafka-*.sh`` script does
(``tests/support/interop.kafka_tool``) against the module's broker. The tools this issue made
work (``kafka-configs --alter``, ``kafka-transactions``, ``kafka-log-dirs``) and
``kafka-metadata-quorum`` run against Apache Kafka too (the session's ``kafka``), from the same
test body, so the answers' shapes are compared; a gap is asserted as the error the tool prints,
so a test fails the day the gap closes. ``docs/kafka.md`` has the table these tests stand behind.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import BrokerProcess
from tests.support.interop import kafka_tool
from tests.support.kafka import KafkaCluster

pytestmark = pytest.mark.timeout(300)

GROUPS = "consumer.group.ConsumerGroupCommand"


@dataclass(frozen=True)
class Target:
    """A broker the tools run against: ``streamkit`` (the module's broker) or ``kafka``."""

    name: str
    bootstrap: str
    log_dir: Path | None  # streamkit broker's data directory (Kafka's is the fixture's business)


@pytest.fixture(params=["streamkit", "kafka"])
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "kafka":
        kafka: KafkaCluster = request.getfixturevalue("kafka")
        return Target("kafka", kafka.bootstrap, None)
    broker: BrokerProcess = request.getfixturevalue("broker")
    return Target("streamkit", broker.bootstrap, broker.data_dir)


def run(bootstrap: str, main: str, *args: str, stdin: str | None = None) -> str:
    """``main --bootstrap-server bootstrap args``, which must succeed: its stdout."""
    done = kafka_tool(main, "--bootstrap-server", bootstrap, *args, stdin=stdin)
    assert done.returncode == 0, f"{main} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, key, value in records:
        producer.produce(topic, value, key, partition=partition)
    assert producer.flush(30) == 0


def rows(table: str) -> list[list[str]]:
    """The rows of a tool's whitespace-aligned table, header first."""
    return [line.split() for line in table.splitlines() if line.strip()]


# -- the tools that worked before this tools deliverable -----------------------------


def test_kafka_topics_creates_describes_alters_and_deletes(broker: BrokerProcess, unique: str) -> None:
    b = broker.bootstrap
    assert f"Created topic {unique}." in run(
        b, "TopicCommand", "--create", "--topic", unique, "--partitions", "2", "--config", "retention.ms=86400000"
    )
    described = run(b, "TopicCommand", "--describe", "--topic", unique)
    assert "PartitionCount: 2" in described and "retention.ms=86400000" in described
    run(b, "TopicCommand", "--alter", "--topic", unique, "--partitions", "3")
    described = run(b, "TopicCommand", "--describe", "--topic", unique)
    assert "PartitionCount: 3" in described and described.count("Leader: 0") == 3
    run(b, "TopicCommand", "--delete", "--topic", unique)
    assert unique not in run(b, "TopicCommand", "--list").split()


def test_console_producer_and_consumer_carry_keys_and_commit_for_a_group(broker: BrokerProcess, unique: str) -> None:
    b = broker.bootstrap
    make_topic(b, unique, 2)
    lines = [f"k{i}:v{i}" for i in range(6)]
    run(b, "ConsoleProducer", "--topic", unique, "--reader-property", "parse.key=true",
        "--reader-property", "key.separator=:", stdin="\n".join(lines) + "\n")
    consumed = run(b, "consumer.ConsoleConsumer", "--topic", unique, "--group", unique, "--from-beginning",
                   "--max-messages", "6", "--timeout-ms", "30000", "--formatter-property", "print.key=true")
    assert sorted(tuple(row) for row in rows(consumed)) == [(f"k{i}", f"v{i}") for i in range(6)]
    described = rows(run(b, GROUPS, "--describe", "--group", unique))
    lags = {row[2]: row[5] for row in described if row[0] == unique}  # partition -> LAG
    assert lags == {"0": "0", "1": "0"}


def test_kafka_consumer_groups_describes_resets_and_deletes(broker: BrokerProcess, unique: str) -> None:
    b = broker.bootstrap
    make_topic(b, unique, 1)
    produce(b, unique, [(0, b"k", str(i).encode()) for i in range(6)])
    consumer = Consumer({"bootstrap.servers": b, "group.id": unique, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(unique, 0, 6)], asynchronous=False)
    consumer.close()

    def offset_now() -> tuple[str, str]:
        row = next(r for r in rows(run(b, GROUPS, "--describe", "--group", unique)) if r[0] == unique)
        return row[3], row[5]  # CURRENT-OFFSET, LAG

    assert offset_now() == ("6", "0")
    reset = ["--reset-offsets", "--group", unique, "--topic", unique, "--execute"]
    assert rows(run(b, GROUPS, *reset, "--to-earliest"))[-1][-1] == "0"
    assert rows(run(b, GROUPS, *reset, "--shift-by", "4"))[-1][-1] == "4"
    assert offset_now() == ("4", "2")
    # Every record is newer than 2020: the first offset at or after that time is the first.
    assert rows(run(b, GROUPS, *reset, "--to-datetime", "2020-01-01T00:00:00.000"))[-1][-1] == "0"
    assert "was successful" in run(b, GROUPS, "--delete", "--group", unique)
    assert unique not in run(b, GROUPS, "--list").split()


def test_kafka_get_offsets_shows_each_partitions_end(broker: BrokerProcess, unique: str) -> None:
    b = broker.bootstrap
    make_topic(b, unique, 2)
    produce(b, unique, [(0, b"k", b"v"), (1, b"k", b"v"), (1, b"k", b"v")])
    assert sorted(run(b, "GetOffsetShell", "--topic", unique).split()) == [f"{unique}:0:1", f"{unique}:1:2"]
    earliest = run(b, "GetOffsetShell", "--topic", unique, "--time", "-2").split()
    assert sorted(earliest) == [f"{unique}:0:0", f"{unique}:1:0"]


def test_kafka_dump_log_reads_streamkit_broker_segment_files(broker: BrokerProcess, unique: str) -> None:
    """streamkit's segments are Kafka's files: Kafka's own reader decodes them."""
    make_topic(broker.bootstrap, unique, 1)
    produce(broker.bootstrap, unique, [(0, f"key{i}".encode(), f"value{i}".encode()) for i in range(3)])
    segment = broker.data_dir / f"{unique}-0" / "00000000000000000000.log"
    done = kafka_tool("DumpLogSegments", "--files", str(segment), "--print-data-log")
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.findall(r"key: (key\d) payload: (value\d)", done.stdout) == [(f"key{i}", f"value{i}") for i in range(3)]
    assert "baseOffset: 0 lastOffset: 2" in done.stdout


def test_kafka_perf_tools_produce_and_consume_every_record(broker: BrokerProcess, unique: str) -> None:
    b = broker.bootstrap
    make_topic(b, unique, 2)
    produced = kafka_tool("ProducerPerformance", "--topic", unique, "--num-records", "5000", "--record-size", "100",
                          "--throughput", "-1", "--command-property", f"bootstrap.servers={b}", "acks=all")
    assert produced.returncode == 0, produced.stderr[-3000:]
    assert "5000 records sent" in produced.stdout
    consumed = run(b, "ConsumerPerformance", "--topic", unique, "--messages", "5000", "--timeout", "30000")
    header, values = (line.split(", ") for line in consumed.strip().splitlines()[-2:])
    assert int(dict(zip(header, values, strict=True))["data.consumed.in.nMsg"]) == 5000


# -- the tools this issue made work, on both brokers -----------------------------------------


def test_kafka_delete_records_moves_the_low_watermark_and_consumers_start_there(
    target: Target, unique: str, tmp_path: Path
) -> None:
    """``kafka-delete-records`` answers a low watermark per partition (-1 is the high
    watermark), an offset past the high watermark is refused by name, and then ListOffsets
    EARLIEST and a consumer reading from the beginning start at the new log start offset."""
    b = target.bootstrap
    make_topic(b, unique, 2)
    produce(b, unique, [(p, b"k", f"p{p}-v{i}".encode()) for p in (0, 1) for i in range(4)])
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": unique, "partition": 0, "offset": 3},
        {"topic": unique, "partition": 1, "offset": -1},
    ]}))
    out = run(b, "DeleteRecordsCommand", "--offset-json-file", str(plan))
    assert f"partition: {unique}-0\tlow_watermark: 3" in out
    assert f"partition: {unique}-1\tlow_watermark: 4" in out
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": unique, "partition": 0, "offset": 9}]}))
    refused = run(b, "DeleteRecordsCommand", "--offset-json-file", str(plan))
    assert f"partition: {unique}-0\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: " in refused
    earliest = run(b, "GetOffsetShell", "--topic", unique, "--time", "-2").split()
    assert sorted(earliest) == [f"{unique}:0:3", f"{unique}:1:4"]
    produce(b, unique, [(1, b"k", b"p1-v4")])
    consumed = run(b, "consumer.ConsoleConsumer", "--topic", unique, "--group", unique, "--from-beginning",
                   "--max-messages", "2", "--timeout-ms", "30000")
    assert sorted(consumed.split()) == ["p0-v3", "p1-v4"]


def test_kafka_configs_alter_adds_and_deletes_a_topic_config(target: Target, unique: str) -> None:
    b = target.bootstrap
    make_topic(b, unique, 1)
    entity = ["--entity-type", "topics", "--entity-name", unique]
    assert f"Completed updating config for topic {unique}." in run(
        b, "ConfigCommand", *entity, "--alter", "--add-config", "retention.ms=123456,cleanup.policy=[compact,delete]"
    )
    described = run(b, "ConfigCommand", *entity, "--describe")
    assert f"Dynamic configs for topic {unique} are:" in described
    assert "retention.ms=123456 sensitive=false" in described
    assert "cleanup.policy=compact,delete sensitive=false" in described
    run(b, "ConfigCommand", *entity, "--alter", "--delete-config", "retention.ms")
    described = run(b, "ConfigCommand", *entity, "--describe")
    assert "retention.ms" not in described and "cleanup.policy=compact,delete" in described
    refused = kafka_tool("ConfigCommand", "--bootstrap-server", b, *entity, "--alter", "--add-config", "retention.ms=soon")
    assert refused.returncode == 1 and "InvalidConfigurationException" in refused.stdout + refused.stderr


def test_kafka_transactions_lists_and_describes_an_open_transaction(target: Target, unique: str) -> None:
    b = target.bootstrap
    make_topic(b, unique, 2)
    producer = Producer({"bootstrap.servers": b, "transactional.id": unique, "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(unique, b"v", partition=0)
    producer.produce(unique, b"v", partition=1)
    assert producer.flush(30) == 0
    try:
        listed = [row for row in rows(run(b, "TransactionsCommand", "list")) if row[0] == unique]
        assert len(listed) == 1 and listed[0][3] == "Ongoing"
        producer_id = listed[0][2]
        # Only transactions running longer than an hour: this one is younger.
        assert unique not in run(b, "TransactionsCommand", "list", "--duration-filter", "3600000")
        header, row = rows(run(b, "TransactionsCommand", "describe", "--transactional-id", unique))
        described = dict(zip(header, row, strict=True))
        assert described["TransactionalId"] == unique and described["ProducerId"] == producer_id
        assert described["TransactionState"] == "Ongoing" and described["TransactionTimeoutMs"] == "60000"
        assert sorted(described["TopicPartitions"].split(",")) == [f"{unique}-0", f"{unique}-1"]
        assert int(described["TransactionDurationMs"]) >= 0
    finally:
        producer.commit_transaction(30)
    # Kafka answers EndTxn once PrepareCommit is written and then writes the markers, so its
    # state may still be PrepareCommit for a moment; streamkit broker's is complete at once.
    deadline = time.monotonic() + 30
    while True:
        header, row = rows(run(b, "TransactionsCommand", "describe", "--transactional-id", unique))[:2]
        state = dict(zip(header, row, strict=False))["TransactionState"]
        if state != "PrepareCommit" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state == "CompleteCommit"
    missing = kafka_tool("TransactionsCommand", "--bootstrap-server", b, "describe", "--transactional-id", unique + "-never")
    assert missing.returncode == 1
    assert f"transactionalId `{unique}-never` failed because the ID could not be found" in missing.stdout + missing.stderr


def test_kafka_log_dirs_lists_the_partitions_with_their_sizes(target: Target, unique: str) -> None:
    b = target.bootstrap
    make_topic(b, unique, 2)
    produce(b, unique, [(0, b"k", b"v" * 100), (1, b"k", b"v" * 100), (1, b"k", b"v" * 100)])
    out = run(b, "LogDirsCommand", "--describe", "--topic-list", unique)
    answer: dict[str, Any] = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    (node,) = answer["brokers"]
    (log_dir,) = node["logDirs"]
    assert log_dir["error"] is None
    if target.log_dir is not None:
        assert log_dir["logDir"] == str(target.log_dir.absolute())
    partitions = {p["partition"]: p for p in log_dir["partitions"]}
    assert sorted(partitions) == [f"{unique}-0", f"{unique}-1"]
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in partitions.values())
    assert 0 < partitions[f"{unique}-0"]["size"] < partitions[f"{unique}-1"]["size"]


def test_kafka_metadata_quorum_is_answered_by_kafka_and_refused_by_name_by_streamkit(target: Target) -> None:
    """streamkit broker is no KRaft quorum and does not list DescribeQuorum, as a ZooKeeper-mode
    Kafka broker did not (docs/kafka.md): the tool says so in one line."""
    done = kafka_tool("MetadataQuorumCommand", "--bootstrap-server", target.bootstrap, "describe", "--status")
    if target.name == "kafka":
        assert done.returncode == 0, done.stderr[-3000:]
        assert re.search(r"LeaderId:\s+1", done.stdout) and "CurrentVoters:" in done.stdout
    else:
        assert done.returncode == 1
        assert done.stderr.splitlines()[0] == (
            "org.apache.kafka.common.errors.UnsupportedVersionException: The node does not support DESCRIBE_QUORUM"
        )


# -- Kafka's client compatibility check ------------------------------------------------------


def test_kafka_client_compatibility_test_passes_with_every_feature_expected(broker: BrokerProcess, unique: str) -> None:
    """``ClientCompatibilityTest`` (what Kafka's system tests run per client version) with every
    feature flag true: produce and consume, offsetsForTimes, the cluster id, one node, topic
    creation (it creates ``newtopic``), DescribeConfigs of the broker, idempotence, and
    DescribeAcls, which counts as working when it answers SECURITY_DISABLED (no authorizer)."""
    features = [
        "--offsets-for-times-supported", "--cluster-id-supported", "--create-topics-supported",
        "--describe-acls-supported", "--describe-configs-supported", "--idempotent-producer-supported",
    ]
    done = kafka_tool(
        "ClientCompatibilityTest", "--topic", unique, "--bootstrap-server", broker.bootstrap,
        "--expect-record-too-large-exception", "false", "--num-cluster-nodes", "1",
        *[arg for flag in features for arg in (flag, "true")],
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "SUCCESS."
