"""ACLs per resource type and operation, the same test body against ``streamkit broker
--authorizer`` and Apache Kafka with its ``StandardAuthorizer``: same ACLs, same requests, same
error codes.

Both brokers run with ``allow.everyone.if.no.acl.found`` and start with ALLOW ALTER and DESCRIBE
on the cluster for ``User:ANONYMOUS`` (every PLAINTEXT client is ANONYMOUS until the broker gets
SASL listeners), so the tests can manage ACLs while the cluster has ACLs: CREATE, IDEMPOTENT_WRITE
and DESCRIBE_CONFIGS on the cluster are therefore denied, and a topic is created through CREATE on
the topic (allowed while no ACL names it). Kafka in KRaft authorizes its controller's traffic too:
its CONTROLLER listener is SASL_PLAINTEXT with a PLAIN user ``controller``, the only super user.

ACLs are managed with confluent-kafka's AdminClient on both; requests go over a raw socket
(aiokafka's structs) so each answer's error code is seen as sent. A scenario's ACLs are removed
after it (Kafka's broker applies them asynchronously: each change is waited for through
DescribeAcls, which reads the same cache the broker authorizes from).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from aiokafka.protocol.admin import (
    AlterConfigsRequest_v0,
    CreatePartitionsRequest_v0,
    CreateTopicsRequest_v2,
    DeleteGroupsRequest_v0,
    DeleteRecordsRequest_v0,
    DeleteTopicsRequest_v1,
    DescribeConfigsRequest_v1,
    DescribeGroupsRequest_v0,
    ListGroupsRequest_v0,
)
from aiokafka.protocol.commit import (
    OffsetCommitRequest_v2,
    OffsetFetchRequest_v3,
)
from aiokafka.protocol.coordination import FindCoordinatorRequest_v1
from aiokafka.protocol.fetch import FetchRequest_v11
from aiokafka.protocol.group import (
    HeartbeatRequest_v0,
    JoinGroupRequest_v2,
    LeaveGroupRequest_v0,
    SyncGroupRequest_v0,
)
from aiokafka.protocol.metadata import MetadataRequest_v5
from aiokafka.protocol.offset import OffsetRequest_v1
from aiokafka.protocol.produce import ProduceRequest_v7
from aiokafka.protocol.transaction import (
    AddOffsetsToTxnRequest_v0,
    AddPartitionsToTxnRequest_v0,
    EndTxnRequest_v0,
    InitProducerIdRequest_v0,
    TxnOffsetCommitRequest_v0,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from streamkit.log.records import NewRecord, build_batch
from tests.support.broker import BrokerProcess, WireClient, assert_stops_cleanly
from tests.support.interop import java
from tests.support.kafka import KafkaCluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.jvm]

ANON = "User:ANONYMOUS"
EVERYONE = "User:*"
CLUSTER = "kafka-cluster"
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53
LEADER_NOT_AVAILABLE = 5
UNKNOWN_TOPIC = 3

_PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" password="controller-secret" user_controller="controller-secret";'
KAFKA_ACL_PROPERTIES = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:controller",
    "allow.everyone.if.no.acl.found": "true",
    "auto.create.topics.enable": "true",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
    "sasl.mechanism.controller.protocol": "PLAIN",
    "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
    "listener.name.controller.plain.sasl.jaas.config": _PLAIN,
}
BASE_ACLS = [
    AclBinding(ResourceType.BROKER, CLUSTER, ResourcePatternType.LITERAL, ANON, "*", op, AclPermissionType.ALLOW)
    for op in (AclOperation.ALTER, AclOperation.DESCRIBE)
]


@dataclass
class Target:
    name: str
    host: str
    port: int
    node_id: int
    admin: AdminClient

    def wire(self) -> WireClient:
        return WireClient(self.host, self.port)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


def _all_acls(admin: AdminClient) -> set[tuple[object, ...]]:
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    found = admin.describe_acls(everything, request_timeout=10).result()
    return {_key(b) for b in found}


def _key(b: AclBinding) -> tuple[object, ...]:
    return (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)


def _wait_acls(admin: AdminClient, want: set[tuple[object, ...]], present: bool) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        acls = _all_acls(admin)
        if (want <= acls) if present else not (want & acls):
            return
        time.sleep(0.05)
    raise AssertionError(f"ACLs {want} not {'present' if present else 'gone'}")


def add_acls(admin: AdminClient, acls: list[AclBinding]) -> None:
    if not acls:
        return
    for future in admin.create_acls(acls, request_timeout=10).values():
        future.result()
    _wait_acls(admin, {_key(a) for a in acls}, True)


def remove_acls(admin: AdminClient, acls: list[AclBinding]) -> None:
    if not acls:
        return
    filters = [
        AclBindingFilter(a.restype, a.name, a.resource_pattern_type, a.principal, a.host, a.operation, a.permission_type)
        for a in acls
    ]
    for future in admin.delete_acls(filters, request_timeout=10).values():
        future.result()
    _wait_acls(admin, {_key(a) for a in acls}, False)


@pytest.fixture(scope="module")
def acl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-acl"), 1, **KAFKA_ACL_PROPERTIES)
    try:
        cluster.start()
        admin = _admin(cluster.bootstrap)
        add_acls(admin, BASE_ACLS)
        _warm_up(cluster.ports[0])
        yield Target("kafka", "127.0.0.1", cluster.ports[0], 1, admin)
    finally:
        cluster.close()


def _warm_up(port: int) -> None:
    """Kafka creates its offsets and transaction-state topics on first use and answers
    COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS meanwhile:
    wait until both coordinators answer, so the scenarios see only authorization."""
    deadline = time.monotonic() + 60
    with WireClient("127.0.0.1", port) as w:
        for key_type in (0, 1):
            while w.call(FindCoordinatorRequest_v1(coordinator_key="warm-up", coordinator_type=key_type)).error_code:
                assert time.monotonic() < deadline, "Kafka's coordinators did not come up"
                time.sleep(0.1)
        while w.call(InitProducerIdRequest_v0(transactional_id=None, transaction_timeout_ms=60_000)).error_code:
            assert time.monotonic() < deadline, "Kafka's producer ids did not come up"
            time.sleep(0.1)
        while w.call(OffsetFetchRequest_v3(consumer_group="warm-up", topics=None)).error_code:
            assert time.monotonic() < deadline, "Kafka's group coordinator did not load"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def acl_streamkit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("broker-acl") / "data", "--authorizer", "--allow-everyone-if-no-acl-found"
    ).start(same_port=False)
    admin = _admin(broker.bootstrap)
    add_acls(admin, BASE_ACLS)
    yield Target("streamkit", broker.host, broker.port, 0, admin)
    assert_stops_cleanly(broker)


@pytest.fixture(params=["streamkit", "kafka"])
def target(request: pytest.FixtureRequest) -> Target:
    return request.getfixturevalue("acl_streamkit" if request.param == "streamkit" else "acl_kafka")


# -- the requests ------------------------------------------------------------------------------


@dataclass
class Names:
    topic: str
    group: str
    txn: str
    node_id: int


def _batch(*, transactional: bool = False) -> bytes:
    pid, epoch = (5, 0) if transactional else (-1, -1)
    return build_batch(
        [NewRecord(b"k", b"v", 1_700_000_000_000)], producer_id=pid, producer_epoch=epoch,
        base_sequence=0 if transactional else -1, transactional=transactional,
    )


def create_topic(w: WireClient, topic: str) -> int:
    response = w.call(CreateTopicsRequest_v2(create_topic_requests=[(topic, 1, 1, [], [])], timeout=10_000, validate_only=False))
    return int(response.topic_errors[0][1])


def wait_topic(w: WireClient, topic: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        t = w.call(MetadataRequest_v5(topics=[topic], allow_auto_topic_creation=False)).topics[0]
        if t[0] == 0 and t[3] and t[3][0][2] >= 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"topic {topic} has no leader")


def produce(w: WireClient, n: Names, *, transactional: bool = False) -> int:
    response = w.call(ProduceRequest_v7(
        transactional_id=n.txn if transactional else None, required_acks=1, timeout=10_000,
        topics=[(n.topic, [(0, _batch(transactional=transactional))])],
    ))
    return int(response.topics[0][1][0][1])


def fetch(w: WireClient, n: Names) -> int:
    response = w.call(FetchRequest_v11(
        replica_id=-1, max_wait_time=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[(n.topic, [(0, -1, 0, -1, 1 << 20)])], forgotten_topics_data=[], rack_id="",
    ))
    return int(response.topics[0][1][0][1])


def list_offsets(w: WireClient, n: Names) -> int:
    return int(w.call(OffsetRequest_v1(replica_id=-1, topics=[(n.topic, [(0, -1)])])).topics[0][1][0][1])


def metadata_named(w: WireClient, n: Names) -> int:
    return int(w.call(MetadataRequest_v5(topics=[n.topic], allow_auto_topic_creation=False)).topics[0][0])


def metadata_lists(w: WireClient, n: Names) -> int:
    """1 when listing every topic shows the topic, else 0."""
    topics = w.call(MetadataRequest_v5(topics=None, allow_auto_topic_creation=False)).topics
    return int(any(t[1] == n.topic for t in topics))


def metadata_auto_create(w: WireClient, n: Names) -> int:
    """Auto-creation of a new topic, 0 when the topic then exists. Kafka in KRaft answers
    UNKNOWN_TOPIC_OR_PARTITION (or LEADER_NOT_AVAILABLE) while its controller creates the topic;
    streamkit creates it before it answers (0)."""
    name = n.topic + "-auto"
    code = int(w.call(MetadataRequest_v5(topics=[name], allow_auto_topic_creation=True)).topics[0][0])
    if code in (UNKNOWN_TOPIC, LEADER_NOT_AVAILABLE):
        wait_topic(w, name)
        return 0
    return code


def create_new_topic(w: WireClient, n: Names) -> int:
    return create_topic(w, n.topic + "-new")


def delete_topic(w: WireClient, n: Names) -> int:
    return int(w.call(DeleteTopicsRequest_v1(topics=[n.topic], timeout=10_000)).topic_error_codes[0][1])


def create_partitions(w: WireClient, n: Names) -> int:
    response = w.call(CreatePartitionsRequest_v0(topic_partitions=[(n.topic, (2, None))], timeout=10_000, validate_only=True))
    return int(response.topic_errors[0][1])


def delete_records(w: WireClient, n: Names) -> int:
    return int(w.call(DeleteRecordsRequest_v0(topics=[(n.topic, [(0, 0)])], timeout_ms=10_000)).topics[0][1][0][2])


def describe_topic_configs(w: WireClient, n: Names) -> int:
    return int(w.call(DescribeConfigsRequest_v1(resources=[(2, n.topic, None)], include_synonyms=False)).resources[0][0])


def describe_broker_configs(w: WireClient, n: Names) -> int:
    request = DescribeConfigsRequest_v1(resources=[(4, str(n.node_id), None)], include_synonyms=False)
    return int(w.call(request).resources[0][0])


def alter_topic_configs(w: WireClient, n: Names) -> int:
    request = AlterConfigsRequest_v0(resources=[(2, n.topic, [("retention.ms", "100000")])], validate_only=True)
    return int(w.call(request).resources[0][0])


def offset_commit(w: WireClient, n: Names) -> int:
    response = w.call(OffsetCommitRequest_v2(
        consumer_group=n.group, consumer_group_generation_id=-1, consumer_id="", retention_time=-1,
        topics=[(n.topic, [(0, 0, "")])],
    ))
    return int(response.topics[0][1][0][1])


def offset_fetch(w: WireClient, n: Names) -> int:
    response = w.call(OffsetFetchRequest_v3(consumer_group=n.group, topics=[(n.topic, [0])]))
    if response.error_code:
        return int(response.error_code)
    return int(response.topics[0][1][0][3])


def join_group(w: WireClient, n: Names) -> int:
    response = w.call(JoinGroupRequest_v2(
        group=n.group, session_timeout=10_000, rebalance_timeout=10_000, member_id="", protocol_type="consumer",
        group_protocols=[("range", b"")],
    ))
    return int(response.error_code)


def heartbeat(w: WireClient, n: Names) -> int:
    return int(w.call(HeartbeatRequest_v0(group=n.group, generation_id=1, member_id="m")).error_code)


def sync_group(w: WireClient, n: Names) -> int:
    request = SyncGroupRequest_v0(group=n.group, generation_id=1, member_id="m", group_assignment=[])
    return int(w.call(request).error_code)


def leave_group(w: WireClient, n: Names) -> int:
    return int(w.call(LeaveGroupRequest_v0(group=n.group, member_id="m")).error_code)


def list_groups_shows(w: WireClient, n: Names) -> int:
    """1 when ListGroups lists the group (made by a commit first), else 0."""
    assert offset_commit(w, n) == 0
    return int(any(g[0] == n.group for g in w.call(ListGroupsRequest_v0()).groups))


def add_partitions_to_txn(w: WireClient, n: Names) -> int:
    request = AddPartitionsToTxnRequest_v0(transactional_id=n.txn, producer_id=5, producer_epoch=0,
                                           topics=[(n.topic, [0])])
    return int(w.call(request).errors[0][1][0][1])


def txn_offset_commit(w: WireClient, n: Names) -> int:
    request = TxnOffsetCommitRequest_v0(transactional_id=n.txn, group_id=n.group, producer_id=5, producer_epoch=0,
                                        topics=[(n.topic, [(0, 0, "")])])
    return int(w.call(request).errors[0][1][0][1])


def _flexible_call(w: WireClient, api_key: int, body: bytes) -> bytes:
    """A v0 flexible request (header v2) and the body of its answer (after header v1)."""
    w.correlation_id += 1
    header = struct.pack(">hhih", api_key, 0, w.correlation_id, 1) + b"x" + b"\x00"
    w.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
    frame = w.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == w.correlation_id
    return frame[5:]  # correlation id, no tagged fields


def _compact(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()  # names here are shorter than 127 bytes


def describe_transaction(w: WireClient, n: Names) -> int:
    """DescribeTransactions v0 of the scenario's id (made first by InitProducerId)."""
    assert init_transactional(w, n) == 0
    body = _flexible_call(w, 65, b"\x02" + _compact(n.txn) + b"\x00")
    return struct.unpack_from(">h", body, 5)[0]  # throttle, states' compact length, first error


