"""The APIs Kafka's tools need beyond a client's, over a raw socket: DescribeAcls (aiokafka's
structs), DescribeLogDirs (encoded here by hand: aiokafka has no struct for it), and what
happens to a malformed or unserved request of these APIs (DeleteRecords too; its answers are
``test_delete_records_wire.py``): its connection closes, the broker serves the next. ``tests/interop/test_kafka_tools_on_broker.py`` runs Kafka's tools on them."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from aiokafka.protocol.admin import (
    ApiVersionRequest_v0,
    DescribeAclsRequest_v0,
    DescribeAclsRequest_v1,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker import BrokerProcess, WireClient

pytestmark = pytest.mark.timeout(60)

ANY = 1  # Kafka's ANY for an ACL filter's resource type, pattern type, operation and permission
SECURITY_DISABLED = 54
DESCRIBE_LOG_DIRS = 35


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def describe_log_dirs_v1(topics: dict[str, list[int]] | None) -> bytes:
    """A DescribeLogDirs v1 frame (non-flexible): a nullable array of (topic, [partition])."""
    header = struct.pack(">hhih", DESCRIBE_LOG_DIRS, 1, 7, 4) + b"test"
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics))
        for name, partitions in topics.items():
            body += _string(name) + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
    return struct.pack(">i", len(header + body)) + header + body


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(">" + fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str:
        size = self.take("h")
        self.at += size
        return self.data[self.at - size:self.at].decode()


def read_log_dirs_v1(frame: bytes) -> list[tuple[int, str, dict[str, dict[int, tuple[int, int, bool]]]]]:
    """[(error, log dir, {topic: {partition: (size, offset lag, is future)}})] of a v1 response."""
    r = _Reader(frame)
    assert r.take("i") == 7  # correlation id
    r.take("i")  # throttle time
    results = []
    for _ in range(r.take("i")):
        error, log_dir = r.take("h"), r.string()
        topics: dict[str, dict[int, tuple[int, int, bool]]] = {}
        for _ in range(r.take("i")):
            name = r.string()
            topics[name] = {}
            for _ in range(r.take("i")):
                index, size, lag, future = r.take("i"), r.take("q"), r.take("q"), r.take("?")
                topics[name][index] = (size, lag, bool(future))
        results.append((error, log_dir, topics))
    assert r.at == len(frame)
    return results


def test_describe_acls_answers_as_kafka_without_an_authorizer(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as wire:
        response = wire.call(DescribeAclsRequest_v1(
            resource_type=ANY, resource_name=None, resource_pattern_type_filter=ANY,
            principal=None, host=None, operation=ANY, permission_type=ANY,
        ))
    assert response.error_code == SECURITY_DISABLED
    assert response.error_message == "No Authorizer is configured on the broker"
    assert response.resources == []


def test_describe_log_dirs_reports_only_the_partitions_the_broker_has(broker: BrokerProcess, unique: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(unique, 2, 1)])[unique].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(unique, b"v" * 50, partition=1)
    assert producer.flush(30) == 0
    log_dir = str(Path(broker.data_dir).absolute())
    with WireClient(broker.host, broker.port) as wire:
        wire.send_raw(describe_log_dirs_v1({unique: [0, 1, 7], "no-such-topic": [0]}))
        (named,) = read_log_dirs_v1(wire.recv_frame())
        wire.send_raw(describe_log_dirs_v1(None))
        (every,) = read_log_dirs_v1(wire.recv_frame())
    error, path, topics = named
    assert (error, path, list(topics)) == (0, log_dir, [unique])
    assert list(topics[unique]) == [0, 1]  # partition 7 does not exist: left out, as Kafka
    assert topics[unique][0] == (0, 0, False)
    size, lag, future = topics[unique][1]
    assert size > 50 and (lag, future) == (0, False)
    # Segments are Kafka's files: the size is the bytes on disk.
    assert size == sum(f.stat().st_size for f in (broker.data_dir / f"{unique}-1").glob("*.log"))
    assert every[2][unique] == topics[unique]
    assert not any(name.startswith("__") for name in every[2])  # internal topics stay hidden


def test_describe_log_dirs_v4_adds_the_volumes_total_and_usable_bytes(broker: BrokerProcess) -> None:
    """v4 is flexible: header v2 (a tagged-field byte), compact arrays and strings (length + 1).
    An empty topic list (not null) names no partition: the directory comes back alone."""
    header = struct.pack(">hhih", DESCRIBE_LOG_DIRS, 4, 9, 4) + b"test" + b"\x00"
    body = b"\x01" + b"\x00"  # topics: empty; no tagged fields
    with WireClient(broker.host, broker.port) as wire:
        wire.send_raw(struct.pack(">i", len(header + body)) + header + body)
        frame = wire.recv_frame()
    log_dir = str(Path(broker.data_dir).absolute()).encode()
    assert len(log_dir) < 127  # its compact length is one byte
    (correlation_id, _tags, _throttle, error, results, result_error, size), rest = (
        struct.unpack_from(">ibihbhb", frame), frame[struct.calcsize(">ibihbhb"):]
    )
    assert (correlation_id, error, results, result_error, size) == (9, 0, 2, 0, len(log_dir) + 1)
    assert rest[:len(log_dir)] == log_dir
    topics, total, usable, result_tags, tags = struct.unpack(">bqqbb", rest[len(log_dir):])
    assert (topics, result_tags, tags) == (1, 0, 0)
    assert total == shutil.disk_usage(broker.data_dir).total
    assert 0 < usable <= total


@pytest.mark.parametrize(
    "frame",
    [
        # DescribeAcls v0: Kafka 4 removed it and so do we (not advertised).
        DescribeAclsRequest_v0(resource_type=ANY, resource_name=None, principal=None, host=None,
                               operation=ANY, permission_type=ANY),
        # DescribeLogDirs v1 announcing a topic and ending there.
        struct.pack(">hhih", DESCRIBE_LOG_DIRS, 1, 1, 0) + struct.pack(">i", 1),
        # DescribeLogDirs v1 naming a topic of a negative length below -1.
        struct.pack(">hhih", DESCRIBE_LOG_DIRS, 1, 1, 0) + struct.pack(">ih", 1, -5),
        # ListTransactions v1 (flexible) whose state filter array runs past the frame.
        struct.pack(">hhih", 66, 1, 1, 0) + b"\x00" + b"\x7f",
        # DescribeTransactions v0 with a compact string longer than the frame.
        struct.pack(">hhih", 65, 0, 1, 0) + b"\x00" + b"\x02" + b"\x40",
        # DeleteRecords v0 announcing a topic and ending there.
        struct.pack(">hhih", 21, 0, 1, 0) + struct.pack(">i", 1),
        # DeleteRecords v2 (flexible) whose topic name runs past the frame.
        struct.pack(">hhih", 21, 2, 1, 0) + b"\x00" + b"\x02" + b"\x40",
        # DescribeQuorum: not served (this node is no KRaft quorum).
        struct.pack(">hhih", 55, 0, 1, 0) + b"\x00" + b"\x01",
    ],
    ids=["describe-acls-v0", "log-dirs-cut", "log-dirs-bad-string", "list-txn-cut", "describe-txn-cut",
         "delete-records-cut", "delete-records-bad-string", "quorum"],
)
def test_a_malformed_or_unserved_request_closes_its_connection_and_the_broker_serves_on(
    broker: BrokerProcess, frame: object
) -> None:
    with WireClient(broker.host, broker.port) as wire:
        if isinstance(frame, bytes):
            wire.send_raw(struct.pack(">i", len(frame)) + frame)
        else:
            wire.send(frame)
        assert wire.is_closed_by_peer()
    with WireClient(broker.host, broker.port) as wire:
        served = {key for key, _lo, _hi in wire.call(ApiVersionRequest_v0()).api_versions}
    assert {21, 29, 35, 65, 66} <= served and 55 not in served
    assert broker.alive()
