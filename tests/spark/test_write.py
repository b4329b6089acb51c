"""Writing DataFrames as records, and reading them back (files, an owner, a broker)."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

import pytest

from streamkit._core.partitioner import partition_for_key
from streamkit.log.manager import LogManager
from streamkit.transport.kafka_tools import KafkaTools
from tests.spark.conftest import log_records
from tests.support.broker import BrokerProcess


def _save(df: Any, topic: str, **options: str) -> None:
    writer = df.write.format("streamkit").option("topic", topic).mode("append")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def _create(data: Path, topic: str, partitions: int) -> None:
    with LogManager(data, background=False) as log:
        log.create_topic(topic, partitions)


def test_write_then_read_back(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _create(data, "out", 4)
    ts = datetime.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=datetime.UTC)
    rows = [
        (f"user-{i}".encode(), f"value-{i}".encode(), ts + datetime.timedelta(seconds=i),
         [("trace", f"t{i}".encode())] if i % 3 == 0 else [])
        for i in range(300)
    ]
    df = spark.createDataFrame(
        rows, "key binary, value binary, timestamp timestamp, headers array<struct<key: string, value: binary>>"
    ).repartition(3)
    _save(df, "out", path=str(data))
    written = log_records(data, "out")
    # Keys are partitioned as Kafka's producers partition them (murmur2).
    got = {(p, r.key, r.value, r.timestamp, tuple(r.headers)) for p, recs in written.items() for r in recs}
    want = {
        (partition_for_key(k, 4), k, v, int(t.timestamp() * 1000), tuple(h)) for k, v, t, h in rows
    }
    assert got == want
    back = spark.read.format("streamkit").option("path", str(data)).option("topic", "out").load()
    assert back.count() == 300
    first = back.where("key = cast('user-0' as binary)").selectExpr("unix_millis(timestamp) AS ts", "headers").first()
    assert first.ts == int(ts.timestamp() * 1000)
    assert [(h.key, bytes(h.value)) for h in first.headers] == [("trace", b"t0")]


def test_write_strings_partitions_and_null_keys(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    _create(data, "out", 3)
    pinned = spark.createDataFrame([("a", "x", 2), ("b", "y", 0)], "key string, value string, partition int")
    _save(pinned, "out", path=str(data))
    nulls = spark.createDataFrame([(f"n{i}",) for i in range(30)], "value string").repartition(2)
    _save(nulls, "out", path=str(data))
    written = log_records(data, "out")
    assert [(r.key, r.value) for r in written[2] if r.key] == [(b"a", b"x")]
    assert [(r.key, r.value) for r in written[0] if r.key] == [(b"b", b"y")]
    keyless = sorted(r.value for recs in written.values() for r in recs if r.key is None)
    assert keyless == sorted(f"n{i}".encode() for i in range(30))
    assert all(any(r.key is None for r in recs) for recs in written.values())  # spread out


@pytest.fixture(scope="module")
def broker_args() -> tuple[str, ...]:
    return ("--default-partitions", "2")  # the module's ``broker`` (tests/support/plugin.py)


def test_write_through_the_owner_and_over_the_wire(spark: Any, broker: BrokerProcess) -> None:
    data = broker.data_dir

    async def create() -> None:
        async with KafkaTools(broker.bootstrap) as tools:
            await tools.create_topic("wired", 2, {})

    asyncio.run(create())
    # The broker owns the directory: a write to its path goes through the owner's port.
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(40)], "key string, value string")
    _save(df, "wired", path=str(data))
    _save(df, "wired", bootstrap=broker.bootstrap)
    # Read back both ways: the segment files (read-only, under the owner) and the wire.
    by_files = spark.read.format("streamkit").option("path", str(data)).option("topic", "wired").load()
    by_wire = spark.read.format("streamkit").option("bootstrap", broker.bootstrap).option("topic", "wired").load()
    files_rows = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in by_files.collect())
    wire_rows = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in by_wire.collect())
    assert len(files_rows) == 80
    assert files_rows == wire_rows
    for p, _o, key, _v in files_rows:
        assert p == partition_for_key(key, 2)
    counts: dict[bytes, int] = {}
    for _p, _o, _k, value in files_rows:
        counts[value] = counts.get(value, 0) + 1
    assert set(counts.values()) == {2}


def test_write_compressed_batches(spark: Any, tmp_path: Path) -> None:
    from streamkit.log import compression
    from streamkit.log.reader import read_batches

    data = tmp_path / "data"
    _create(data, "packed", 1)
    df = spark.createDataFrame([(f"v{i}" * 20,) for i in range(50)], "value string").coalesce(1)
    _save(df, "packed", path=str(data), compression="zstd")
    batches = list(read_batches(data, "packed", 0, 0))
    assert batches and all(h.compression == compression.CODEC_IDS["zstd"] for h, _ in batches)
    back = spark.read.format("streamkit").option("path", str(data)).option("topic", "packed").load()
    assert sorted(bytes(r.value) for r in back.collect()) == sorted((f"v{i}" * 20).encode() for i in range(50))