def list_transactions_shows(w: WireClient, n: Names) -> int:
    """1 when ListTransactions v0 lists the scenario's id (made first by InitProducerId), else 0."""
    assert init_transactional(w, n) == 0
    body = _flexible_call(w, 66, b"\x01\x01\x00")  # no state filter, no producer filter
    pos = 6  # throttle, error code
    pos += body[pos]  # unknown state filters: a compact array of nothing here
    count, pos = body[pos] - 1, pos + 1  # fewer than 127 entries on these test brokers
    for _ in range(count):
        size = body[pos] - 1
        txn = body[pos + 1 : pos + 1 + size].decode()
        pos += 1 + size + 8
        pos += body[pos] + 1  # state (compact string), then tagged fields
        if txn == n.txn:
            return 1
    return 0


def describe_group(w: WireClient, n: Names) -> int:
    return int(w.call(DescribeGroupsRequest_v0(groups=[n.group])).groups[0][0])


def delete_group(w: WireClient, n: Names) -> int:
    return int(w.call(DeleteGroupsRequest_v0(groups_names=[n.group])).results[0][1])


def find_group_coordinator(w: WireClient, n: Names) -> int:
    return int(w.call(FindCoordinatorRequest_v1(coordinator_key=n.group, coordinator_type=0)).error_code)


