"""Kafka RecordBatch v2 codec: properties, interoperability with real clients, hostile input.

Interoperability runs both ways against the clients' own encoders and decoders, no mocks:
aiokafka (its C extension and its pure-Python classes) and kafka-python.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any

import aiokafka.record.default_records as aio_default
import aiokafka.record.memory_records as aio_memory
import hypothesis.strategies as st
import kafka.codec
import kafka.record.default_records as kp_default
import kafka.record.memory_records as kp_memory
import kafka.record.util as kp_util
import pytest
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER, ControlRecord
from hypothesis import HealthCheck, example, given, settings

from streamkit._core.errors import StreamkitError
from streamkit.log import compression
from streamkit.log.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from streamkit.log.errors import CorruptRecordError, InvalidRecordError
from streamkit.log.records import (
    ATTR_LOG_APPEND_TIME,
    BATCH_OVERHEAD,
    BatchBuilder,
    BatchHeader,
    NewRecord,
    Record,
    batch_extent,
    build_batch,
    check_batch,
    control_batch,
    crc32c,
    decode_batch,
    decode_batches,
    decode_records,
    iter_batches,
    parse_header,
    read_varint,
    varint_size,
    with_base_offset,
    write_varint,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MAX = 2**31 - 1
CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
CODEC_IDS = [compression.CODEC_NAMES[c] for c in CODECS]
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The batch header, packed independently of the code under test.
HEADER = struct.Struct(">qiibIhiqqqhii")

# --- strategies ------------------------------------------------------------------------------

# Short and long bytes, so lengths take one- and multi-byte varints.
payloads = st.none() | st.binary(max_size=40) | st.binary(min_size=64, max_size=300)
header_lists = st.lists(
    st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=70)), max_size=3
)
# Realistic epoch-millisecond clocks mixed with anything whose deltas still fit a varlong.
timestamps = st.integers(1_600_000_000_000, 1_800_000_000_000) | st.integers(
    -(2**62) + 1, 2**62 - 1
)
new_records = st.builds(
    NewRecord, key=payloads, value=payloads, timestamp=timestamps, headers=header_lists
)
record_lists = st.lists(new_records, min_size=1, max_size=25)
codecs = st.sampled_from(CODECS)
base_offsets = st.integers(0, 1000) | st.integers(0, INT64_MAX - INT32_MAX)
producers = st.just((-1, -1, -1)) | st.tuples(
    st.integers(0, INT64_MAX), st.integers(0, 2**15 - 1), st.integers(0, INT32_MAX)
)


def as_tuples(records: Any) -> list[tuple[Any, ...]]:
    """Our records or a client's, as comparable tuples."""
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def expected(records: Sequence[NewRecord], base_offset: int = 0) -> list[tuple[Any, ...]]:
    return [
        (base_offset + i, r.timestamp, r.key, r.value, list(r.headers))
        for i, r in enumerate(records)
    ]


def with_offsets(records: Sequence[NewRecord], offsets: Sequence[int]) -> list[Record]:
    return [
        Record(off, r.timestamp, r.key, r.value, list(r.headers))
        for off, r in zip(offsets, records, strict=False)
    ]


def rewrite(data: bytes, **fields: int) -> bytes:
    """``data`` with header fields replaced and its CRC recomputed."""
    header = dataclasses.replace(parse_header(data), **fields)
    out = bytearray(data)
    HEADER.pack_into(out, 0, *dataclasses.astuple(header))
    struct.pack_into(">I", out, 17, crc32c(out[21:]))
    return bytes(out)


def pack_batch(body: bytes, **fields: int) -> bytes:
    """A batch with arbitrary header fields around ``body``, with a correct length and CRC."""
    values = {
        "base_offset": 0,
        "batch_length": len(body) + BATCH_OVERHEAD - 12,
        "partition_leader_epoch": -1,
        "magic": 2,
        "crc": 0,
        "attributes": 0,
        "last_offset_delta": 0,
        "base_timestamp": 0,
        "max_timestamp": 0,
        "producer_id": -1,
        "producer_epoch": -1,
        "base_sequence": -1,
        "records_count": 0,
    }
    values.update(fields)
    out = bytearray(HEADER.pack(*values.values())) + body
    struct.pack_into(">I", out, 17, crc32c(out[21:]))
    return bytes(out)


