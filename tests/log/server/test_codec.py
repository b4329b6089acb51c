"""The wire codec: headers, every implemented version of every message, the ApiVersions
error reply, and that ``messages.py`` matches what the generator makes from the pinned kio."""

from __future__ import annotations

import dataclasses
import importlib.util
import struct
import types
import typing
from pathlib import Path

import pytest
from aiokafka.protocol import fetch as aiokafka_fetch
from aiokafka.protocol import produce as aiokafka_produce
from aiokafka.protocol.admin import ApiVersionResponse_v0
from aiokafka.protocol.metadata import MetadataRequest_v5
from aiokafka.protocol.produce import ProduceRequest_v7

from streamkit.log.records import NewRecord, build_batch, check_batch
from streamkit.log.segment import FileRange, Segment
from streamkit.log.server import apis, codec, frames
from streamkit.log.server.errors import MalformedRequestError
from streamkit.log.server.messages import (
    IMPLEMENTED,
    MESSAGES,
    FetchableTopicResponse,
    FetchAbortedTransaction,
    FetchPartitionData,
    FetchResponse,
    ProduceRequest,
)

MESSAGES_PY = Path(codec.__file__).with_name("messages.py")
GENERATOR = Path(__file__).resolve().parents[3] / "scripts" / "gen_messages.py"


def _generator() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gen_messages", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_messages_py_is_what_the_generator_makes() -> None:
    assert MESSAGES_PY.read_text() == _generator().generate(), (
        "regenerate: python scripts/gen_messages.py > streamkit/log/server/messages.py"
    )


def test_every_advertised_version_is_implemented_except_old_produce() -> None:
    for table in (apis.advertised(transactions=False), apis.advertised(transactions=True)):
        for key, (lo, hi) in table.items():
            for version in range(lo, hi + 1):
                if key == apis.PRODUCE and version < 3:
                    continue  # advertised for old librdkafka, refused if sent
                assert codec.is_implemented(key, version), (key, version)


def _sample(cls: type) -> object:
    """An instance of a messages.py class with every list holding one sample element."""
    hints = typing.get_type_hints(cls)
    values: dict[str, object] = {}
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        inner = hint
        if isinstance(hint, types.UnionType):  # X | None
            inner = next(a for a in typing.get_args(hint) if a is not type(None))
        if typing.get_origin(inner) is list:
            (item,) = typing.get_args(inner)
            values[field.name] = [_sample(item) if dataclasses.is_dataclass(item) else item()]
        elif dataclasses.is_dataclass(inner):
            values[field.name] = _sample(inner)  # type: ignore[arg-type]
    return cls(**values)


@pytest.mark.parametrize("api_key", sorted(MESSAGES))
def test_every_implemented_response_version_encodes(api_key: int) -> None:
    lo, hi = IMPLEMENTED[api_key]
    response_cls = MESSAGES[api_key][1]
    for version in range(lo, hi + 1):
        frame = codec.encode_response(codec.RequestHeader(api_key, version, 42, None), _sample(response_cls))
        size, correlation_id = struct.unpack_from(">ii", frame)
        assert size == len(frame) - 4 and correlation_id == 42


def _request_frame(request: object, correlation_id: int = 9) -> bytes:
    header = struct.pack(">hhih", request.API_KEY, request.API_VERSION, correlation_id, 3) + b"abc"  # type: ignore[attr-defined]
    return header + request.encode()  # type: ignore[attr-defined]


def test_decodes_requests_encoded_by_aiokafka() -> None:
    frame = _request_frame(ProduceRequest_v7(transactional_id=None, required_acks=-1, timeout=1500,
                                             topics=[("t", [(2, b"batch-bytes")])]))
    header = codec.peek_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (0, 7, 9, "abc")
    request = codec.decode_request(frame, header)
    assert isinstance(request, ProduceRequest)
    assert (request.acks, request.timeout_ms) == (-1, 1500)
    assert request.topic_data[0].partition_data[0].records == b"batch-bytes"
    metadata = codec.decode_request(frame := _request_frame(MetadataRequest_v5(topics=None, allow_auto_topic_creation=False)),
                                    codec.peek_header(frame))
    assert metadata.topics is None and metadata.allow_auto_topic_creation is False


def test_fetch_response_decodes_in_aiokafka_at_every_version() -> None:
    response = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[
        FetchPartitionData(partition_index=0, high_watermark=5, last_stable_offset=5, log_start_offset=0,
                           aborted_transactions=[], records=b"\x00" * 70)])])
    for version in range(4, 12):
        frame = codec.encode_response(codec.RequestHeader(1, version, 1, None), response)
        decoded = getattr(aiokafka_fetch, f"FetchResponse_v{version}").decode(frame[8:])
        topic, partitions = decoded.topics[0]
        assert topic == "t"
        assert partitions[0][:3] == (0, 0, 5)  # partition, error, high watermark
        assert partitions[0][-1] == b"\x00" * 70


