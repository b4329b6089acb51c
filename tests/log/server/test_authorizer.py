"""The authorizer's decision against a simple model of Kafka's rules, the ACL file's durability,
and the ACL APIs' answers to malformed requests.

The model restates ``StandardAuthorizer`` the long way: collect the bindings whose pattern covers
the resource; among those for the principal (or ``User:*``) and host (or ``*``), a DENY of the
operation or ALL denies; an ALLOW of it, of ALL, or of an operation that implies it allows;
otherwise ``allow.everyone.if.no.acl.found`` decides when no binding names the resource at all.
"""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest
from aiokafka.protocol.admin import CreateTopicsRequest_v2, DescribeConfigsRequest_v1
from aiokafka.protocol.metadata import MetadataRequest_v5
from confluent_kafka import admin as ck
from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit.log.server.acl_store import AclFileError, AclStore, acl_path, load_acls, save_acls
from streamkit.log.server.authorizer import (
    AclBinding,
    AclFilter,
    AuthorizerSettings,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
    authorize_any,
)
from tests.support.broker import BrokerProcess, WireClient

TYPES = [ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID]
OPS = [op for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)]
NAMES = ["a", "ab", "abc", "b", "*"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["*", "10.0.0.1", "10.0.0.2"]

IMPLIED = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}

bindings = st.builds(
    AclBinding,
    st.sampled_from(TYPES),
    st.sampled_from(NAMES),
    st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from(OPS),
    st.sampled_from([Permission.ALLOW, Permission.DENY]),
)


def model(acls: list[AclBinding], supers: set[str], everyone: bool, principal: str, host: str,
          op: Operation, rtype: ResourceType, name: str) -> bool:
    if principal in supers:
        return True

    def covers(a: AclBinding) -> bool:
        if a.resource_type != rtype:
            return False
        if a.pattern_type == PatternType.LITERAL:
            return a.name in (name, "*")
        return name.startswith(a.name)

    named = [a for a in acls if covers(a)]
    mine = [a for a in named if a.principal in (principal, "User:*") and a.host in (host, "*")]
    if any(a.permission == Permission.DENY and a.operation in (op, Operation.ALL) for a in mine):
        return False
    if any(
        a.permission == Permission.ALLOW and (a.operation in (op, Operation.ALL) or a.operation in IMPLIED.get(op, ()))
        for a in mine
    ):
        return True
    return not named and everyone


