"""Fuzzing: thousands of random and mutated frames on many connections must not hurt the broker.

Seeds are valid requests encoded by aiokafka; each frame sent is a seed mutated (bytes
flipped, cut short, extended, size field lied about), a seed's header with a random body, or
pure garbage. Afterwards the broker process must still be running, must not have logged a
traceback (a handler that raised on decoded-but-odd input), and must serve a well-behaved
aiokafka producer and consumer. Bounded in frames and in time; the seed is fixed so a
failure reproduces.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.protocol.admin import (
    ApiVersionRequest_v0,
    DescribeAclsRequest_v1,
    DescribeConfigsRequest_v1,
    DescribeGroupsRequest_v0,
    ListGroupsRequest_v0,
)
from aiokafka.protocol.commit import OffsetCommitRequest_v2, OffsetFetchRequest_v1
from aiokafka.protocol.coordination import FindCoordinatorRequest_v0
from aiokafka.protocol.fetch import FetchRequest_v4, FetchRequest_v11
from aiokafka.protocol.group import (
    HeartbeatRequest_v0,
    JoinGroupRequest_v0,
    JoinGroupRequest_v5,
    LeaveGroupRequest_v0,
    SyncGroupRequest_v0,
)
from aiokafka.protocol.metadata import MetadataRequest_v1, MetadataRequest_v5
from aiokafka.protocol.offset import OffsetRequest_v1
from aiokafka.protocol.produce import ProduceRequest_v3, ProduceRequest_v7
from aiokafka.protocol.transaction import (
    AddOffsetsToTxnRequest_v0,
    AddPartitionsToTxnRequest_v0,
    EndTxnRequest_v0,
    InitProducerIdRequest_v0,
    TxnOffsetCommitRequest_v0,
)
from aiokafka.protocol.types import Array, Boolean, Bytes, Int8, Int16, Int32, Int64, Schema, String
from test_protocol import batch

from tests.support.broker import BrokerProcess

pytestmark = pytest.mark.timeout(180)

FRAMES = 3000
CONNECTIONS_AT_ONCE = 32
VALUE_FUZZ_CONNECTIONS = 600
TIME_BUDGET_S = 60
SEED = int(os.environ.get("STREAMKIT_FUZZ_SEED", "20240601"))


def _request_types() -> list[type]:
    return [
        ApiVersionRequest_v0, MetadataRequest_v1, MetadataRequest_v5, ProduceRequest_v3, ProduceRequest_v7,
        FetchRequest_v4, FetchRequest_v11, OffsetRequest_v1, DescribeConfigsRequest_v1,
        InitProducerIdRequest_v0, FindCoordinatorRequest_v0, OffsetCommitRequest_v2, OffsetFetchRequest_v1,
        JoinGroupRequest_v0, JoinGroupRequest_v5, HeartbeatRequest_v0, SyncGroupRequest_v0,
        LeaveGroupRequest_v0, ListGroupsRequest_v0, DescribeGroupsRequest_v0,
        AddPartitionsToTxnRequest_v0, AddOffsetsToTxnRequest_v0, TxnOffsetCommitRequest_v0, EndTxnRequest_v0,
        DescribeAclsRequest_v1,
    ]


_INT_RANGES = {Int8: 8, Int16: 16, Int32: 32, Int64: 64}


def random_value(rng: random.Random, kind: object, depth: int = 0) -> object:
    """A random value of an aiokafka protocol type, biased towards edge cases."""
    if isinstance(kind, Schema):
        return tuple(random_value(rng, field, depth + 1) for field in kind.fields)
    if isinstance(kind, Array):
        if rng.random() < 0.03:
            return None
        return [random_value(rng, kind.array_of, depth + 1) for _ in range(rng.randint(0, 3 if depth < 3 else 1))]
    if isinstance(kind, String):
        if rng.random() < 0.03:
            return None
        return rng.choice(["", "fuzz", "fuzz", "fuzz-group", "fuzz-txn", "x" * rng.randint(1, 300), "\u00e9t\u00e9"])
    if kind is Bytes:
        return rng.choice([None, b"", rng.randbytes(rng.randint(1, 100)), batch(b"v"), batch(b"v"), batch(b"v") * 2])
    if kind is Boolean:
        return rng.random() < 0.5
    bits = _INT_RANGES[kind]  # type: ignore[index]
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return rng.choice([0, 1, -1, 2, low, high, rng.randint(low, high), rng.randint(-5, 100)])


def _frame(request: object, correlation_id: int = 1) -> bytes:
    header = struct.pack(">hhih", request.API_KEY, request.API_VERSION, correlation_id, 4) + b"fuzz"  # type: ignore[attr-defined]
    body = header + request.encode()  # type: ignore[attr-defined]
    return body


def seeds() -> list[bytes]:
    records = batch(b"fuzz-a", b"fuzz-b")
    return [
        _frame(ApiVersionRequest_v0()),
        _frame(MetadataRequest_v1(topics=["fuzz"])),
        _frame(MetadataRequest_v5(topics=None, allow_auto_topic_creation=False)),
        _frame(ProduceRequest_v7(transactional_id=None, required_acks=1, timeout=100, topics=[("fuzz", [(0, records)])])),
        _frame(ProduceRequest_v3(transactional_id=None, required_acks=0, timeout=100, topics=[("fuzz", [(0, records)])])),
        _frame(FetchRequest_v11(replica_id=-1, max_wait_time=10, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                                session_id=0, session_epoch=-1, topics=[("fuzz", [(0, -1, 0, -1, 1 << 20)])],
                                forgotten_topics_data=[], rack_id="")),
        _frame(FetchRequest_v4(replica_id=-1, max_wait_time=10, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                               topics=[("fuzz", [(0, 0, 1 << 20)])])),
        _frame(OffsetRequest_v1(replica_id=-1, topics=[("fuzz", [(0, -1), (0, -2), (0, 5)])])),
        _frame(DescribeConfigsRequest_v1(resources=[(2, "fuzz", None), (4, "0", ["num.partitions"])], include_synonyms=False)),
        _frame(InitProducerIdRequest_v0(transactional_id=None, transaction_timeout_ms=1000)),
        _frame(InitProducerIdRequest_v0(transactional_id="fuzz-txn", transaction_timeout_ms=1000)),
        _frame(AddPartitionsToTxnRequest_v0(transactional_id="fuzz-txn", producer_id=0, producer_epoch=0,
                                            topics=[("fuzz", [0])])),
        _frame(AddOffsetsToTxnRequest_v0(transactional_id="fuzz-txn", producer_id=0, producer_epoch=0,
                                         group_id="fuzz-group")),
        _frame(TxnOffsetCommitRequest_v0(transactional_id="fuzz-txn", group_id="fuzz-group", producer_id=0,
                                         producer_epoch=0, topics=[("fuzz", [(0, 1, "m")])])),
        _frame(EndTxnRequest_v0(transactional_id="fuzz-txn", producer_id=0, producer_epoch=0,
                                transaction_result=True)),
        _frame(FindCoordinatorRequest_v0("fuzz-group")),
        _frame(OffsetCommitRequest_v2(consumer_group="fuzz-group", consumer_group_generation_id=-1,
                                      consumer_id="", retention_time=-1, topics=[("fuzz", [(0, 1, "m")])])),
        _frame(OffsetFetchRequest_v1(consumer_group="fuzz-group", topics=[("fuzz", [0, 1])])),
        _frame(JoinGroupRequest_v0(group="fuzz-group", session_timeout=6000, member_id="",
                                   protocol_type="consumer", group_protocols=[("range", b"meta")])),
        _frame(JoinGroupRequest_v5(group="fuzz-group-5", session_timeout=6000, rebalance_timeout=6000,
                                   member_id="", group_instance_id=None, protocol_type="consumer",
                                   group_protocols=[("range", b"meta")])),
        _frame(HeartbeatRequest_v0(group="fuzz-group", generation_id=1, member_id="x")),
        _frame(SyncGroupRequest_v0(group="fuzz-group", generation_id=1, member_id="x", group_assignment=[])),
        _frame(LeaveGroupRequest_v0(group="fuzz-group", member_id="x")),
        _frame(ListGroupsRequest_v0()),
        _frame(DescribeGroupsRequest_v0(groups=["fuzz-group", ""])),
        _frame(DescribeAclsRequest_v1(resource_type=1, resource_name=None, resource_pattern_type_filter=1,
                                      principal=None, host=None, operation=1, permission_type=1)),
        # The APIs of Kafka's tools aiokafka has no structs for, by hand. DescribeLogDirs v1:
        # [("fuzz", [0, 1])]; then flexible ones (header v2: a tagged-field byte; compact
        # arrays and strings, length + 1): ListTransactions v1 (states ["Ongoing"], no producer
        # ids, duration -1) and DescribeTransactions v0 (["fuzz-txn"]).
        _header(35, 1) + struct.pack(">ih4si2i", 1, 4, b"fuzz", 2, 0, 1),
        _header(66, 1) + b"\x00\x02\x08Ongoing\x01" + struct.pack(">q", -1) + b"\x00",
        _header(65, 0) + b"\x00\x02\x09fuzz-txn\x00",
    ]


def _header(api_key: int, version: int) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, 4) + b"fuzz"


def mutate(rng: random.Random, seed: bytes) -> bytes:
    """One fuzzed frame, size prefix included."""
    kind = rng.random()
    data = bytearray(seed)
    if kind < 0.35:  # flip a few bytes
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind < 0.5:  # cut short
        data = data[: rng.randrange(len(data))]
    elif kind < 0.6:  # trailing junk
        data += rng.randbytes(rng.randint(1, 64))
    elif kind < 0.75:  # a valid header, a random body
        data = data[:14] + rng.randbytes(rng.randint(0, 200))
    elif kind < 0.85:  # interesting integers written over a field
        pos = rng.randrange(max(1, len(data) - 4))
        value = rng.choice([0, -1, 1, 0x7FFFFFFF, -0x80000000, 0x7FFF, -0x8000])
        data[pos : pos + 4] = struct.pack(">i", value)
    elif kind < 0.95:  # pure garbage
        data = bytearray(rng.randbytes(rng.randint(0, 300)))
    else:  # a lie about the size
        return struct.pack(">i", rng.choice([-1, 0, 7, len(data) + 50, 1 << 30])) + bytes(data)
    return struct.pack(">i", len(data)) + bytes(data)


def blast(host: str, port: int, frames: list[bytes], deadline: float) -> None:
    """Send ``frames`` back to back on one connection, read what comes back briefly, close."""
    if time.monotonic() > deadline:
        return
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            for frame in frames:
                sock.sendall(frame)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(0.3)
            try:
                while sock.recv(65536):
                    pass
            except (TimeoutError, OSError):
                pass
    except OSError:
        pass  # the broker closed on us mid-send: expected for bad frames


async def test_fuzzed_frames_never_hurt_the_broker(broker_factory: type[BrokerProcess]) -> None:
    broker = broker_factory("--no-auto-create-topics").start(same_port=False)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    await producer.stop()  # nothing yet; just proves the broker is up
    rng = random.Random(SEED)
    base = seeds()
    started = time.monotonic()
    sent = 0
    # Most bad frames close their connection, so each connection carries a few valid requests,
    # then fuzzed frames (usually only the first is read), then a valid one.
    scripts = []
    while sent < FRAMES:
        fuzzed = [mutate(rng, rng.choice(base)) for _ in range(rng.choice([1, 1, 1, 2, 5]))]
        valid = [struct.pack(">i", len(f)) + f for f in rng.sample(base, rng.randint(0, 3))]
        sent += len(fuzzed)
        scripts.append(valid + fuzzed + [struct.pack(">i", len(base[0])) + base[0]])
    with ThreadPoolExecutor(max_workers=CONNECTIONS_AT_ONCE) as pool:
        deadline = started + TIME_BUDGET_S
        jobs = [pool.submit(blast, broker.host, broker.port, frames, deadline) for frames in scripts]
        for job in jobs:
            job.result(timeout=TIME_BUDGET_S + 30)
    assert sent >= 1000
    assert broker.alive(), broker.stderr()

    # A well-behaved client is still served, promptly.
    topic = "after-the-fuzz"
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 2, 1)])
        await admin.close()
        for i in range(100):
            await producer.send(topic, b"%d" % i)
        await asyncio.wait_for(producer.flush(), 30)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="after",
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        values: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(values) < 100:
            assert time.monotonic() < deadline
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                values.update(m.value for m in messages)
    finally:
        await consumer.stop()
    assert values == {b"%d" % i for i in range(100)}
    assert broker.stop() == 0
    assert "Traceback" not in broker.stderr(), broker.stderr()[-5000:]


async def test_well_formed_requests_with_odd_values_never_hurt_the_broker(
    broker_factory: type[BrokerProcess],
) -> None:
    """Requests that decode fine but carry edge-case values (negative partitions, huge sizes,
    null arrays, unknown ids) reach the handlers; each must answer or close, never crash."""
    broker = broker_factory("--no-auto-create-topics").start(same_port=False)
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic("fuzz", 3, 1)])  # so produce and fetch reach real partitions
    await admin.close()
    rng = random.Random(SEED + 1)
    types = _request_types()
    scripts = []
    for _ in range(VALUE_FUZZ_CONNECTIONS):
        frames = []
        for _ in range(rng.randint(1, 6)):
            cls = rng.choice(types)
            try:
                request = cls(*random_value(rng, cls.SCHEMA))
                frame = _frame(request, rng.randint(0, 1000))
            except (ValueError, struct.error, TypeError):
                continue  # a value aiokafka itself cannot encode (e.g. null in a non-null field)
            frames.append(struct.pack(">i", len(frame)) + frame)
        scripts.append(frames)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=CONNECTIONS_AT_ONCE) as pool:
        deadline = started + TIME_BUDGET_S
        for job in [pool.submit(blast, broker.host, broker.port, frames, deadline) for frames in scripts]:
            job.result(timeout=TIME_BUDGET_S + 30)
    assert broker.alive(), broker.stderr()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic("still-fine", 1, 1)])
        await admin.close()
        await asyncio.wait_for(producer.send_and_wait("still-fine", b"ok"), 30)
    finally:
        await producer.stop()
    assert broker.stop() == 0
    assert "Traceback" not in broker.stderr(), broker.stderr()[-8000:]