def find_txn_coordinator(w: WireClient, n: Names) -> int:
    return int(w.call(FindCoordinatorRequest_v1(coordinator_key=n.txn, coordinator_type=1)).error_code)


def init_transactional(w: WireClient, n: Names) -> int:
    return int(w.call(InitProducerIdRequest_v0(transactional_id=n.txn, transaction_timeout_ms=60_000)).error_code)


def init_idempotent(w: WireClient, n: Names) -> int:
    return int(w.call(InitProducerIdRequest_v0(transactional_id=None, transaction_timeout_ms=60_000)).error_code)


def transactional_produce(w: WireClient, n: Names) -> int:
    return produce(w, n, transactional=True)


def add_offsets_to_txn(w: WireClient, n: Names) -> int:
    request = AddOffsetsToTxnRequest_v0(transactional_id=n.txn, producer_id=5, producer_epoch=0, group_id=n.group)
    return int(w.call(request).error_code)


def end_txn(w: WireClient, n: Names) -> int:
    request = EndTxnRequest_v0(transactional_id=n.txn, producer_id=5, producer_epoch=0, transaction_result=True)
    return int(w.call(request).error_code)


# -- the scenarios -----------------------------------------------------------------------------

T, G, X, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.BROKER
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation

# (resource type, name: "topic"/"group"/"txn"/"prefix"/"*"/literal, pattern, principal, host, operation, permission)
Acl = tuple[ResourceType, str, ResourcePatternType, str, str, AclOperation, AclPermissionType]