@settings(max_examples=400, deadline=None)
@given(
    acls=st.lists(bindings, max_size=8),
    everyone=st.booleans(),
    super_alice=st.booleans(),
    principal=st.sampled_from(["User:alice", "User:bob"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    op=st.sampled_from([o for o in OPS if o != Operation.ALL]),
    rtype=st.sampled_from(TYPES),
    name=st.sampled_from(["a", "ab", "abc", "b", "ba", "*"]),
)
def test_decision_matches_the_model(acls: list[AclBinding], everyone: bool, super_alice: bool, principal: str,
                                    host: str, op: Operation, rtype: ResourceType, name: str) -> None:
    supers = {"User:alice"} if super_alice else set()
    got = authorize(acls, AuthorizerSettings(frozenset(supers), everyone), principal, host, op, rtype, name)
    assert got == model(acls, supers, everyone, principal, host, op, rtype, name)


def _b(rtype: ResourceType, name: str, pattern: PatternType, op: Operation, perm: Permission,
       principal: str = "User:alice") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


T, LIT, PRE = ResourceType.TOPIC, PatternType.LITERAL, PatternType.PREFIXED


@pytest.mark.parametrize(("acls", "expected"), [
    ([], False),  # allow.everyone.if.no.acl.found false
    ([_b(T, "x", LIT, Operation.WRITE, Permission.ALLOW)], True),
    ([_b(T, "*", LIT, Operation.WRITE, Permission.ALLOW)], True),
    ([_b(T, "*", LIT, Operation.WRITE, Permission.DENY)], False),
    ([_b(T, "pay", PRE, Operation.WRITE, Permission.ALLOW), _b(T, "pa", PRE, Operation.WRITE, Permission.DENY)], False),
    ([_b(T, "pay", PRE, Operation.WRITE, Permission.ALLOW), _b(T, "payx", PRE, Operation.WRITE, Permission.DENY)], True),
    ([_b(T, "pay", LIT, Operation.WRITE, Permission.ALLOW), _b(T, "pay", LIT, Operation.WRITE, Permission.DENY)], False),
    ([_b(T, "x", LIT, Operation.READ, Permission.ALLOW)], False),
])
def test_authorize_any_is_kafkas_by_resource_type(acls: list[AclBinding], expected: bool) -> None:
    """InitProducerId without a transactional id: WRITE on some topic (Kafka's
    ``authorizeByResourceType``)."""
    got = authorize_any(acls, AuthorizerSettings(), "User:alice", "10.0.0.1", Operation.WRITE, T)
    assert got is expected


def test_a_super_user_may_do_anything_despite_denies() -> None:
    deny = [_b(T, "*", LIT, Operation.ALL, Permission.DENY, "User:*")]
    settings_ = AuthorizerSettings(frozenset({"User:root"}))
    assert authorize(deny, settings_, "User:root", "h", Operation.DELETE, T, "x")
    assert authorize_any(deny, settings_, "User:root", "h", Operation.WRITE, T)
    assert not authorize(deny, settings_, "User:alice", "h", Operation.DELETE, T, "x")


def test_match_filter_finds_what_applies_to_a_name() -> None:
    acls = [
        _b(T, "abc", LIT, Operation.READ, Permission.ALLOW),
        _b(T, "ab", PRE, Operation.READ, Permission.ALLOW),
        _b(T, "*", LIT, Operation.READ, Permission.ALLOW),
        _b(T, "abd", LIT, Operation.READ, Permission.ALLOW),
    ]
    found = [a for a in acls if AclFilter(T, "abc", PatternType.MATCH).matches(a)]
    assert [a.name for a in found] == ["abc", "ab", "*"]
    assert [a.name for a in acls if AclFilter(T, "ab", PatternType.PREFIXED).matches(a)] == ["ab"]


# -- durability ---------------------------------------------------------------------------------


def test_acls_survive_a_reload_and_changes_are_atomic(tmp_path: Path) -> None:
    path = acl_path(tmp_path)
    store = AclStore(path, AuthorizerSettings())
    one = _b(T, "x", LIT, Operation.READ, Permission.ALLOW)
    two = _b(ResourceType.GROUP, "g", PRE, Operation.ALL, Permission.DENY, "User:*")
    store.create([one, two])
    assert load_acls(path) == {one, two}
    assert AclStore(path, AuthorizerSettings()).acls == {one, two}
    assert store.delete([AclFilter(ResourceType.GROUP)]) == [[two]]
    assert load_acls(path) == {one}
    assert not path.with_name(path.name + ".tmp").exists()


@pytest.mark.parametrize("damage", [
    lambda text: text[: len(text) // 2],  # torn
    lambda text: text.replace('"User:alice"', '"User:mallory"'),  # changed behind the checksum
    lambda text: "not json",
    lambda text: json.dumps({"format": 9, "acls": []}),
])
def test_a_damaged_acl_file_is_refused(tmp_path: Path, damage: object) -> None:
    path = acl_path(tmp_path)
    save_acls(path, [_b(T, "x", LIT, Operation.READ, Permission.ALLOW)])
    path.write_text(damage(path.read_text()))  # type: ignore[operator]
    with pytest.raises(AclFileError, match="is damaged"):
        load_acls(path)


def test_broker_refuses_to_start_on_a_damaged_acl_file_and_keeps_acls_across_restarts(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory("--authorizer", "--allow-everyone-if-no-acl-found").start()
    admin = ck.AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    wanted = ck.AclBinding(ck.ResourceType.TOPIC, "kept", ck.ResourcePatternType.PREFIXED, "User:bob", "*",
                           ck.AclOperation.READ, ck.AclPermissionType.ALLOW)
    for future in admin.create_acls([wanted], request_timeout=10).values():
        future.result()
    assert broker.stop() == 0
    broker.start()
    everything = ck.AclBindingFilter(ck.ResourceType.ANY, None, ck.ResourcePatternType.ANY, None, None,
                                     ck.AclOperation.ANY, ck.AclPermissionType.ANY)
    admin = ck.AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    assert admin.describe_acls(everything, request_timeout=10).result() == [wanted]
    assert broker.stop() == 0
    path = acl_path(broker.data_dir)
    path.write_text(path.read_text().replace("kept", "kepT"))
    with pytest.raises(RuntimeError, match=r"ACL file .* is damaged"):
        broker.start()
    refusal = broker.stderr().split("----- start 2 -----")[-1].strip().splitlines()
    assert len(refusal) == 1 and "is damaged" in refusal[0], refusal


# -- hardening (the module's broker, with the authorizer) ------------------------------------


@pytest.fixture(scope="module")
def broker_args() -> tuple[str, ...]:
    return ("--authorizer", "--allow-everyone-if-no-acl-found")


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, 7, 1) + b"x"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _string(s: str | None) -> bytes:
    return struct.pack(">h", -1) if s is None else struct.pack(">h", len(s)) + s.encode()


def _creation(rtype: int, name: str, pattern: int, principal: str, host: str, op: int, perm: int) -> bytes:
    return (struct.pack(">b", rtype) + _string(name) + struct.pack(">b", pattern) + _string(principal)
            + _string(host) + struct.pack(">bb", op, perm))


@pytest.mark.parametrize(("creation", "expected"), [
    ((2, "t", 3, "User:a", "*", 3, 3), 0),
    ((1, "t", 3, "User:a", "*", 3, 3), 42),  # resource type ANY
    ((99, "t", 3, "User:a", "*", 3, 3), 42),  # unknown resource type
    ((2, "t", 2, "User:a", "*", 3, 3), 42),  # pattern MATCH
    ((2, "t", 3, "User:a", "*", 1, 3), 42),  # operation ANY
    ((2, "t", 3, "User:a", "*", 3, 1), 42),  # permission ANY
    ((2, "", 3, "User:a", "*", 3, 3), 42),  # empty name
    ((4, "other", 3, "User:a", "*", 3, 3), 42),  # cluster not named kafka-cluster
    ((2, "t", 3, "alice", "*", 3, 3), 42),  # principal without a type
])
def test_malformed_create_acls_get_invalid_request_per_binding(
    broker: BrokerProcess, creation: tuple[int, str, int, str, str, int, int], expected: int
) -> None:
    body = struct.pack(">i", 2) + _creation(*creation) + _creation(2, "ok", 3, "User:z", "*", 3, 3)
    with WireClient(broker.host, broker.port) as w:
        w.send_raw(_frame(30, 1, body))
        frame = w.recv_frame()
    # correlation id, throttle, 2 results: (error code, message)
    count = struct.unpack_from(">i", frame, 8)[0]
    first = struct.unpack_from(">h", frame, 12)[0]
    assert (count, first) == (2, expected)


@pytest.mark.parametrize("payload", [
    b"",  # no filters count
    struct.pack(">i", 1) + b"\x02",  # a truncated filter
    struct.pack(">i", 5),  # five filters announced, none sent
    struct.pack(">i", 1) + struct.pack(">b", 2) + struct.pack(">h", 30_000) + b"x",  # a string longer than the frame
])
def test_garbage_acl_requests_close_only_their_connection(broker: BrokerProcess, payload: bytes) -> None:
    for api_key in (29, 30, 31):
        with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
            sock.sendall(_frame(api_key, 1, payload))
            assert sock.recv(4096) == b""  # closed, no answer
    with WireClient(broker.host, broker.port) as w:  # and everyone else is still served
        w.send_raw(_frame(31, 1, struct.pack(">i", 1) + struct.pack(">b", 1) + _string(None)
                          + struct.pack(">b", 1) + _string(None) + _string(None) + struct.pack(">bb", 1, 1)))
        frame = w.recv_frame()
    assert struct.unpack_from(">i", frame, 8)[0] == 1
    assert broker.alive()


def _describe_all(w: WireClient) -> tuple[int, bytes]:
    body = (struct.pack(">b", 1) + _string(None) + struct.pack(">b", 1) + _string(None) + _string(None)
            + struct.pack(">bb", 1, 1))
    w.send_raw(_frame(29, 1, body))
    frame = w.recv_frame()
    return struct.unpack_from(">h", frame, 8)[0], frame


@pytest.mark.parametrize(("args", "create_code", "describe_code"), [
    ((), 54, 54),  # no authorizer: SECURITY_DISABLED, as Kafka without authorizer.class.name
    (("--authorizer",), 31, 31),  # no ACLs and allow.everyone off: ALTER/DESCRIBE on the cluster denied
    (("--authorizer", "--super-user", "User:ANONYMOUS"), 0, 0),
])
def test_acl_apis_need_the_authorizer_and_the_cluster(
    broker_factory: type[BrokerProcess], args: tuple[str, ...], create_code: int, describe_code: int
) -> None:
    broker = broker_factory(*args).start()
    with WireClient(broker.host, broker.port) as w:
        w.send_raw(_frame(30, 1, struct.pack(">i", 1) + _creation(2, "t", 3, "User:a", "*", 3, 3)))
        frame = w.recv_frame()
        assert struct.unpack_from(">h", frame, 12)[0] == create_code
        assert _describe_all(w)[0] == describe_code


def test_with_no_acls_and_allow_everyone_off_everything_is_denied_but_to_super_users(
    broker_factory: type[BrokerProcess],
) -> None:
    """Kafka's default (``allow.everyone.if.no.acl.found=false``): an authorizer with no ACLs
    denies every client but the super users, API by API."""
    seeded = broker_factory().start()  # a topic made before the authorizer is on
    with WireClient(seeded.host, seeded.port) as w:
        w.call(MetadataRequest_v5(topics=["seen"], allow_auto_topic_creation=True))
    assert seeded.stop() == 0
    for args, denied in ((("--authorizer",), True), (("--authorizer", "--super-user", "User:ANONYMOUS"), False)):
        broker = broker_factory(*args, data_dir=seeded.data_dir).start()
        with WireClient(broker.host, broker.port) as w:
            listed = [t[1] for t in w.call(MetadataRequest_v5(topics=None, allow_auto_topic_creation=False)).topics]
            assert listed == ([] if denied else ["seen"])
            created = w.call(CreateTopicsRequest_v2(create_topic_requests=[("new", 1, 1, [], [])], timeout=5_000,
                                                    validate_only=True)).topic_errors[0][1]
            assert created == (29 if denied else 0)
            broker_configs = w.call(DescribeConfigsRequest_v1(resources=[(4, "0", None)], include_synonyms=False))
            assert broker_configs.resources[0][0] == (31 if denied else 0)
            w.send_raw(_frame(35, 1, struct.pack(">i", -1)))  # DescribeLogDirs v1, every topic
            log_dirs = w.recv_frame()
            assert struct.unpack_from(">i", log_dirs, 8)[0] == (0 if denied else 1)  # results: none when denied
        assert broker.stop() == 0