def compressible(n: int, size: int = 200) -> list[NewRecord]:
    """Records whose batch shrinks under every codec (clients fall back to none otherwise)."""
    return [
        NewRecord(
            b"key-%d" % (i % 7),
            (b"value %d " % i) * (size // 8),
            1_700_000_000_000 + i * 3,
            [("trace", b"t-%d" % i), ("null", None)] if i % 3 == 0 else [],
        )
        for i in range(n)
    ]


# --- CRC-32C and varints ---------------------------------------------------------------------


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert crc32c(memoryview(b"x123456789")[1:]) == 0xE3069283


@given(value=st.integers(INT64_MIN, INT64_MAX), tail=st.binary(max_size=3))
@example(value=INT64_MIN, tail=b"")
@example(value=INT64_MAX, tail=b"\xff")
@SETTINGS
def test_varint_round_trip_over_int64(value: int, tail: bytes) -> None:
    out = bytearray()
    write_varint(out, value)
    assert len(out) == varint_size(value) <= 10
    buf = bytes(out) + tail
    assert read_varint(buf, 0) == (value, len(out))
    assert read_varint(memoryview(b"\x00" + buf), 1) == (value, len(out) + 1)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (-65, b"\x81\x01"),
        (8191, b"\xfe\x7f"),
        (8192, b"\x80\x80\x01"),
        (INT64_MAX, b"\xfe" + b"\xff" * 8 + b"\x01"),
        (INT64_MIN, b"\xff" * 9 + b"\x01"),
    ],
)
def test_varint_encoding_is_zigzag_leb128(value: int, encoded: bytes) -> None:
    out = bytearray()
    write_varint(out, value)
    assert bytes(out) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))


@given(value=st.integers(INT64_MIN, INT64_MAX))
@SETTINGS
def test_varints_agree_with_kafka_python(value: int) -> None:
    theirs = bytearray()
    kp_util.encode_varint(value, theirs.append)
    ours = bytearray()
    write_varint(ours, value)
    assert ours == theirs
    assert kp_util.decode_varint(ours, 0) == read_varint(bytes(ours), 0)


@pytest.mark.parametrize("value", [INT64_MAX + 1, INT64_MIN - 1, 2**100, -(2**100)])
def test_write_varint_refuses_values_outside_int64(value: int) -> None:
    with pytest.raises(InvalidRecordError):
        write_varint(bytearray(), value)


def test_read_varint_refuses_overlong_and_overflowing_varints() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        read_varint(b"\x80" * 10 + b"\x00", 0)
    with pytest.raises(CorruptRecordError, match="overflows"):
        read_varint(b"\xff" * 9 + b"\x02", 0)
    with pytest.raises(IndexError):
        read_varint(b"\x80\x80", 0)  # cut short: decode_records turns this into CorruptRecordError


# --- build and decode round trips ------------------------------------------------------------


@given(
    records=record_lists,
    codec=codecs,
    base_offset=base_offsets,
    producer=producers,
    leader_epoch=st.integers(-1, INT32_MAX),
    transactional=st.booleans(),
)
@SETTINGS
def test_round_trip(
    records: list[NewRecord],
    codec: int,
    base_offset: int,
    producer: tuple[int, int, int],
    leader_epoch: int,
    transactional: bool,
) -> None:
    producer_id, producer_epoch, base_sequence = producer
    data = build_batch(
        records,
        base_offset=base_offset,
        compression_codec=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        partition_leader_epoch=leader_epoch,
    )
    header, decoded = decode_batch(data)
    assert as_tuples(decoded) == expected(records, base_offset)
    assert header == check_batch(data) == parse_header(data)
    assert header.size == len(data)
    assert header.magic == 2
    assert header.compression == codec
    assert header.base_offset == base_offset
    assert header.partition_leader_epoch == leader_epoch
    assert header.records_count == header.last_offset_delta + 1 == len(records)
    assert header.next_offset == base_offset + len(records)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.is_transactional == transactional
    assert not header.is_control and not header.log_append_time
    assert batch_extent(data) == (base_offset, len(data))
    assert decode_records(header, memoryview(data)) == decoded
    assert decode_records(header, bytearray(data)) == decoded