def acl(rtype: ResourceType, name: str, op: AclOperation, perm: AclPermissionType = ALLOW, *,
        pattern: ResourcePatternType = LIT, principal: str = ANON, host: str = "*") -> Acl:
    return (rtype, name, pattern, principal, host, op, perm)


SCENARIOS: list[tuple[str, Callable[[WireClient, Names], int], list[Acl], int]] = [
    # TOPIC WRITE (Produce)
    ("produce-no-acl", produce, [], 0),
    ("produce-deny-write", produce, [acl(T, "topic", Op.WRITE, DENY)], TOPIC_AUTH),
    ("produce-only-read", produce, [acl(T, "topic", Op.READ)], TOPIC_AUTH),
    ("produce-allow-prefix", produce, [acl(T, "prefix", Op.WRITE, pattern=PRE)], 0),
    ("produce-allow-wildcard", produce, [acl(T, "*", Op.WRITE)], 0),
    ("produce-deny-everyone", produce, [acl(T, "topic", Op.ALL), acl(T, "topic", Op.WRITE, DENY, principal=EVERYONE)], TOPIC_AUTH),
    ("produce-deny-prefix-wins", produce, [acl(T, "topic", Op.WRITE), acl(T, "prefix", Op.ALL, DENY, pattern=PRE)], TOPIC_AUTH),
    ("produce-other-host", produce, [acl(T, "topic", Op.WRITE, host="10.1.2.3")], TOPIC_AUTH),
    ("produce-other-principal", produce, [acl(T, "topic", Op.WRITE, principal="User:alice")], TOPIC_AUTH),
    # TOPIC READ (Fetch), DESCRIBE (ListOffsets, Metadata) and what implies it
    ("fetch-deny-read", fetch, [acl(T, "topic", Op.READ, DENY)], TOPIC_AUTH),
    ("fetch-only-write", fetch, [acl(T, "topic", Op.WRITE)], TOPIC_AUTH),
    ("fetch-allow-read", fetch, [acl(T, "topic", Op.READ)], 0),
    ("list-offsets-write-implies-describe", list_offsets, [acl(T, "topic", Op.WRITE)], 0),
    ("list-offsets-deny-describe", list_offsets, [acl(T, "topic", Op.DESCRIBE, DENY)], TOPIC_AUTH),
    ("list-offsets-deny-read-implies-nothing", list_offsets,
     [acl(T, "topic", Op.DESCRIBE), acl(T, "topic", Op.READ, DENY)], 0),
    ("list-offsets-any-acl-ends-allow-everyone", list_offsets, [acl(T, "topic", Op.READ, DENY)], TOPIC_AUTH),
    ("metadata-read-implies-describe", metadata_named, [acl(T, "topic", Op.READ)], 0),
    ("metadata-deny-describe", metadata_named, [acl(T, "topic", Op.DESCRIBE, DENY)], TOPIC_AUTH),
    ("metadata-describe-configs-is-not-describe", metadata_named, [acl(T, "topic", Op.DESCRIBE_CONFIGS)], TOPIC_AUTH),
    ("metadata-all-lists-described", metadata_lists, [], 1),
    ("metadata-all-hides-undescribed", metadata_lists, [acl(T, "topic", Op.DESCRIBE, DENY)], 0),
    ("metadata-auto-create", metadata_auto_create, [], 0),
    ("metadata-auto-create-needs-create", metadata_auto_create, [acl(T, "prefix", Op.DESCRIBE, pattern=PRE)], TOPIC_AUTH),
    ("metadata-auto-create-describe-is-not-create", metadata_auto_create,
     [acl(T, "prefix", Op.CREATE, pattern=PRE)], TOPIC_AUTH),
    ("metadata-auto-create-allowed", metadata_auto_create,
     [acl(T, "prefix", Op.CREATE, pattern=PRE), acl(T, "prefix", Op.DESCRIBE, pattern=PRE)], 0),
    # TOPIC CREATE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS
    ("create-topic-no-acl", create_new_topic, [], 0),
    ("create-topic-deny-create", create_new_topic, [acl(T, "prefix", Op.CREATE, DENY, pattern=PRE)], TOPIC_AUTH),
    ("create-topic-only-describe", create_new_topic, [acl(T, "prefix", Op.DESCRIBE, pattern=PRE)], TOPIC_AUTH),
    ("create-topic-allow-create", create_new_topic, [acl(T, "prefix", Op.CREATE, pattern=PRE)], 0),
    ("delete-topic-deny-delete", delete_topic, [acl(T, "topic", Op.DELETE, DENY)], TOPIC_AUTH),
    ("delete-topic-only-describe", delete_topic, [acl(T, "topic", Op.DESCRIBE)], TOPIC_AUTH),
    ("delete-topic-allow-delete", delete_topic, [acl(T, "topic", Op.DELETE)], 0),
    ("create-partitions-deny-alter", create_partitions, [acl(T, "topic", Op.ALTER, DENY)], TOPIC_AUTH),
    ("create-partitions-allow-alter", create_partitions, [acl(T, "topic", Op.ALTER)], 0),
    ("delete-records-deny-delete", delete_records, [acl(T, "topic", Op.DELETE, DENY)], TOPIC_AUTH),
    ("delete-records-allow-delete", delete_records, [acl(T, "topic", Op.DELETE)], 0),
    ("describe-configs-alter-configs-implies", describe_topic_configs, [acl(T, "topic", Op.ALTER_CONFIGS)], 0),
    ("describe-configs-alter-does-not-imply", describe_topic_configs, [acl(T, "topic", Op.ALTER)], TOPIC_AUTH),
    ("describe-configs-deny", describe_topic_configs, [acl(T, "topic", Op.DESCRIBE_CONFIGS, DENY)], TOPIC_AUTH),
    ("alter-configs-deny", alter_topic_configs, [acl(T, "topic", Op.ALTER_CONFIGS, DENY)], TOPIC_AUTH),
    ("alter-configs-allow", alter_topic_configs, [acl(T, "topic", Op.ALTER_CONFIGS)], 0),
    # CLUSTER (its ACLs allow only ALTER and DESCRIBE)
    ("describe-broker-configs-cluster", describe_broker_configs, [], CLUSTER_AUTH),
    ("init-idempotent-some-topic-write", init_idempotent, [], 0),
    ("init-idempotent-no-write-anywhere", init_idempotent, [acl(T, "*", Op.WRITE, DENY)], CLUSTER_AUTH),
    ("init-idempotent-cluster-idempotent-write", init_idempotent,
     [acl(T, "*", Op.WRITE, DENY), acl(C, CLUSTER, Op.IDEMPOTENT_WRITE)], 0),
    # GROUP READ, DESCRIBE, DELETE
    ("commit-no-acl", offset_commit, [], 0),
    ("commit-deny-group-read", offset_commit, [acl(G, "group", Op.READ, DENY)], GROUP_AUTH),
    ("commit-deny-topic-read", offset_commit, [acl(G, "group", Op.READ), acl(T, "topic", Op.READ, DENY)], TOPIC_AUTH),
    ("offset-fetch-deny-group-describe", offset_fetch, [acl(G, "group", Op.DESCRIBE, DENY)], GROUP_AUTH),
    ("offset-fetch-read-implies-describe", offset_fetch, [acl(G, "group", Op.READ)], 0),
    ("offset-fetch-deny-topic-describe", offset_fetch, [acl(T, "topic", Op.DESCRIBE, DENY)], TOPIC_AUTH),
    ("join-deny-group-read", join_group, [acl(G, "group", Op.READ, DENY)], GROUP_AUTH),
    ("join-only-describe", join_group, [acl(G, "group", Op.DESCRIBE)], GROUP_AUTH),
    ("heartbeat-deny-group-read", heartbeat, [acl(G, "group", Op.READ, DENY)], GROUP_AUTH),
    ("sync-group-deny-group-read", sync_group, [acl(G, "group", Op.READ, DENY)], GROUP_AUTH),
    ("leave-group-deny-group-read", leave_group, [acl(G, "group", Op.READ, DENY)], GROUP_AUTH),
    ("list-groups-cluster-describe-lists-all", list_groups_shows,
     [acl(G, "group", Op.READ), acl(G, "group", Op.DESCRIBE, DENY)], 1),
    ("describe-group-deny-describe-beats-read", describe_group,
     [acl(G, "group", Op.READ), acl(G, "group", Op.DESCRIBE, DENY)], GROUP_AUTH),
    ("describe-group-deny", describe_group, [acl(G, "group", Op.DESCRIBE, DENY)], GROUP_AUTH),
    ("describe-group-read-implies", describe_group, [acl(G, "group", Op.READ)], 0),
    ("delete-group-deny", delete_group, [acl(G, "group", Op.DELETE, DENY)], GROUP_AUTH),
    ("find-group-coordinator-deny", find_group_coordinator, [acl(G, "group", Op.DESCRIBE, DENY)], GROUP_AUTH),
    ("find-group-coordinator-prefix", find_group_coordinator, [acl(G, "prefix", Op.READ, pattern=PRE)], 0),
    # TRANSACTIONAL_ID WRITE, DESCRIBE
    ("find-txn-coordinator-deny", find_txn_coordinator, [acl(X, "txn", Op.DESCRIBE, DENY)], TXN_AUTH),
    ("find-txn-coordinator-write-implies", find_txn_coordinator, [acl(X, "txn", Op.WRITE)], 0),
    ("init-txn-deny-write", init_transactional, [acl(X, "txn", Op.WRITE, DENY)], TXN_AUTH),
    ("init-txn-only-describe", init_transactional, [acl(X, "txn", Op.DESCRIBE)], TXN_AUTH),
    ("init-txn-allow-write", init_transactional, [acl(X, "txn", Op.WRITE)], 0),
    ("txn-produce-deny-txn-write", transactional_produce, [acl(X, "txn", Op.WRITE, DENY)], TXN_AUTH),
    ("add-offsets-deny-txn", add_offsets_to_txn, [acl(X, "txn", Op.WRITE, DENY)], TXN_AUTH),
    ("add-offsets-deny-group", add_offsets_to_txn, [acl(X, "txn", Op.WRITE), acl(G, "group", Op.READ, DENY)], GROUP_AUTH),
    ("end-txn-deny", end_txn, [acl(X, "txn", Op.WRITE, DENY)], TXN_AUTH),
    ("describe-txn-deny-describe", describe_transaction,
     [acl(X, "txn", Op.WRITE), acl(X, "txn", Op.DESCRIBE, DENY)], TXN_AUTH),
    ("describe-txn-write-implies", describe_transaction, [acl(X, "txn", Op.WRITE)], 0),
    ("list-txns-lists-described", list_transactions_shows, [acl(X, "txn", Op.WRITE)], 1),
    ("list-txns-hides-undescribed", list_transactions_shows,
     [acl(X, "txn", Op.WRITE), acl(X, "txn", Op.DESCRIBE, DENY)], 0),
    ("add-partitions-deny-txn", add_partitions_to_txn, [acl(X, "txn", Op.WRITE, DENY)], TXN_AUTH),
    ("add-partitions-deny-topic", add_partitions_to_txn,
     [acl(X, "txn", Op.WRITE), acl(T, "topic", Op.WRITE, DENY)], TOPIC_AUTH),
    ("txn-offset-commit-deny-txn", txn_offset_commit, [acl(X, "txn", Op.WRITE, DENY)], TXN_AUTH),
    ("txn-offset-commit-deny-group", txn_offset_commit,
     [acl(X, "txn", Op.WRITE), acl(G, "group", Op.READ, DENY)], GROUP_AUTH),
]


