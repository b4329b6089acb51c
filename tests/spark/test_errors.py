"""Bad input: a clear error, no wrong rows, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamkit.log.reader import CorruptSegmentError, read_batches
from tests.spark.conftest import log_records, make_topic


def read(spark: Any, data_dir: Path, topic: str) -> Any:
    return spark.read.format("streamkit").option("path", str(data_dir)).option("topic", topic).load()


def test_missing_path(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=f"no data directory at {tmp_path / 'nowhere'}"):
        read(spark, tmp_path / "nowhere", "t").collect()


def test_missing_topic(spark: Any, tmp_path: Path) -> None:
    make_topic(tmp_path / "data", "t", 1, 3)
    with pytest.raises(Exception, match="no topic 'other' in data directory"):
        read(spark, tmp_path / "data", "other").collect()


def test_missing_options(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"needs option\('topic', NAME\)"):
        spark.read.format("streamkit").option("path", str(tmp_path)).load().collect()
    with pytest.raises(Exception, match=r"needs option\('path', DATA_DIR\)"):
        spark.read.format("streamkit").option("topic", "t").load().collect()


def _second_batch_position(data: Path) -> tuple[Path, int]:
    segment = data / "t-1" / f"{0:020d}.log"
    positions = []
    pos = 0
    raw = segment.read_bytes()
    while pos < len(raw):
        positions.append(pos)
        pos += int.from_bytes(raw[pos + 8 : pos + 12], "big") + 12
    return segment, positions[1]


def test_corrupt_segment_names_file_and_position(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 2, 30, batch=10)
    segment, position = _second_batch_position(data)
    raw = bytearray(segment.read_bytes())
    raw[position + 70] ^= 0xFF  # a byte inside the second batch's records
    segment.write_bytes(bytes(raw))
    with pytest.raises(Exception) as failure:
        read(spark, data, "t").collect()
    assert f"{segment} at position {position}: batch CRC mismatch" in str(failure.value)
    # The reader itself yields nothing of the damaged batch: the error comes first.
    got = []
    with pytest.raises(CorruptSegmentError) as direct:
        for header, _data in read_batches(data, "t", 1, 0):
            got.append(header.base_offset)
    assert got == [0] and direct.value.position == position and direct.value.path == segment
    # The undamaged partition still reads in full.
    rows = (
        spark.read.format("streamkit").option("path", str(data)).option("topic", "t")
        .option("startingOffsets", '{"t": {"1": 30}}').load().collect()
    )
    assert sorted(r.offset for r in rows) == list(range(30))


def test_a_torn_batch_in_a_closed_segment_is_an_error(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 1, 40, batch=10, config={"segment.bytes": "600"})
    segments = sorted((data / "t-0").glob("*.log"))
    assert len(segments) > 1
    first = segments[0]
    first.write_bytes(first.read_bytes()[:-5])  # the last batch of a sealed segment cut short
    with pytest.raises(Exception, match=f"{first} at position [0-9]+: batch of [0-9]+ bytes runs past"):
        read(spark, data, "t").collect()


def _write(spark: Any, df: Any, data: Path, topic: str = "t") -> None:
    df.write.format("streamkit").option("path", str(data)).option("topic", topic).mode("append").save()


def test_wrong_schema_on_write_writes_nothing(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 2, 5)
    before = log_records(data, "t")
    cases = [
        (spark.createDataFrame([(b"k", 1)], "key binary, value int"), r"value is int"),
        (spark.createDataFrame([(b"k", b"v", "x")], "key binary, value binary, extra string"), r"columns \['extra'\]"),
        (spark.createDataFrame([(b"k",)], "key binary"), r"needs a value column"),
        (spark.createDataFrame([(b"v", 1)], "value binary, partition long"), r"partition is bigint"),
    ]
    for df, message in cases:
        with pytest.raises(Exception, match=message):
            _write(spark, df, data)
    with pytest.raises(Exception, match="append-only"):
        spark.createDataFrame([(b"v",)], "value binary").write.format("streamkit").option(
            "path", str(data)
        ).option("topic", "t").mode("overwrite").save()
    assert log_records(data, "t") == before


def test_a_failed_task_leaves_nothing_behind(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 2, 5)
    before = log_records(data, "t")
    # Many good rows in every task, and one row naming a partition the topic lacks.
    rows = [(b"v%d" % i, i % 2) for i in range(100)] + [(b"bad", 7)]
    df = spark.createDataFrame(rows, "value binary, partition int").repartition(2)
    with pytest.raises(Exception, match="names partition 7 but topic 't' has 2"):
        _write(spark, df, data)
    assert log_records(data, "t") == before


def test_write_to_a_missing_topic(spark: Any, tmp_path: Path) -> None:
    make_topic(tmp_path / "data", "t", 1, 1)
    with pytest.raises(Exception, match="no topic 'nope'"):
        _write(spark, spark.createDataFrame([(b"v",)], "value binary"), tmp_path / "data", "nope")


def test_write_to_a_directory_held_by_a_process_that_serves_no_port(spark: Any, tmp_path: Path) -> None:
    from streamkit.log.manager import LogManager

    data = tmp_path / "data"
    make_topic(data, "t", 1, 3)
    before = log_records(data, "t")
    df = spark.createDataFrame([(b"v",)], "value binary")
    # The LogManager holds the lock and records no .owner.
    with LogManager(data, background=False), pytest.raises(Exception, match="serves no wire port"):
        _write(spark, df, data)
    assert log_records(data, "t") == before


def test_unknown_compression_on_write(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 1, 3)
    before = log_records(data, "t")
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="option compression must be one of"):
        df.write.format("streamkit").option("path", str(data)).option("topic", "t").option(
            "compression", "brotli"
        ).mode("append").save()
    assert log_records(data, "t") == before