@given(
    records=record_lists,
    gaps=st.lists(st.integers(1, 2**20), min_size=25, max_size=25),
    first=st.integers(0, 1000),
    base_offset=base_offsets,
    codec=codecs,
)
@SETTINGS
def test_records_with_offset_gaps_keep_their_offsets(
    records: list[NewRecord], gaps: list[int], first: int, base_offset: int, codec: int
) -> None:
    offsets = [base_offset + first]
    for gap in gaps[: len(records) - 1]:
        offsets.append(offsets[-1] + gap)
    recs = with_offsets(records, offsets)
    data = build_batch(recs, base_offset=base_offset, compression_codec=codec)
    header, decoded = decode_batch(data)
    assert decoded == recs
    assert header.last_offset == offsets[-1]
    assert header.records_count == len(recs)


def built(records: Sequence[NewRecord], **options: Any) -> bytes:
    builder = BatchBuilder()
    for r in records:
        assert builder.append(r.key, r.value, r.timestamp, r.headers) == len(builder) - 1
    return builder.build(**options)


@given(
    records=record_lists,
    codec=codecs,
    base_offset=base_offsets,
    producer=producers,
    transactional=st.booleans(),
)
@SETTINGS
def test_batch_builder_encodes_exactly_like_build_batch(
    records: list[NewRecord], codec: int, base_offset: int, producer: tuple[int, int, int], transactional: bool
) -> None:
    pid, epoch, seq = producer
    options = dict(
        base_offset=base_offset, compression_codec=codec, producer_id=pid, producer_epoch=epoch,
        base_sequence=seq, transactional=transactional,
    )
    try:
        expected_bytes = build_batch(records, **options)  # type: ignore[arg-type]
    except InvalidRecordError:
        with pytest.raises(InvalidRecordError):
            built(records, **options)
        return
    assert built(records, **options) == expected_bytes


def test_batch_builder_past_its_lookup_tables() -> None:
    """Offset deltas, lengths and timestamp deltas beyond the two-byte varints it looks up."""
    records = [
        NewRecord(b"k%d" % i, b"v" * (i % 3) * 5000 if i % 1000 == 0 else b"v", 1_700_000_000_000 + i * (i % 7))
        for i in range(9000)
    ]
    records.append(NewRecord(None, None, 0))  # a negative delta far below the first timestamp
    assert built(records) == build_batch(records)
    with pytest.raises(InvalidRecordError, match="at least one record"):
        BatchBuilder().build()


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_many_records_with_multibyte_deltas(codec: int) -> None:
    records = [*compressible(1500, size=150), NewRecord(None, b"v" * 20_000, 5, [])]
    data = build_batch(records, base_offset=10**12, compression_codec=codec)
    _, decoded = decode_batch(data)
    assert as_tuples(decoded) == expected(records, 10**12)


def test_null_empty_and_binary_fields_stay_distinct() -> None:
    records = [
        NewRecord(None, None, 1),
        NewRecord(b"", b"", 2),
        NewRecord(b"\x00\xff", bytes(range(256)), 3, [("", None), ("", b""), ("ключ ✓", b"\x00")]),
    ]
    _, decoded = decode_batch(build_batch(records))
    assert as_tuples(decoded) == expected(records)


def test_last_offset_delta_override_keeps_a_cleaned_batch_range() -> None:
    data = build_batch([Record(100, 1, b"k", b"v")], base_offset=98, last_offset_delta=9)
    header, decoded = decode_batch(data)
    assert (header.last_offset_delta, header.records_count, header.next_offset) == (9, 1, 108)
    assert [r.offset for r in decoded] == [100]

    empty = build_batch([], base_offset=50, last_offset_delta=4)
    header, decoded = decode_batch(empty)
    assert decoded == []
    assert (header.records_count, header.last_offset, header.next_offset) == (0, 54, 55)
    batch = aio_default.DefaultRecordBatch(empty)
    assert batch.validate_crc()
    assert list(batch) == []


@pytest.mark.parametrize(
    ("records", "kwargs", "match"),
    [
        ([], {}, "at least one record"),
        ([Record(5, 0, None, None), Record(5, 0, None, None)], {}, "increase"),
        ([Record(7, 0, None, None), Record(6, 0, None, None)], {}, "increase"),
        ([Record(4, 0, None, None)], {"base_offset": 5}, "before the batch"),
        ([Record(5, 0, None, None), Record(9, 0, None, None)], {"last_offset_delta": 3}, "below"),
        ([NewRecord(None, None, 0)], {"last_offset_delta": -1}, "below"),
        ([NewRecord(None, None, 0)], {"last_offset_delta": 2**31}, "does not fit"),
        ([Record(2**31, 0, None, None)], {}, "does not fit"),
        ([NewRecord(None, None, INT64_MIN), NewRecord(None, None, INT64_MAX)], {}, "64-bit"),
        ([NewRecord(None, None, INT64_MAX + 1)], {}, "out of range"),
        ([NewRecord(None, None, 0)], {"producer_id": 2**63}, "out of range"),
        ([NewRecord(None, None, 0)], {"producer_epoch": 2**15}, "out of range"),
        ([NewRecord(None, None, 0)], {"base_offset": -(2**63) - 1}, "out of range"),
    ],
)
def test_build_batch_refuses_what_it_cannot_encode(
    records: list[NewRecord | Record], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidRecordError, match=match):
        build_batch(records, **kwargs)


