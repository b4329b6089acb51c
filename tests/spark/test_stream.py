"""Structured Streaming over a topic that grows while the query runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord
from tests.spark.conftest import make_topic

WAIT_S = 60.0


def _wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _append(data: Path, topic: str, partition: int, values: list[str]) -> None:
    with LogManager(data, background=False) as log:
        log.partition(topic, partition).append_records(
            [NewRecord(v.encode(), v.encode(), 1000) for v in values]
        )


def _seen(spark: Any, out: Path) -> list[tuple[int, int, str | None]]:
    """What the query wrote to its Parquet sink (the sink's own log: committed batches only)."""
    if not (out / "_spark_metadata").exists():
        return []
    return sorted(
        (r.partition, r.offset, None if r.value is None else bytes(r.value).decode())
        for r in spark.read.schema("partition int, offset long, value binary").parquet(str(out)).collect()
    )


def _start(spark: Any, data: Path, checkpoint: Path, out: Path, **options: str) -> Any:
    reader = spark.readStream.format("streamkit").option("path", str(data)).option("topic", "live")
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_streaming_tails_a_growing_topic_with_checkpointed_progress(spark: Any, tmp_path: Path) -> None:
    data, checkpoint, out = tmp_path / "data", tmp_path / "checkpoint", tmp_path / "out"
    make_topic(data, "live", 2, 5)  # already there: skipped, streaming starts at latest
    query = _start(spark, data, checkpoint, out)
    try:
        _wait_for("the first batch", lambda: query.lastProgress is not None)
        _append(data, "live", 0, ["a0", "a1"])
        _append(data, "live", 1, ["b0"])
        _wait_for("3 records", lambda: len(_seen(spark, out)) == 3)
        _append(data, "live", 1, ["b1", "b2"])
        with LogManager(data, background=False) as log:
            log.add_partitions("live", 3)  # the topic grows a partition while the query runs
        _append(data, "live", 2, ["c0"])
        want = [(0, 5, "a0"), (0, 6, "a1"), (1, 5, "b0"), (1, 6, "b1"), (1, 7, "b2"), (2, 0, "c0")]
        _wait_for("6 records", lambda: _seen(spark, out) == want)
    finally:
        query.stop()
    # A restart goes on from the checkpoint: only what was appended since, each record once.
    _append(data, "live", 0, ["a2"])
    query = _start(spark, data, checkpoint, out)
    try:
        want = sorted([*want, (0, 7, "a2")])
        _wait_for("the new record", lambda: _seen(spark, out) == want)
        query.processAllAvailable()
        assert _seen(spark, out) == want
    finally:
        query.stop()


def test_max_offsets_per_trigger(spark: Any, tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    make_topic(data, "live", 2, 45)
    query = _start(spark, data, tmp_path / "cp", out, startingOffsets="earliest", maxOffsetsPerTrigger="20")
    try:
        _wait_for("90 records", lambda: len(_seen(spark, out)) == 90)
        assert _seen(spark, out) == sorted(
            (p, i, (f"v{p}-{i}" * (1 + i % 4)) if i % 5 != 4 else None) for p in (0, 1) for i in range(45)
        )
        rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert max(rows) <= 20 and sum(rows) == 90
    finally:
        query.stop()