def _binding(spec: Acl, n: Names, prefix: str) -> AclBinding:
    rtype, name, pattern, principal, host, op, perm = spec
    name = {"topic": n.topic, "group": n.group, "txn": n.txn, "prefix": prefix}.get(name, name)
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


@pytest.mark.parametrize(("case", "action", "acls", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_same_answer_as_kafka(
    target: Target, unique: str, case: str, action: Callable[[WireClient, Names], int], acls: list[Acl], expected: int
) -> None:
    prefix = f"acl-{unique}"
    n = Names(topic=f"{prefix}-t", group=f"{prefix}-g", txn=f"{prefix}-x", node_id=target.node_id)
    with target.wire() as w:
        assert create_topic(w, n.topic) == 0
        wait_topic(w, n.topic)
        bindings = [_binding(spec, n, prefix) for spec in acls]
        add_acls(target.admin, bindings)
        try:
            assert action(w, n) == expected, f"{case} on {target.name}"
        finally:
            remove_acls(target.admin, bindings)


def test_kafka_acls_tool_adds_lists_and_removes_alike(target: Target, unique: str) -> None:
    """Kafka's own ``kafka-acls`` (``org.apache.kafka.tools.AclCommand``) prints the same
    listing from both brokers, and its removal leaves nothing behind."""
    topic = f"acl-tool-{unique}"
    common = ["--bootstrap-server", f"{target.host}:{target.port}"]
    java("kafka", "org.apache.kafka.tools.AclCommand", *common, "--add", "--allow-principal", "User:alice",
         "--operation", "Read", "--operation", "Describe", "--topic", topic, "--resource-pattern-type", "prefixed")
    listed = java("kafka", "org.apache.kafka.tools.AclCommand", *common, "--list", "--topic", topic + "-x",
                  "--resource-pattern-type", "match")
    lines = sorted(line.strip() for line in listed.splitlines() if line.strip())
    assert lines == sorted([
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=PREFIXED)`:",
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)",
    ]), listed
    java("kafka", "org.apache.kafka.tools.AclCommand", *common, "--remove", "--force", "--topic", topic,
         "--resource-pattern-type", "prefixed")
    deadline = time.monotonic() + 15
    while any(key[1] == topic for key in _all_acls(target.admin)):
        assert time.monotonic() < deadline, "kafka-acls --remove left ACLs behind"
        time.sleep(0.05)


def test_real_clients_with_a_roles_acls(target: Target, unique: str) -> None:
    """confluent-kafka's idempotent producer and group consumer need exactly WRITE, READ and
    GROUP READ here; a consumer whose group is denied gets GROUP_AUTHORIZATION_FAILED, on both."""
    from confluent_kafka import Consumer, KafkaError, Producer

    prefix = f"acl-role-{unique}"
    topic, group, denied_group = f"{prefix}-in", f"{prefix}-g", f"{prefix}-denied"
    with target.wire() as w:
        assert create_topic(w, topic) == 0
        wait_topic(w, topic)
    role = [
        AclBinding(T, prefix, PRE, ANON, "*", Op.WRITE, ALLOW),
        AclBinding(T, prefix, PRE, ANON, "*", Op.READ, ALLOW),
        AclBinding(G, group, LIT, ANON, "*", Op.READ, ALLOW),
        AclBinding(G, denied_group, LIT, ANON, "*", Op.READ, DENY),
    ]
    add_acls(target.admin, role)
    try:
        bootstrap = f"{target.host}:{target.port}"
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "log_level": 0})
        producer.produce(topic, b"v")
        assert producer.flush(15) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "log_level": 0})
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            msg = None
            while msg is None or msg.error() is not None:
                assert time.monotonic() < deadline, f"nothing consumed ({msg.error() if msg else None})"
                msg = consumer.poll(0.5)
            assert msg.value() == b"v"
            consumer.commit(message=msg, asynchronous=False)
        finally:
            consumer.close()
        refused = Consumer({"bootstrap.servers": bootstrap, "group.id": denied_group, "log_level": 0})
        try:
            refused.subscribe([topic])
            deadline = time.monotonic() + 30
            error = None
            while error is None:
                assert time.monotonic() < deadline, "the denied group was never refused"
                msg = refused.poll(0.5)
                if msg is not None and msg.error() is not None:
                    error = msg.error().code()
            assert error == KafkaError.GROUP_AUTHORIZATION_FAILED
        finally:
            refused.close()
    finally:
        remove_acls(target.admin, role)