def test_extreme_timestamps_with_a_representable_delta() -> None:
    records = [NewRecord(None, None, INT64_MAX), NewRecord(None, None, 0)]
    _, decoded = decode_batch(build_batch(records))
    assert [r.timestamp for r in decoded] == [INT64_MAX, 0]
    records = [NewRecord(None, None, INT64_MIN), NewRecord(None, None, -1)]
    _, decoded = decode_batch(build_batch(records))
    assert [r.timestamp for r in decoded] == [INT64_MIN, -1]


def test_log_append_time_gives_every_record_the_batch_max_timestamp() -> None:
    records = [NewRecord(b"k", b"v", 1000 + i) for i in range(5)]
    data = rewrite(build_batch(records), attributes=ATTR_LOG_APPEND_TIME, max_timestamp=99_999)
    header, decoded = decode_batch(data)
    assert header.log_append_time
    assert [r.timestamp for r in decoded] == [99_999] * 5
    theirs = aio_default.DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert [r.timestamp for r in theirs] == [99_999] * 5


# --- check_batch -----------------------------------------------------------------------------


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    return build_batch(
        draw(st.lists(new_records, min_size=1, max_size=6)),
        base_offset=draw(base_offsets),
        compression_codec=draw(codecs),
    )


@pytest.mark.parametrize("magic", [0, 1, 3, 127, -1])
def test_check_batch_refuses_other_magics(magic: int) -> None:
    data = bytearray(build_batch([NewRecord(b"k", b"v", 1)]))
    struct.pack_into(">b", data, 16, magic)
    with pytest.raises(InvalidRecordError, match="magic"):
        check_batch(data)
    with pytest.raises(InvalidRecordError, match="magic"):
        decode_batch(bytes(data))


@given(data=batches(), delta=st.integers(-(2**31), 2**31 - 1).filter(bool))
@SETTINGS
def test_check_batch_refuses_a_wrong_length(data: bytes, delta: int) -> None:
    (length,) = struct.unpack_from(">i", data, 8)
    damaged = bytearray(data)
    struct.pack_into(">i", damaged, 8, (length + delta + 2**31) % 2**32 - 2**31)
    with pytest.raises(CorruptRecordError):
        check_batch(damaged)


@given(data=batches(), where=st.integers(21), xor=st.integers(1, 255))
@SETTINGS
def test_crc_detects_any_single_byte_change_it_covers(data: bytes, where: int, xor: int) -> None:
    damaged = bytearray(data)
    damaged[21 + where % (len(data) - 21)] ^= xor
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_batch(damaged)
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batch(bytes(damaged))


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_crc_detects_every_single_byte_change_of_a_small_batch(codec: int) -> None:
    data = build_batch(
        [NewRecord(b"key", b"value" * 5, 10, [("h", b"x")]), NewRecord(None, None, 9)],
        compression_codec=codec,
    )
    xors = range(1, 256) if codec == NONE else (0x01, 0x80, 0xFF)
    for where in range(21, len(data)):
        for xor in xors:
            damaged = bytearray(data)
            damaged[where] ^= xor
            with pytest.raises(CorruptRecordError, match="CRC"):
                check_batch(damaged)


@given(data=batches(), where=st.integers(0, 20), xor=st.integers(1, 255))
@SETTINGS
def test_header_bytes_outside_the_crc(data: bytes, where: int, xor: int) -> None:
    damaged = bytearray(data)
    damaged[where] ^= xor
    if where < 8 or 12 <= where < 16:
        # BaseOffset and PartitionLeaderEpoch: stamped by the log, deliberately outside the CRC.
        assert check_batch(damaged).crc == parse_header(data).crc
    else:
        with pytest.raises(InvalidRecordError):
            check_batch(damaged)


