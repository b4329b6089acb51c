"""The column-wise decoder (``spark/columns.py``) gives exactly the rows of the record path
(``log.records.decode_records`` + ``spark/arrow.py``) for the same segment files: random
records (null and empty keys and values, headers, timestamps), codecs, LogAppendTime,
transactional and control batches, offset gaps, ranges that cut batches, and batches whose
records are malformed under a valid CRC (the same error, never a row)."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamkit.log.errors import InvalidRecordError
from streamkit.log.manager import LogManager
from streamkit.log.records import (
    ATTR_LOG_APPEND_TIME,
    CRC_START,
    NewRecord,
    Record,
    build_batch,
    control_batch,
    crc32c,
)
from streamkit.spark import columns
from streamkit.spark.arrow import record_batches
from streamkit.spark.columns import column_batches
from streamkit.spark.logs import FileLog, read_records

TOPIC = "t"

payloads = st.one_of(st.none(), st.just(b""), st.binary(max_size=40), st.binary(min_size=100, max_size=300))
headers = st.lists(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))), max_size=2
)
# Mostly no headers, as most topics have none: the column path; some with, the record path.
record_headers = st.one_of(st.just([]), st.just([]), headers)


@st.composite
def log_batches(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 12))
    base_ts = draw(st.integers(0, 1 << 42))
    records = [
        NewRecord(
            draw(payloads),
            draw(payloads),
            base_ts + draw(st.integers(-100_000, 1 << 34)),
            draw(record_headers),
        )
        for _ in range(n)
    ]
    return {
        "records": records,
        "codec": draw(st.sampled_from([0, 0, 1, 2, 3, 4])),
        "kind": draw(st.sampled_from(["plain", "plain", "transactional", "control", "log_append_time", "gaps"])),
        "log_append_ts": draw(st.integers(0, 1 << 42)),
    }


def _with_attributes(data: bytes, set_bits: int, max_ts: int | None = None) -> bytes:
    """``data`` with attribute bits set (and MaxTimestamp replaced), its CRC made right again."""
    out = bytearray(data)
    (attributes,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, attributes | set_bits)
    if max_ts is not None:
        struct.pack_into(">q", out, 35, max_ts)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[CRC_START:])))
    return bytes(out)


def _encode(spec: dict[str, Any]) -> bytes:
    records, codec, kind = spec["records"], spec["codec"], spec["kind"]
    if kind == "control":
        return control_batch(commit=True, producer_id=7, producer_epoch=0, timestamp=records[0].timestamp)
    if kind == "gaps":  # a compacted batch: offsets with holes, the header keeping the range
        kept = [Record(i * 3, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)]
        return build_batch(kept, compression_codec=codec, last_offset_delta=3 * len(records))
    data = build_batch(
        records,
        compression_codec=codec,
        producer_id=7 if kind == "transactional" else -1,
        producer_epoch=0 if kind == "transactional" else -1,
        base_sequence=0 if kind == "transactional" else -1,
        transactional=kind == "transactional",
    )
    if kind == "log_append_time":
        data = _with_attributes(data, ATTR_LOG_APPEND_TIME, spec["log_append_ts"])
    return data


def _write(data_dir: Path, batches: list[bytes]) -> int:
    with LogManager(data_dir, background=False) as log:
        log.create_topic(TOPIC, 1)
        part = log.partition(TOPIC, 0)
        for data in batches:
            part.append(data)
        part.flush()
        return part.high_watermark


def _value_lengths(values: list[bytes | None]) -> pa.Array:
    return pa.array([None if v is None else len(v) * 2 + 1 for v in values], pa.int64())


def _both(data_dir: Path, start: int, end: int, lockstep_min: int = 64, **kwargs: Any) -> tuple[Any, Any]:
    """(record path, column path): a table each, or the error each raised. ``lockstep_min``:
    how many batches the column path's walk takes side by side at least (1: all of them, all
    the way; more: the longest batches' last records in Python)."""
    log = FileLog(str(data_dir), TOPIC)
    batch_records = kwargs.pop("batch_records")
    out: list[Any] = []
    for read in (
        lambda: record_batches(TOPIC, 0, read_records(log, 0, start, end), **kwargs),
        lambda: column_batches(TOPIC, 0, log.batches(0, start, end), start, end, batch_records=batch_records, **kwargs),
    ):
        default, columns._LOCKSTEP_MIN = columns._LOCKSTEP_MIN, lockstep_min
        try:
            batches = list(read())
        except (InvalidRecordError, pa.ArrowException, OverflowError) as exc:
            out.append((type(exc), str(exc)))
            continue
        finally:
            columns._LOCKSTEP_MIN = default
        assert all(b.num_rows for b in batches)
        out.append(pa.Table.from_batches(batches).to_pylist() if batches else [])
    return out[0], out[1]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(log_batches(), min_size=1, max_size=8),
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    include_headers=st.booleans(),
    typed_values=st.booleans(),
    batch_records=st.sampled_from([1, 5, 32_768]),
    lockstep_min=st.sampled_from([1, 2, 3, 64]),
)
def test_columns_give_exactly_the_rows_of_the_record_path(
    specs: list[dict[str, Any]],
    cut: tuple[float, float],
    include_headers: bool,
    typed_values: bool,
    batch_records: int,
    lockstep_min: int,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        end_offset = _write(data_dir, [_encode(s) for s in specs])
        lo, hi = sorted(int(c * (end_offset + 1)) for c in cut)
        hi = min(hi, end_offset)
        whole: Any = None
        for start, end in ((0, end_offset), (lo, hi)):
            expected, got = _both(
                data_dir, start, end, lockstep_min,
                include_headers=include_headers,
                value_column=_value_lengths if typed_values else None,
                batch_records=batch_records,
            )
            assert got == expected
            whole = expected if whole is None else whole
        # Every record of the non-control batches (the column path's rows were shown equal).
        if not typed_values:
            assert len(whole) == sum(len(s["records"]) for s in specs if s["kind"] != "control")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(log_batches(), min_size=1, max_size=3),
    which=st.integers(0, 2),
    at=st.floats(0, 1),
    byte=st.integers(0, 255),
    lockstep_min=st.sampled_from([1, 2, 64]),
)
def test_a_malformed_batch_under_a_valid_crc_fails_as_the_record_path_does(
    specs: list[dict[str, Any]], which: int, at: float, byte: int, lockstep_min: int
) -> None:
    """A byte of a batch's records changed and its CRC made right again (a buggy producer, not
    disk damage, which the reader's CRC check catches): the column path raises exactly the
    record path's error, or both decode the same rows."""
    batches = [_encode(dict(s, codec=0)) for s in specs]
    i = which % len(batches)
    data = bytearray(batches[i])
    pos = 61 + int(at * (len(data) - 62))
    data[pos] = byte
    batches[i] = _with_attributes(bytes(data), 0)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        end_offset = _write(data_dir, batches)
        expected, got = _both(
            data_dir, 0, end_offset, lockstep_min, include_headers=True, value_column=None, batch_records=32_768
        )
        assert got == expected