def test_api_versions_error_reply_is_v0() -> None:
    frame = codec.encode_api_versions_error(7, [(18, 0, 3), (0, 0, 8)])
    assert struct.unpack_from(">ii", frame) == (len(frame) - 4, 7)
    response = ApiVersionResponse_v0.decode(frame[8:])
    assert response.error_code == 35
    assert list(response.api_versions) == [(18, 0, 3), (0, 0, 8)]


@pytest.mark.parametrize("frame", [b"", b"\x00\x03", struct.pack(">hhih", 3, 1, 1, 50) + b"short"])
def test_unreadable_headers_raise_malformed_request(frame: bytes) -> None:
    with pytest.raises(MalformedRequestError):
        codec.peek_header(frame)


def test_unreadable_bodies_raise_malformed_request() -> None:
    frame = struct.pack(">hhih", 3, 5, 1, -1) + struct.pack(">i", 3) + b"\x00"
    with pytest.raises(MalformedRequestError):
        codec.decode_request(frame, codec.peek_header(frame))


def _joined(parts: list[frames.Part]) -> bytes:
    return b"".join(p.read() if isinstance(p, FileRange) else bytes(p) for p in parts)


@pytest.mark.parametrize("version", range(4, 12))
def test_hand_written_fetch_response_is_byte_for_byte_kio(version: int, tmp_path: Path) -> None:
    """frames.encode_fetch_response (bytes and file ranges) against kio, at every version."""
    big = build_batch([NewRecord(None, b"v" * 1000, 1) for _ in range(100)])  # over 64 KiB
    seg = Segment.create(tmp_path, 0, 4096)
    seg.append(check_batch(big), big, 0, crc_checked=True)
    file_range = seg.read_range(0, 1 << 20)
    assert isinstance(file_range, FileRange)
    stored = file_range.read()
    records: list[frames.Records] = [b"", b"\x01" * 70, file_range, big, b""]
    kio_records = [b"", b"\x01" * 70, stored, big, b""]
    partitions = [
        FetchPartitionData(partition_index=i, error_code=3 if i == 4 else 0, high_watermark=10 + i,
                           last_stable_offset=9, log_start_offset=i, preferred_read_replica=-1,
                           aborted_transactions=None if i % 2 else [FetchAbortedTransaction(producer_id=7, first_offset=3)])
        for i in range(5)
    ]
    topics = [("first", partitions[:2]), ("second", partitions[2:])]
    answer = frames.FetchAnswer(
        FetchResponse(throttle_time_ms=5, session_id=0,
                      responses=[FetchableTopicResponse(topic=t, partitions=ps) for t, ps in topics]),
        records,
    )
    header = codec.RequestHeader(1, version, 77, None)
    parts = frames.encode_fetch_response(header, answer)
    assert any(isinstance(p, FileRange) for p in parts)  # the file range is not copied in
    with_records = FetchResponse(throttle_time_ms=5, session_id=0, responses=[
        FetchableTopicResponse(topic=t, partitions=[dataclasses.replace(p, records=kio_records[p.partition_index])
                                                    for p in ps])
        for t, ps in topics
    ])
    assert _joined(parts) == codec.encode_response(header, with_records)


@pytest.mark.parametrize("version", range(3, 9))
def test_hand_written_produce_decoder_agrees_with_kio(version: int) -> None:
    request_cls = getattr(aiokafka_produce, f"ProduceRequest_v{version}")
    big = b"\x07" * 100_000
    request = request_cls(transactional_id="tx", required_acks=-1, timeout=1500,
                          topics=[("t", [(2, b"batch-bytes"), (3, big)]), ("u", [(0, b"")])])
    frame = _request_frame(request)
    header = codec.peek_header(frame)
    expected = codec.decode_request(frame, header)
    for buffer in (frame, bytearray(frame)):
        got = frames.decode_produce_request(buffer, header)
        assert (got.transactional_id, got.acks, got.timeout_ms) == (
            expected.transactional_id, expected.acks, expected.timeout_ms)
        assert [(t.name, [(p.index, bytes(p.records) if p.records is not None else None)
                          for p in t.partition_data]) for t in got.topic_data] == [
            (t.name, [(p.index, p.records) for p in t.partition_data]) for t in expected.topic_data]
        assert isinstance(got.topic_data[0].partition_data[1].records, memoryview)  # not a copy


@pytest.mark.parametrize("cut", [1, 5, 20, 40])
def test_hand_written_produce_decoder_refuses_short_or_bad_frames(cut: int) -> None:
    frame = _request_frame(ProduceRequest_v7(transactional_id=None, required_acks=1, timeout=1,
                                             topics=[("t", [(0, b"x" * 30)])]))
    header = codec.peek_header(frame)
    with pytest.raises(MalformedRequestError):
        frames.decode_produce_request(frame[:-cut], header)
    bad_count = bytearray(frame)
    struct.pack_into(">i", bad_count, header.size_v1 + 2 + 2 + 4, -1)  # topic_data: null
    with pytest.raises(MalformedRequestError):
        frames.decode_produce_request(bytes(bad_count), header)