@given(data=batches(), cut=st.integers(0))
@SETTINGS
def test_check_batch_refuses_truncated_or_padded_data(data: bytes, cut: int) -> None:
    with pytest.raises(CorruptRecordError):
        check_batch(data[: cut % len(data)])
    with pytest.raises(CorruptRecordError):
        check_batch(data + b"\x00")


def test_check_batch_refuses_inconsistent_counts() -> None:
    data = build_batch([NewRecord(None, b"v", 1)] * 3)
    for fields in (
        {"records_count": -1},
        {"last_offset_delta": -1},
        {"last_offset_delta": 1},  # 3 records cannot span 2 offsets
    ):
        with pytest.raises(CorruptRecordError):
            check_batch(rewrite(data, **fields))


def test_batch_extent_needs_twelve_bytes() -> None:
    data = build_batch([NewRecord(None, b"v", 1)], base_offset=7)
    assert batch_extent(b"xx" + data, 2) == (7, len(data))
    with pytest.raises(CorruptRecordError):
        batch_extent(data[:11])


# --- many batches in a buffer ----------------------------------------------------------------


@given(
    batch_records=st.lists(st.lists(new_records, min_size=1, max_size=4), min_size=0, max_size=5),
    codec=codecs,
    tail=batches(),
    cut=st.integers(0),
)
@SETTINGS
def test_iter_batches_stops_at_a_partial_tail(
    batch_records: list[list[NewRecord]], codec: int, tail: bytes, cut: int
) -> None:
    buf = b""
    next_offset = 0
    positions = []
    for records in batch_records:
        data = with_base_offset(build_batch(records, compression_codec=codec), next_offset)
        positions.append(len(buf))
        buf += data
        next_offset += len(records)
    buf += tail[: cut % len(tail)]
    found = list(iter_batches(buf))
    assert [pos for pos, _ in found] == positions
    assert [h for _, h in found] == [parse_header(buf, p) for p in positions]
    decoded = [r for _, recs in decode_batches(buf) for r in recs]
    assert as_tuples(decoded) == expected([r for rs in batch_records for r in rs])
    if positions:
        assert list(iter_batches(buf, positions[-1])) == found[-1:]


def test_decode_batches_skips_control_batches_unless_asked() -> None:
    data = build_batch([NewRecord(b"k", b"v", 1)], producer_id=3, producer_epoch=0)
    marker = with_base_offset(
        control_batch(commit=True, producer_id=3, producer_epoch=0, timestamp=2), 1
    )
    buf = memoryview(data + marker)
    assert [h.is_control for h, _ in decode_batches(buf)] == [False]
    assert [h.is_control for h, _ in decode_batches(buf, skip_control=False)] == [False, True]


@given(data=batches(), new_base=base_offsets)
@SETTINGS
def test_with_base_offset_keeps_the_crc_valid(data: bytes, new_base: int) -> None:
    _, before = decode_batch(data)
    moved = with_base_offset(data, new_base)
    assert moved[8:] == data[8:]
    header, after = decode_batch(moved)
    assert header.base_offset == new_base
    shift = new_base - parse_header(data).base_offset
    assert [r.offset for r in after] == [r.offset + shift for r in before]
    assert aio_default.DefaultRecordBatch(moved).validate_crc()


# --- control batches -------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_control_batch_reads_as_a_marker_in_every_client(commit: bool) -> None:
    data = control_batch(
        commit=commit,
        producer_id=4242,
        producer_epoch=7,
        timestamp=1_700_000_000_000,
        coordinator_epoch=11,
    )
    header, records = decode_batch(data)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, -1)
    assert len(records) == 1
    assert struct.unpack(">hh", records[0].key or b"") == (0, 1 if commit else 0)
    assert struct.unpack(">hi", records[0].value or b"") == (0, 11)

    aio = aio_memory.MemoryRecords(data).next_batch()
    assert aio is not None and aio.validate_crc()
    assert aio.is_control_batch and aio.is_transactional and aio.producer_id == 4242
    (aio_record,) = list(aio)
    marker = ControlRecord.parse(aio_record.key)
    assert marker == (COMMIT_MARKER if commit else ABORT_MARKER)

    (kp,) = list(kp_memory.MemoryRecords(data))
    assert kp.validate_crc()
    assert kp.is_control_batch and kp.producer_id == 4242 and kp.producer_epoch == 7
    (kp_record,) = list(kp)
    assert (kp_record.commit, kp_record.abort) == (commit, not commit)


# --- our batches in their readers ------------------------------------------------------------