def test_a_record_with_a_bad_length_is_the_record_paths_error(tmp_path: Path) -> None:
    good = build_batch([NewRecord(b"k", b"v", 1), NewRecord(b"k2", b"v2", 2)])
    data = bytearray(build_batch([NewRecord(b"a", b"b", 1), NewRecord(b"c", b"d", 2)]))
    data[61] = 0x7F  # the first record's length: -64
    end_offset = _write(tmp_path, [good, _with_attributes(bytes(data), 0)])
    expected, got = _both(tmp_path, 0, end_offset, include_headers=False, value_column=None, batch_records=32_768)
    assert isinstance(expected, tuple) and expected[0].__name__ == "CorruptRecordError"
    assert got == expected


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_many_batches_without_headers_take_the_column_path(tmp_path: Path, codec: int) -> None:
    """The common shape (many batches, no headers) is decoded without decode_records, the
    walk taking 64 or more batches side by side, then the longer ones alone."""
    batches = [
        build_batch(
            [
                NewRecord(None if i % 7 == 0 else b"k%d" % i, b"v" * (i % 300) if i % 11 else None, 1_000 + i)
                for i in range(j, j + 10 + j % 13)
            ],
            compression_codec=codec,
        )
        for j in range(0, 2_000, 20)
    ]
    end_offset = _write(tmp_path, batches)
    calls: list[int] = []
    real = columns.decode_records

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    columns.decode_records = counting  # type: ignore[assignment]
    try:
        expected, got = _both(tmp_path, 0, end_offset, include_headers=True, value_column=None, batch_records=32_768)
    finally:
        columns.decode_records = real  # type: ignore[assignment]
    assert got == expected and len(got) == sum(10 + j % 13 for j in range(0, 2_000, 20))
    assert calls == []


def test_a_record_longer_than_its_fields_is_the_record_paths_error(tmp_path: Path) -> None:
    """A record whose length counts a byte after its last field: the lengths still add up to
    the batch, but the record path refuses it, and so does the column path."""
    data = bytearray(build_batch([NewRecord(b"a", b"b", 1)]))
    assert data[61] == 16  # zigzag(8): attributes, two deltas, key, value, header count
    data[61] = 18
    data += b"\x00"
    struct.pack_into(">i", data, 8, len(data) - 12)
    end_offset = _write(tmp_path, [_with_attributes(bytes(data), 0)])
    expected, got = _both(tmp_path, 0, end_offset, include_headers=False, value_column=None, batch_records=32_768)
    assert expected == (expected[0], "record length does not match its fields")
    assert got == expected


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(log_batches(), min_size=1, max_size=6),
    cut=st.tuples(st.floats(0, 1), st.floats(0, 1)),
)
def test_the_backfill_reads_segment_files_as_the_record_path_does(
    specs: list[dict[str, Any]], cut: tuple[float, float]
) -> None:
    """The backfill's source chunks (``executors.read_source``: columns, then Python lists)
    hold each record's key, value, offset and timestamp in ms as ``FileLog.read``'s records
    (headers, LogAppendTime, negative timestamps, ranges that cut batches)."""
    from streamkit.spark.access import TaskLog
    from streamkit.spark.executors import Uncounted, read_source
    from streamkit.spark.options import OffsetRange

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        end_offset = _write(data_dir, [_encode(s) for s in specs])
        lo, hi = sorted(int(c * (end_offset + 1)) for c in cut)
        for start, end in ((0, end_offset), (lo, min(hi, end_offset))):
            expected = [
                (r.key, r.value, r.offset, r.timestamp)
                for _t, records in read_records(FileLog(str(data_dir), TOPIC), 0, start, end) for r in records
            ]
            chunks = list(read_source(TaskLog(str(data_dir), None), TOPIC, Uncounted(), iter([OffsetRange(0, start, end)])))
            got = [row for p, *fields, _times in chunks for row in zip(*fields, strict=True) if p == 0]
            assert all(p == 0 and times is None for p, *_, times in chunks)
            assert got == expected
