"""Batch reads: the data source returns exactly the records the log holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamkit.log import compression
from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord
from streamkit.spark import logs
from streamkit.spark.columns import column_batches
from streamkit.spark.logs import BrokerLog, FileLog
from tests.spark.conftest import as_tuples, expected_tuples, log_records, make_topic
from tests.support.broker import BrokerProcess


def read(spark: Any, data_dir: Path, topic: str, **options: str) -> Any:
    reader = spark.read.format("streamkit").option("path", str(data_dir)).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_multi_partition_topic_reads_exactly_the_log(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "orders", 3, 200)
    truth = log_records(data, "orders")
    df = read(spark, data, "orders")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
    ]
    assert df.rdd.getNumPartitions() == 3  # one Spark partition per log partition
    rows = df.selectExpr("*", "unix_millis(timestamp) AS ts").collect()
    assert len(rows) == 600
    assert as_tuples(rows) == expected_tuples(truth)
    stamps = {(r.partition, r.offset): r.ts for r in rows}
    assert stamps == {(p, r.offset): r.timestamp for p, recs in truth.items() for r in recs}
    assert {r.topic for r in rows} == {"orders"}
    assert {r.timestampType for r in rows} == {0}
    # As Spark's Kafka source: null headers for a record without any (every other one here).
    assert {r.headers is None for r in rows} == {True, False}
    held = {(p, rec.offset): rec for p, recs in truth.items() for rec in recs}
    assert all((r.headers is None) == (not held[r.partition, r.offset].headers) for r in rows)
    # Only key, value and headers can be null: the rest are declared not nullable.
    assert [f.name for f in df.schema.fields if f.nullable] == ["key", "value", "headers"]


def test_large_partitions_split_by_offset_ranges(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "big", 2, 250, batch=13)
    df = read(spark, data, "big", maxRecordsPerPartition="60")
    assert df.rdd.getNumPartitions() == 2 * 5  # 250 offsets in pieces of at most 60
    assert as_tuples(df.collect()) == expected_tuples(log_records(data, "big"))


def test_offset_ranges_as_spark_spells_them(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 3, 50)
    truth = log_records(data, "t")
    starting = json.dumps({"t": {"0": 10, "1": -2}})  # partition 2 left out: earliest
    ending = json.dumps({"t": {"0": 20, "2": 45}})  # partition 1 left out: latest
    rows = read(spark, data, "t", startingOffsets=starting, endingOffsets=ending).collect()
    want = {0: range(10, 20), 1: range(0, 50), 2: range(0, 45)}
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in sorted(want) for o in want[p]
    ]
    by_offset = {(p, r.offset): r.value for p, recs in truth.items() for r in recs}
    assert all(by_offset[(r.partition, r.offset)] == r.value for r in rows)


def test_timestamp_ranges(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    ts0 = 1_700_000_000_000
    make_topic(data, "t", 2, 40, ts0=ts0)  # record i has timestamp ts0 + 10 * i
    rows = read(
        spark, data, "t", startingTimestamp=str(ts0 + 55), endingTimestamp=str(ts0 + 200)
    ).collect()
    # The first record at or after +55 is i=6; the end (exclusive) is the first at +200, i=20.
    assert sorted((r.partition, r.offset) for r in rows) == [(p, i) for p in (0, 1) for i in range(6, 20)]
    late = read(spark, data, "t", startingTimestamp=str(ts0 + 10**9)).count()
    assert late == 0


def test_bad_offsets_options_are_refused(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 1, 10)
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, data, "t", startingOffsets="{not json").collect()
    with pytest.raises(Exception, match="out of range"):
        read(spark, data, "t", endingOffsets=json.dumps({"t": {"0": 11}})).collect()
    with pytest.raises(Exception, match="names topics"):
        read(spark, data, "t", startingOffsets=json.dumps({"other": {"0": 1}})).collect()


def test_compacted_topic(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
    with LogManager(data, background=False) as log:
        log.create_topic("latest", 1, config)
        part = log.partition("latest", 0)
        for round_ in range(20):
            part.append_records(
                [NewRecord(f"key-{k}".encode(), f"{round_}".encode() * 8, 1000 + round_) for k in range(5)]
            )
        log.run_upkeep(force_compaction=True)
    truth = log_records(data, "latest")[0]
    assert len(truth) < 100  # the cleaner removed superseded values: offsets have gaps
    rows = read(spark, data, "latest").collect()
    assert sorted((r.offset, bytes(r.key), bytes(r.value)) for r in rows) == [
        (r.offset, r.key, r.value) for r in truth
    ]
    latest = {bytes(r.key): bytes(r.value) for r in sorted(rows, key=lambda r: r.offset)}
    assert latest == {f"key-{k}".encode(): b"19" * 8 for k in range(5)}


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(spark: Any, tmp_path: Path, codec: str) -> None:
    data = tmp_path / "data"
    make_topic(data, "packed", 2, 60, batch=20, codec=compression.CODEC_IDS[codec])
    rows = read(spark, data, "packed").collect()
    assert as_tuples(rows) == expected_tuples(log_records(data, "packed"))


def test_reads_while_another_process_owns_the_directory(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 2, 30)
    with LogManager(data, background=False) as owner:  # holds the lock, as a worker would
        owner.partition("t", 1).append_records([NewRecord(b"late", b"arrival", 5)])
        files_before = sorted((p.name, p.stat().st_size) for p in (data / "t-0").iterdir())
        rows = read(spark, data, "t").collect()
        assert len(rows) == 61
        assert any(r.key == b"late" and r.partition == 1 and r.offset == 30 for r in rows)
        # Read-only: no file was recovered, truncated or rewritten under the owner.
        assert sorted((p.name, p.stat().st_size) for p in (data / "t-0").iterdir()) == files_before


def test_values_decoded_into_typed_columns(spark: Any, tmp_path: Path) -> None:
    import msgspec

    from tests.spark.shop import Order

    data = tmp_path / "data"
    orders = [Order(order_id=f"o-{i}", user=f"u{i % 3}", amount=i * 1.5, tags=["a"] * (i % 2)) for i in range(10)]
    with LogManager(data, background=False) as log:
        log.create_topic("orders", 1)
        log.partition("orders", 0).append_records(
            [NewRecord(o.user.encode(), msgspec.json.encode(o), 1000 + i) for i, o in enumerate(orders)]
            + [NewRecord(b"gone", None, 2000)]
        )
    for option, ref in (("valueType", "tests.spark.shop:Order"), ("valueApp", "tests.spark.shop:app")):
        df = read(spark, data, "orders", **{option: ref})
        assert df.schema["value"].dataType.simpleString() == (
            "struct<order_id:string,user:string,amount:double,tags:array<string>>"
        )
        rows = df.orderBy("offset").select("value.*").collect()
        assert [tuple(r) for r in rows[:10]] == [(o.order_id, o.user, o.amount, o.tags) for o in orders]
        assert tuple(rows[10]) == (None, None, None, None)  # a tombstone: a null value
        total = df.where("value IS NOT NULL").groupBy("value.user").sum("value.amount").orderBy("user").collect()
        assert [(r[0], r[1]) for r in total] == [
            (u, sum(o.amount for o in orders if o.user == u)) for u in ("u0", "u1", "u2")
        ]


def test_broker_reads_give_the_rows_of_the_segment_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over ``bootstrap`` the data source fetches the batches as the broker keeps them and
    decodes them column-wise, as it decodes the files' batches: the same rows for every
    range (cut inside batches too), compressed batches and headers, with fetches smaller than
    a batch."""
    data = tmp_path / "owned"
    topics = {"plain": (2, 300), "packed": (1, 200)}
    make_topic(data, "plain", 2, 300, batch=7)
    make_topic(data, "packed", 1, 200, batch=50, codec=compression.ZSTD)
    monkeypatch.setattr(logs, "_FETCH_BYTES", 200)  # many fetches, each smaller than a batch
    broker = BrokerProcess(data).start(same_port=False)
    try:
        for topic, (partitions, count) in topics.items():
            files, wire = FileLog(str(data), topic), BrokerLog(broker.bootstrap, topic)
            try:
                for p in range(partitions):
                    for start, end in ((0, count), (5, count - 3), (13, 14), (count, count)):
                        want = _rows(column_batches(topic, p, files.batches(p, start, end), start, end, include_headers=True))
                        got = _rows(column_batches(topic, p, wire.batches(p, start, end), start, end, include_headers=True))
                        assert got == want and len(want) == end - start, (topic, p, start, end)
            finally:
                wire.close()
    finally:
        assert broker.stop() == 0, broker.stderr()


def _rows(batches: Iterator[Any]) -> list[dict[str, Any]]:
    return [row for batch in batches for row in batch.to_pylist()]