def _aiokafka_reader(data: bytes) -> Any:
    records = aio_memory.MemoryRecords(data)
    batch = records.next_batch()
    assert not records.has_next()
    return batch


def _aiokafka_py_reader(data: bytes) -> Any:
    return aio_default._DefaultRecordBatchPy(data)


def _kafka_python_reader(data: bytes) -> Any:
    (batch,) = list(kp_memory.MemoryRecords(data))
    return batch


READERS: dict[str, Callable[[bytes], Any]] = {
    "aiokafka": _aiokafka_reader,
    "aiokafka-py": _aiokafka_py_reader,
    "kafka-python": _kafka_python_reader,
}


def _kafka_python_has(codec: int) -> None:
    checks = {
        GZIP: kafka.codec.has_gzip,
        SNAPPY: kafka.codec.has_snappy,
        LZ4: kafka.codec.has_lz4,
        ZSTD: kafka.codec.has_zstd,
    }
    packages = {SNAPPY: "python-snappy", LZ4: "lz4", ZSTD: "zstandard"}
    assert codec == NONE or checks[codec](), (
        f"kafka-python needs {packages.get(codec)!r} for {compression.CODEC_NAMES[codec]}"
    )


def _their_view(batch: Any) -> dict[str, Any]:
    assert batch.validate_crc()  # before iterating, as the clients require
    return {
        "base_offset": batch.base_offset,
        "last_offset_delta": batch.last_offset_delta,
        "codec": batch.compression_type,
        "transactional": batch.is_transactional,
        "control": batch.is_control_batch,
        "producer": (batch.producer_id, batch.producer_epoch, batch.base_sequence),
        "records": as_tuples(batch),
    }


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
@given(
    records=record_lists,
    gaps=st.lists(st.integers(1, 1000), min_size=25, max_size=25) | st.none(),
    codec=codecs,
    base_offset=base_offsets,
    producer=producers,
    transactional=st.booleans(),
)
@FEWER
def test_their_readers_decode_our_batches(
    reader: Callable[[bytes], Any],
    records: list[NewRecord],
    gaps: list[int] | None,
    codec: int,
    base_offset: int,
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    if reader is _kafka_python_reader:
        _kafka_python_has(codec)
    if gaps is None:
        offsets = [base_offset + i for i in range(len(records))]
        to_write: Sequence[NewRecord | Record] = records
    else:
        offsets = [base_offset]
        for gap in gaps[: len(records) - 1]:
            offsets.append(offsets[-1] + gap)
        to_write = with_offsets(records, offsets)
    data = build_batch(
        to_write,
        base_offset=base_offset,
        compression_codec=codec,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        transactional=transactional,
    )
    assert _their_view(reader(data)) == {
        "base_offset": base_offset,
        "last_offset_delta": offsets[-1] - base_offset,
        "codec": codec,
        "transactional": transactional,
        "control": False,
        "producer": producer,
        "records": [
            (off, r.timestamp, r.key, r.value, list(r.headers))
            for off, r in zip(offsets, records, strict=True)
        ],
    }


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_their_readers_decode_our_compressed_batches(
    reader: Callable[[bytes], Any], codec: int
) -> None:
    if reader is _kafka_python_reader:
        _kafka_python_has(codec)
    records = compressible(300)
    data = build_batch(records, base_offset=77, compression_codec=codec)
    view = _their_view(reader(data))
    assert view["codec"] == codec
    assert view["records"] == expected(records, 77)


def test_their_header_arithmetic_matches_ours() -> None:
    data = build_batch([NewRecord(None, b"v", 1)] * 4, producer_id=1, producer_epoch=0)
    for base_sequence in (0, 5, INT32_MAX - 3, INT32_MAX - 2, INT32_MAX - 1, INT32_MAX):
        for lod in (3, 10):
            moved = rewrite(
                with_base_offset(data, 2**40), base_sequence=base_sequence, last_offset_delta=lod
            )
            ours = check_batch(moved)
            theirs = kp_default.DefaultRecordBatch(moved)
            assert ours.last_sequence == theirs.last_sequence
            assert ours.last_offset == theirs.last_offset
            assert ours.next_offset == theirs.next_offset
            assert ours.size == theirs.size_in_bytes
    assert (
        check_batch(data).last_sequence == -1 == kp_default.DefaultRecordBatch(data).last_sequence
    )


# --- their batches in our reader -------------------------------------------------------------


def _build_with(builder_cls: Any) -> Callable[..., bytes]:
    def build(
        records: Sequence[NewRecord],
        deltas: Sequence[int],
        codec: int,
        producer: tuple[int, int, int],
        transactional: bool,
    ) -> bytes:
        builder = builder_cls(
            magic=2,
            compression_type=codec,
            is_transactional=transactional,
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=producer[2],
            batch_size=2**30,
        )
        for delta, r in zip(deltas, records, strict=True):
            assert builder.append(delta, r.timestamp, r.key, r.value, list(r.headers))
        return bytes(builder.build())

    return build


def _build_with_kafka_python_memory_records(
    records: Sequence[NewRecord],
    deltas: Sequence[int],
    codec: int,
    producer: tuple[int, int, int],
    transactional: bool,
) -> bytes:
    builder = kp_memory.MemoryRecordsBuilder(
        magic=2,
        compression_type=codec,
        batch_size=2**30,
        transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
    )
    for delta, r in zip(deltas, records, strict=True):
        builder.skip(delta - builder.next_offset())
        assert builder.append(r.timestamp, r.key, r.value, list(r.headers))
    builder.close()
    return bytes(builder.buffer())


BUILDERS: dict[str, Callable[..., bytes]] = {
    "aiokafka": _build_with(aio_default.DefaultRecordBatchBuilder),
    "aiokafka-py": _build_with(aio_default._DefaultRecordBatchBuilderPy),
    "kafka-python": _build_with(kp_default.DefaultRecordBatchBuilder),
    "kafka-python-memory-records": _build_with_kafka_python_memory_records,
}
KAFKA_PYTHON_BUILDERS = {BUILDERS["kafka-python"], _build_with_kafka_python_memory_records}


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
@given(
    records=record_lists,
    gaps=st.lists(st.integers(1, 1000), min_size=25, max_size=25) | st.none(),
    codec=codecs,
    producer=producers,
    transactional=st.booleans(),
)
@FEWER
def test_we_decode_their_batches(
    build: Callable[..., bytes],
    records: list[NewRecord],
    gaps: list[int] | None,
    codec: int,
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    if build in KAFKA_PYTHON_BUILDERS:
        _kafka_python_has(codec)
    deltas = [0]
    for gap in (gaps or [1] * 25)[: len(records) - 1]:
        deltas.append(deltas[-1] + gap)
    transactional = transactional and producer[0] >= 0
    data = build(records, deltas, codec, producer, transactional)
    header, decoded = decode_batch(data)
    assert decoded == with_offsets(records, deltas)
    assert header.compression in (codec, NONE)  # clients send uncompressed when it does not pay
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.is_transactional == transactional
    assert header.last_offset_delta == deltas[-1]
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert list(decode_batches(data + data[:-1])) == [(header, decoded)]


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_we_decode_their_compressed_batches(build: Callable[..., bytes], codec: int) -> None:
    if build in KAFKA_PYTHON_BUILDERS:
        _kafka_python_has(codec)
    records = compressible(300)
    data = build(records, range(300), codec, (9001, 2, 400), True)
    header, decoded = decode_batch(data)
    assert header.compression == codec
    assert as_tuples(decoded) == expected(records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9001, 2, 400)
    assert header.last_sequence == 699


def test_aiokafka_xerial_snappy_batches_decode() -> None:
    """aiokafka frames snappy the xerial way; big batches span several xerial blocks."""
    records = compressible(1000, size=300)
    data = BUILDERS["aiokafka"](records, range(1000), SNAPPY, (-1, -1, -1), False)
    assert data[BATCH_OVERHEAD:].startswith(b"\x82SNAPPY\x00")
    _, decoded = decode_batch(data)
    assert as_tuples(decoded) == expected(records)


# --- hostile input ---------------------------------------------------------------------------


def assert_decodes_or_refuses(data: bytes, *, verify_crc: bool = True) -> None:
    try:
        header, records = decode_batch(data, verify_crc=verify_crc)
    except InvalidRecordError:
        return
    assert len(records) == header.records_count


def test_invalid_record_error_is_a_streamkit_error() -> None:
    assert issubclass(InvalidRecordError, StreamkitError)
    assert issubclass(CorruptRecordError, InvalidRecordError)


@given(junk=st.binary(max_size=400), verify_crc=st.booleans())
@SETTINGS
def test_random_bytes_decode_or_raise_invalid_record_error(junk: bytes, verify_crc: bool) -> None:
    assert_decodes_or_refuses(junk, verify_crc=verify_crc)
    list(iter_batches(junk))  # never raises: it only reads whole headers


@given(
    body=st.binary(max_size=400),
    attributes=st.integers(0, 0x7F) | st.integers(-(2**15), 2**15 - 1),
    count=st.integers(0, 40) | st.integers(-(2**31), 2**31 - 1),
    lod=st.integers(0, 60) | st.integers(-(2**31), 2**31 - 1),
)
@SETTINGS
def test_random_records_with_a_valid_frame_decode_or_raise(
    body: bytes, attributes: int, count: int, lod: int
) -> None:
    data = pack_batch(body, attributes=attributes, records_count=count, last_offset_delta=lod)
    assert_decodes_or_refuses(data)


mutations = st.lists(
    st.tuples(
        st.sampled_from(["set", "insert", "delete"]),
        st.integers(0),
        st.binary(min_size=1, max_size=4),
    ),
    min_size=1,
    max_size=5,
)


def mutate(data: bytearray, edits: list[tuple[str, int, bytes]], start: int = 0) -> bytearray:
    for kind, where, blob in edits:
        span = len(data) - start
        pos = start + where % (span + 1)
        if kind == "set" and span:
            pos = min(pos, len(data) - 1)
            data[pos] = blob[0]
        elif kind == "insert":
            data[pos:pos] = blob
        else:
            del data[pos : pos + len(blob)]
    return data


@given(
    records=st.lists(new_records, min_size=1, max_size=8),
    codec=codecs,
    edits=mutations,
    refit=st.booleans(),
)
@SETTINGS
def test_mutated_batches_decode_or_raise_invalid_record_error(
    records: list[NewRecord], codec: int, edits: list[tuple[str, int, bytes]], refit: bool
) -> None:
    data = mutate(bytearray(build_batch(records, compression_codec=codec)), edits)
    if refit and len(data) >= BATCH_OVERHEAD:
        # Make the frame consistent again, so the damage reaches the record decoder.
        struct.pack_into(">i", data, 8, len(data) - 12)
        struct.pack_into(">I", data, 17, crc32c(data[21:]))
    assert_decodes_or_refuses(bytes(data))


@given(records=st.lists(new_records, min_size=1, max_size=8), codec=codecs, edits=mutations)
@SETTINGS
def test_mutated_record_arrays_under_every_codec_decode_or_raise(
    records: list[NewRecord], codec: int, edits: list[tuple[str, int, bytes]]
) -> None:
    """Damage the uncompressed records, then compress them properly: the record parser's turn."""
    plain = build_batch(records)
    header = parse_header(plain)
    body = bytes(mutate(bytearray(plain[BATCH_OVERHEAD:]), edits))
    data = pack_batch(
        compression.compress(codec, body),
        attributes=codec,
        records_count=header.records_count,
        last_offset_delta=header.last_offset_delta,
    )
    assert_decodes_or_refuses(data)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"\x0e\x00\x00\x00\x01\x01\x01", "past the end"),  # length 7, only 6 bytes follow
        (b"\x0e\x00\x00\x00\x01\x01\x00\x00", "does not match"),  # length 7, fields take 6
        (b"\x0c\x00\x00\x00\x01\x01\x03", "headers"),  # -2 headers
        (b"\x0e\x00\x00\x00\x01\x01\x02\x02\xff\x01", "UTF-8"),  # header key b"\xff"
        (b"\x0a\x00\x00\x00\x01\x01\x02\x01\x01", "null"),  # null header key
        (b"\x0c\x00\x00\x00\x01\x01\x00\x00", "left over"),
        (b"\x0c\x00\x00\x00\x01\x01\x00" * 2, "cannot hold"),
        (b"\x0d\x00\x00\x00\x01\x01\x00", "past the end"),  # negative length
    ],
)
def test_specific_damage_is_named(body: bytes, match: str) -> None:
    count = 3 if match == "cannot hold" else 1
    data = pack_batch(body, records_count=count, last_offset_delta=count - 1)
    with pytest.raises(CorruptRecordError, match=match):
        decode_batch(data)


def test_batch_header_is_a_value() -> None:
    header = parse_header(build_batch([NewRecord(None, None, 1)]))
    assert isinstance(header, BatchHeader)
    with pytest.raises(dataclasses.FrozenInstanceError):
        header.base_offset = 5  # type: ignore[misc]
