"""Protocol-level behaviour of a real broker, driven over a raw socket with aiokafka's structs.

Version negotiation, the error paths (unknown API, unsupported versions, bad frames close the
connection), acks=0 sending nothing, idempotent producer checks, produce validation errors,
fetch completeness and long polling.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from pathlib import Path

import pytest
from aiokafka.protocol.admin import (
    ApiVersionRequest_v0,
    ApiVersionResponse_v0,
    CreateTopicsRequest_v2,
    DescribeConfigsRequest_v1,
)
from aiokafka.protocol.fetch import FetchRequest_v11
from aiokafka.protocol.metadata import MetadataRequest_v1, MetadataRequest_v5
from aiokafka.protocol.offset import OffsetRequest_v1
from aiokafka.protocol.produce import ProduceRequest_v3, ProduceRequest_v7
from aiokafka.protocol.transaction import InitProducerIdRequest_v0

from streamkit.log.records import NewRecord, build_batch, iter_batches
from tests.support.broker import STREAMKIT, BrokerProcess, WireClient

pytestmark = pytest.mark.timeout(60)

UNSUPPORTED_VERSION = 35


@pytest.fixture
def wire(broker: BrokerProcess) -> WireClient:
    client = WireClient(broker.host, broker.port)
    yield client  # type: ignore[misc]
    client.close()


def create_topic(wire: WireClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> int:
    response = wire.call(
        CreateTopicsRequest_v2(
            create_topic_requests=[(name, partitions, 1, [], list((configs or {}).items()))],
            timeout=10_000,
            validate_only=False,
        )
    )
    return int(response.topic_errors[0][1])


def produce(wire: WireClient, topic: str, batch: bytes, *, partition: int = 0, acks: int = 1) -> tuple[int, int]:
    """(error code, base offset) of producing one batch with Produce v7."""
    response = wire.call(
        ProduceRequest_v7(
            transactional_id=None, required_acks=acks, timeout=10_000, topics=[(topic, [(partition, batch)])]
        )
    )
    part = response.topics[0][1][0]
    return int(part[1]), int(part[2])


def latest_offset(wire: WireClient, topic: str, partition: int = 0) -> int:
    response = wire.call(OffsetRequest_v1(replica_id=-1, topics=[(topic, [(partition, -1)])]))
    return int(response.topics[0][1][0][3])


def batch(*values: bytes, producer_id: int = -1, epoch: int = -1, sequence: int = -1) -> bytes:
    records = [NewRecord(None, v, 1_700_000_000_000 + i) for i, v in enumerate(values)]
    return build_batch(records, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


# -- version negotiation -------------------------------------------------------------------


def test_api_versions_lists_the_recommended_table(wire: WireClient) -> None:
    response = wire.call(ApiVersionRequest_v0())
    assert response.error_code == 0
    table = {key: (lo, hi) for key, lo, hi in response.api_versions}
    assert table[0] == (0, 8)  # Produce from 0, for old librdkafka's compression check
    assert table[1] == (4, 11)
    assert table[18] == (0, 3)
    assert table[11] == (0, 5)
    assert not {23, 60, 68, 71, 72} & set(table)  # never advertise what is not implemented


def test_api_versions_above_ours_gets_a_v0_error_listing_key_18(wire: WireClient) -> None:
    # kafka-python opens with ApiVersions v4: flexible header v2, compact strings, tags.
    name, version = b"kafka-python", b"3.0"
    body = bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version + b"\x00"
    header = struct.pack(">hhih", 18, 4, 77, 2) + b"kp" + b"\x00"
    wire.send_raw(struct.pack(">i", len(header + body)) + header + body)
    frame = wire.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == 77
    response = ApiVersionResponse_v0.decode(frame[4:])
    assert response.error_code == UNSUPPORTED_VERSION
    table = {key: (lo, hi) for key, lo, hi in response.api_versions}
    assert table[18] == (0, 3)


def test_api_versions_v3_flexible_request_is_answered(wire: WireClient) -> None:
    name, version = b"librdkafka", b"2.16"
    body = bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version + b"\x00"
    header = struct.pack(">hhih", 18, 3, 5, 3) + b"rdk" + b"\x00"
    wire.send_raw(struct.pack(">i", len(header + body)) + header + body)
    frame = wire.recv_frame()
    # Response header v0 (no tag byte) even though v3 is flexible; then error_code 0.
    correlation_id, error_code = struct.unpack_from(">ih", frame)
    assert (correlation_id, error_code) == (5, 0)


@pytest.mark.parametrize(
    "api_key,version",
    [(68, 0), (999, 0), (-1, 0), (1, 0), (1, 12), (3, 9), (0, 2), (0, 9), (23, 2)],
    ids=["consumer-group-heartbeat", "key-999", "key-minus-1", "fetch-v0", "fetch-v12",
         "metadata-v9", "produce-v2", "produce-v9", "offset-for-leader-epoch"],
)
def test_unserved_api_or_version_closes_the_connection(wire: WireClient, api_key: int, version: int) -> None:
    frame = struct.pack(">hhih", api_key, version, 1, -1) + b"\x00" * 16
    wire.send_raw(struct.pack(">i", len(frame)) + frame)
    assert wire.is_closed_by_peer()


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">i", 200 * 1024 * 1024),  # above the frame limit
        struct.pack(">i", -5),
        struct.pack(">i", 3) + b"abc",  # too short for a header
        struct.pack(">i", 12) + struct.pack(">hhih", 3, 5, 1, 40) + b"ab",  # client id runs out
        struct.pack(">i", 10) + struct.pack(">hhih", 3, 5, 1, -1),  # metadata body missing
    ],
    ids=["oversize", "negative", "tiny", "short-client-id", "no-body"],
)
def test_bad_frames_close_the_connection(wire: WireClient, broker: BrokerProcess, payload: bytes) -> None:
    wire.send_raw(payload)
    assert wire.is_closed_by_peer()
    with WireClient(broker.host, broker.port) as other:
        assert other.call(ApiVersionRequest_v0()).error_code == 0


# -- produce -------------------------------------------------------------------------------


def test_acks_0_sends_no_response(wire: WireClient, unique: str) -> None:
    assert create_topic(wire, unique) == 0
    wire.send(ProduceRequest_v3(transactional_id=None, required_acks=0, timeout=1000,
                                topics=[(unique, [(0, batch(b"fire-and-forget"))])]))
    sent = wire.send(MetadataRequest_v1(topics=[unique]))
    got, response = wire.recv(MetadataRequest_v1(topics=[]))
    assert got == sent  # the next frame answers the metadata request, not the produce
    assert response.topics[0][1] == unique
    assert latest_offset(wire, unique) == 1


def test_idempotent_retry_is_not_written_twice(wire: WireClient, unique: str) -> None:
    assert create_topic(wire, unique) == 0
    init = wire.call(InitProducerIdRequest_v0(transactional_id=None, transaction_timeout_ms=60_000))
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch
    first = batch(b"a", b"b", b"c", producer_id=pid, epoch=epoch, sequence=0)
    assert produce(wire, unique, first) == (0, 0)
    assert produce(wire, unique, first) == (0, 0)  # the retry: same offsets, nothing appended
    assert latest_offset(wire, unique) == 3
    second = batch(b"d", producer_id=pid, epoch=epoch, sequence=3)
    assert produce(wire, unique, second) == (0, 3)
    assert produce(wire, unique, first) == (0, 0)  # still recognised among the last five
    assert latest_offset(wire, unique) == 4


def test_idempotent_sequence_errors(wire: WireClient, unique: str) -> None:
    assert create_topic(wire, unique) == 0
    pid = wire.call(InitProducerIdRequest_v0(transactional_id=None, transaction_timeout_ms=60_000)).producer_id
    assert produce(wire, unique, batch(b"a", producer_id=pid, epoch=0, sequence=0))[0] == 0
    assert produce(wire, unique, batch(b"gap", producer_id=pid, epoch=0, sequence=5))[0] == 45
    assert produce(wire, unique, batch(b"new", producer_id=pid, epoch=1, sequence=0))[0] == 0
    assert produce(wire, unique, batch(b"stale", producer_id=pid, epoch=0, sequence=1))[0] == 47
    assert produce(wire, unique, batch(b"who", producer_id=pid + 1000, epoch=0, sequence=7))[0] == 59
    assert latest_offset(wire, unique) == 2


def test_produce_validation_errors_are_per_partition(wire: WireClient, unique: str) -> None:
    assert create_topic(wire, unique, partitions=2, configs={"max.message.bytes": "2000"}) == 0
    good = batch(b"ok")
    corrupt = bytearray(batch(b"bad crc"))
    corrupt[-1] ^= 0xFF
    response = wire.call(
        ProduceRequest_v7(
            transactional_id=None, required_acks=-1, timeout=10_000,
            topics=[
                (unique, [(0, good), (1, bytes(corrupt)), (7, good)]),
                ("no-such-topic-" + unique, [(0, good)]),
            ],
        )
    )
    codes = {(t, p[0]): p[1] for t, parts in response.topics for p in parts}
    assert codes[(unique, 0)] == 0
    assert codes[(unique, 1)] == 2  # CORRUPT_MESSAGE
    assert codes[(unique, 7)] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert codes[("no-such-topic-" + unique, 0)] == 3
    assert produce(wire, unique, batch(b"x" * 5000))[0] == 10  # MESSAGE_TOO_LARGE
    assert produce(wire, unique, good + good)[0] == 87  # INVALID_RECORD: two batches


def test_zstd_needs_produce_v7(wire: WireClient, unique: str) -> None:
    assert create_topic(wire, unique) == 0
    zstd = build_batch([NewRecord(None, b"z" * 100, 1)], compression_codec=4)
    response = wire.call(ProduceRequest_v3(transactional_id=None, required_acks=1, timeout=1000,
                                           topics=[(unique, [(0, zstd)])]))
    assert response.topics[0][1][0][1] == 76  # UNSUPPORTED_COMPRESSION_TYPE
    assert produce(wire, unique, zstd)[0] == 0


# -- metadata and configs ------------------------------------------------------------------


def test_metadata_all_none_and_auto_create(wire: WireClient, unique: str) -> None:
    controller = wire.call(MetadataRequest_v5(topics=[], allow_auto_topic_creation=False))
    assert controller.topics == []
    assert controller.controller_id == controller.brokers[0][0]
    missing = wire.call(MetadataRequest_v5(topics=[unique + "-no"], allow_auto_topic_creation=False))
    assert missing.topics[0][0] == 3
    created = wire.call(MetadataRequest_v5(topics=[unique], allow_auto_topic_creation=True))
    assert created.topics[0][0] == 0 and len(created.topics[0][3]) == 1
    everything = wire.call(MetadataRequest_v1(topics=None))
    names = {t[1] for t in everything.topics}
    assert unique in names and "__consumer_offsets" not in names
    invalid = wire.call(MetadataRequest_v5(topics=["bad name!"], allow_auto_topic_creation=True))
    assert invalid.topics[0][0] == 17


def test_describe_configs_returns_every_entry(wire: WireClient, unique: str) -> None:
    assert create_topic(wire, unique, configs={"retention.ms": "12345"}) == 0
    response = wire.call(DescribeConfigsRequest_v1(resources=[(2, unique, None), (4, "0", None)], include_synonyms=False))
    topic, broker_resource = response.resources
    assert topic[0] == 0
    entries = {e[0]: (e[1], e[3]) for e in topic[4]}  # name: (value, config_source)
    assert entries["retention.ms"] == ("12345", 1)  # DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG
    assert len(entries) >= 12
    assert broker_resource[0] == 0 and broker_resource[4]


# -- fetch ---------------------------------------------------------------------------------


def fetch(wire: WireClient, parts: list[tuple[str, int, int]], *, max_wait_ms: int = 0, min_bytes: int = 1) -> dict[tuple[str, int], tuple[int, int, bytes]]:
    topics: dict[str, list[tuple[int, int, int, int, int]]] = {}
    for topic, partition, offset in parts:
        topics.setdefault(topic, []).append((partition, -1, offset, -1, 1024 * 1024))
    response = wire.call(FetchRequest_v11(
        replica_id=-1, max_wait_time=max_wait_ms, min_bytes=min_bytes, max_bytes=50 * 1024 * 1024,
        isolation_level=1, session_id=0, session_epoch=-1, topics=list(topics.items()),
        forgotten_topics_data=[], rack_id="",
    ))
    out = {}
    for topic, partitions in response.topics:
        for p in partitions:
            out[(topic, p[0])] = (p[1], p[2], p[-1])  # error, high watermark, records
    return out


def test_fetch_lists_every_requested_partition(wire: WireClient, unique: str) -> None:
    assert create_topic(wire, unique, partitions=3) == 0
    produce(wire, unique, batch(b"one", b"two"), partition=1)
    result = fetch(wire, [(unique, 0, 0), (unique, 1, 1), (unique, 2, 5), (unique, 9, 0), ("nope-" + unique, 0, 0)])
    assert set(result) == {(unique, 0), (unique, 1), (unique, 2), (unique, 9), ("nope-" + unique, 0)}
    assert result[(unique, 0)] == (0, 0, b"")
    error, hw, records = result[(unique, 1)]
    assert (error, hw) == (0, 2)
    assert records.startswith(struct.pack(">q", 0))  # the whole batch from its base offset 0
    assert result[(unique, 2)][0] == 1  # OFFSET_OUT_OF_RANGE
    assert result[(unique, 9)][0] == 3
    assert result[("nope-" + unique, 0)][0] == 3


def test_fetch_long_polls_until_data_or_max_wait(wire: WireClient, broker: BrokerProcess, unique: str) -> None:
    assert create_topic(wire, unique) == 0
    started = time.monotonic()
    assert fetch(wire, [(unique, 0, 0)], max_wait_ms=400)[(unique, 0)] == (0, 0, b"")
    assert time.monotonic() - started >= 0.35
    # A fetch parked on an empty partition returns as soon as another connection appends.
    wire.send(FetchRequest_v11(
        replica_id=-1, max_wait_time=20_000, min_bytes=1, max_bytes=1024 * 1024, isolation_level=0,
        session_id=0, session_epoch=-1, topics=[(unique, [(0, -1, 0, -1, 1024 * 1024)])],
        forgotten_topics_data=[], rack_id="",
    ))
    time.sleep(0.2)
    started = time.monotonic()
    with WireClient(broker.host, broker.port) as producer:
        assert produce(producer, unique, batch(b"wake up"))[0] == 0
    _, response = wire.recv(FetchRequest_v11(replica_id=-1, max_wait_time=0, min_bytes=0, max_bytes=0,
                                             isolation_level=0, session_id=0, session_epoch=-1, topics=[],
                                             forgotten_topics_data=[], rack_id=""))
    assert time.monotonic() - started < 5
    assert response.topics[0][1][0][-1]  # records arrived


# -- the command line ----------------------------------------------------------------------


def test_advertised_host_is_what_metadata_and_find_coordinator_return(
    broker_factory: type[BrokerProcess],
) -> None:
    from aiokafka.protocol.coordination import FindCoordinatorRequest_v1

    proc = broker_factory("--advertised-host", "broker.example").start(same_port=False)
    with WireClient(proc.host, proc.port) as client:
        metadata = client.call(MetadataRequest_v1(topics=[]))
        assert [(b[1], b[2]) for b in metadata.brokers] == [("broker.example", proc.port)]
        coordinator = client.call(FindCoordinatorRequest_v1(coordinator_key="g", coordinator_type=0))
        assert (coordinator.host, coordinator.port) == ("broker.example", proc.port)
    assert proc.stop() == 0


def test_second_broker_on_a_used_port_or_data_dir_fails_with_one_line(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    import subprocess

    same_port = subprocess.run(
        [str(STREAMKIT), "broker", "--data-dir", str(tmp_path / "other"),
         "--port", str(broker.port)],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert same_port.returncode != 0
    assert "cannot listen on 127.0.0.1" in same_port.stderr
    assert "Traceback" not in same_port.stderr
    same_dir = subprocess.run(
        [str(STREAMKIT), "broker", "--data-dir", str(broker.data_dir), "--port", "0"],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert same_dir.returncode != 0
    assert "in use by another process" in same_dir.stderr
    assert "Traceback" not in same_dir.stderr


# -- fetch from verified file ranges (sendfile) --------------------------------------------


def big_batch(tag: int, count: int = 200) -> bytes:
    return batch(*[bytes([65 + tag % 26]) * 500 + b"%d" % i for i in range(count)])


def stamped(data: bytes, base_offset: int) -> bytes:
    return struct.pack(">q", base_offset) + data[8:]


def read_all(wire: WireClient, topic: str, end: int, *, partition: int = 0) -> bytes:
    out, offset = b"", 0
    while offset < end:
        error, _hw, records = fetch(wire, [(topic, partition, offset)])[(topic, partition)]
        assert error == 0 and records
        out += records
        offset = list(iter_batches(records))[-1][1].next_offset
    return out


def test_fetch_sends_exactly_the_produced_batches(wire: WireClient, unique: str) -> None:
    assert create_topic(wire, unique, partitions=2) == 0
    sent = [big_batch(i) for i in range(8)]
    expected, base = b"", 0
    for data in sent:
        assert produce(wire, unique, data) == (0, base)
        expected += stamped(data, base)
        base += 200
    assert produce(wire, unique, batch(b"small"), partition=1) == (0, 0)
    assert read_all(wire, unique, base) == expected
    assert read_all(wire, unique, base) == expected  # the same again, now from checked ranges
    # Both partitions in one response, from a later offset (the middle of the partition).
    result = fetch(wire, [(unique, 0, 1000), (unique, 1, 0)])
    assert result[(unique, 0)][2] == expected[len(expected) // 8 * 5:][: len(result[(unique, 0)][2])]
    assert result[(unique, 0)][2].startswith(stamped(sent[5], 1000))
    assert result[(unique, 1)][2] == stamped(batch(b"small"), 0)


def test_a_segment_damaged_while_the_broker_was_down_is_not_served(broker_factory: type[BrokerProcess]) -> None:
    broker = broker_factory().start(same_port=False)
    sent = [big_batch(i) for i in range(4)]
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, "damaged") == 0
        for i, data in enumerate(sent):
            assert produce(client, "damaged", data) == (0, 200 * i)
    assert broker.stop() == 0
    log = broker.data_dir / "damaged-0" / f"{0:020d}.log"
    raw = bytearray(log.read_bytes())
    positions = [pos for pos, _h in iter_batches(bytes(raw))]
    raw[positions[2] + 300] ^= 0x20  # a value byte of the third batch
    log.write_bytes(bytes(raw))
    broker.start(same_port=False)
    with WireClient(broker.host, broker.port) as client:
        for _ in range(2):  # the second fetch of the good batches comes from checked ranges
            first = fetch(client, [("damaged", 0, 0)])[("damaged", 0)]
            assert first[0] == 0
            assert first[2] == b"".join(stamped(d, 200 * i) for i, d in enumerate(sent[:2]))
    for _ in range(2):  # refused every time: a failed check verifies nothing
        with WireClient(broker.host, broker.port) as client, pytest.raises(ConnectionError, match="closed"):
            fetch(client, [("damaged", 0, 400)])
    assert broker.alive()


# -- connections that stall ------------------------------------------------------------------


def _wait_all_closed(socks: list[socket.socket], timeout_s: float) -> int:
    """Wait until the broker closed every socket of ``socks`` (at most ``timeout_s``); how many it did."""
    open_socks = {s.fileno(): s for s in socks}
    poller = select.poll()
    for fd in open_socks:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout_s
    while open_socks and time.monotonic() < deadline:
        for fd, _event in poller.poll(200):
            try:
                data = open_socks[fd].recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                poller.unregister(fd)
                del open_socks[fd]
    return len(socks) - len(open_socks)


def test_half_sent_requests_do_not_hold_connection_slots(broker_factory: type[BrokerProcess]) -> None:
    # More stalled clients than --max-connections (1024, the default): each sends the first
    # half of a Metadata request and stops. The request timeout closes them, so the slots free up.
    proc = broker_factory("--request-timeout-ms", "1000").start(same_port=False)
    frame = struct.pack(">hhih", 3, 5, 1, -1) + struct.pack(">i", -1) + b"\x00"
    half = struct.pack(">i", len(frame)) + frame[: len(frame) // 2]
    stalled = []
    try:
        for _ in range(1030):
            sock = socket.create_connection((proc.host, proc.port), timeout=10)
            sock.sendall(half)
            stalled.append(sock)
        assert _wait_all_closed(stalled, timeout_s=60) == len(stalled)
    finally:
        for sock in stalled:
            sock.close()
    with WireClient(proc.host, proc.port) as client:
        assert client.call(ApiVersionRequest_v0()).error_code == 0
    assert proc.stop() == 0
    assert "an incomplete request" in proc.stderr()


def test_idle_connections_close_but_slow_requests_and_long_polls_do_not(
    broker_factory: type[BrokerProcess], unique: str
) -> None:
    proc = broker_factory("--request-timeout-ms", "1500", "--connections-max-idle-ms", "1500").start(same_port=False)
    with WireClient(proc.host, proc.port) as idle, WireClient(proc.host, proc.port) as busy:
        assert create_topic(busy, unique) == 0
        # A fetch parked longer than the idle timeout is a request in progress, not idleness.
        assert fetch(busy, [(unique, 0, 0)], max_wait_ms=3000)[(unique, 0)] == (0, 0, b"")
        # A request that arrives in pieces, each well within the request timeout, is served.
        request = ApiVersionRequest_v0()
        busy.correlation_id += 1
        header = struct.pack(">hhih", request.API_KEY, request.API_VERSION, busy.correlation_id, 4) + b"slow"
        body = header + request.encode()
        framed = struct.pack(">i", len(body)) + body
        for i in range(0, len(framed), 6):
            busy.send_raw(framed[i : i + 6])
            time.sleep(0.05)
        assert ApiVersionResponse_v0.decode(busy.recv_frame()[4:]).error_code == 0
        # The connection that never sent a request has been closed by now, or soon will be.
        assert idle.is_closed_by_peer(timeout_s=30)
    assert proc.stop() == 0
    assert "idle for" in proc.stderr()
