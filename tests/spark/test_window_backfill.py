"""Windowed backfill: the worker's window driver run on Spark over the log's history gives the
windows, closes and late records a worker gives over the same log, and a worker started
afterwards serves those windows, carries on with their stream time and emit progress, and
processes only newer records."""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import streamkit as sk
from streamkit.testing import AppDriver

HERE = Path(__file__).resolve().parent
BASE = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a round minute
CLICKS = [(f"c{i}", {"page": f"p{i % 4}", "n": i}, BASE + i * 1_000) for i in range(240)]
CHUNK = 20  # the replaying worker gets 20 s of clicks at a time: less than the grace (30 s)


def _module(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> Any:
    monkeypatch.setenv("BF_BROKER", f"file://{data_dir}")
    monkeypatch.syspath_prepend(str(HERE))
    sys.modules.pop("window_app", None)
    return importlib.import_module("window_app")


def _load(data_dir: Path, topic: str, key_type: Any, value_type: Any, partitions: int,
          records: list[tuple[str, Any, int]]) -> None:
    """The history, written by an app that only declares the topic."""
    loader = sk.App("loader")
    declared = loader.topic(topic, key_type=key_type, value_type=value_type, partitions=partitions)

    async def load() -> None:
        async with AppDriver(loader, data_dir=str(data_dir)) as driver:
            for key, value, ts in records:
                await driver.send(declared, value, key=key, timestamp=ts)

    asyncio.run(load())


def _windows(table: Any) -> dict[tuple[str, int, int], Any]:
    return {(k, s, e): v for (k, (s, e)), v in table.items()}


def _late(events: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (e.key, json.dumps(e.value), tuple((k, v) for k, v in e.headers)) for e in events
    )


def _closed(events: list[Any]) -> list[tuple[str, int, int, int]]:
    return [(e.key, e.value["window_start"], e.value["window_end"], e.value["value"]) for e in events]


def test_a_windowed_backfill_equals_the_worker_and_the_worker_carries_on(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamkit.spark.backfill import backfill

    history, replay = tmp_path / "history", tmp_path / "replay"
    module = _module(monkeypatch, history)
    _load(history, "clicks", str, dict, 3, CLICKS)
    later = ("c999", {"page": "p0", "n": 999}, BASE + 400_000)  # closes every backfilled window

    async def worker() -> tuple[dict[Any, int], list[Any], list[Any], list[Any]]:
        """A worker that sees the clicks as they come, CHUNK at a time, then one more."""
        async with AppDriver(module.app, data_dir=str(replay), state_dir=str(tmp_path / "replay-state")) as driver:
            for i in range(0, len(CLICKS), CHUNK):
                for key, value, ts in CLICKS[i : i + CHUNK]:
                    await driver.send(module.clicks, value, key=key, timestamp=ts)
                await driver.process()
            windows = _windows(module.per_page)
            closed = _closed(await driver.read(module.page_windows))
            late = await driver.read(module.app.topics["wbf-late"])
            await driver.send(module.clicks, later[1], key=later[0], timestamp=later[2])
            await driver.process()
            after = _closed(await driver.read(module.page_windows))[len(closed) :]
            return windows, closed, late, after

    windows, closed, late, closed_later = asyncio.run(worker())
    assert late == [] and closed and windows  # closes happened, nothing was late
    assert sum(v for *_, v in closed) + sum(windows.values()) == 3 * len(CLICKS)  # 3 hops per click

    # Every window once, with its final value: what the worker emitted on close, then held.
    everything = backfill(spark, "window_app:app", "clicks_per_page", to_topic="all-page-windows")[0]
    assert everything.to_topic == "all-page-windows" and everything.records_read == len(CLICKS)
    rows = spark.read.format("streamkit").option("path", str(history)).option("topic", "all-page-windows").load()
    got = sorted(
        (bytes(r.key).decode(), (body := json.loads(bytes(r.value)))["window_start"], body["window_end"], body["value"])
        for r in rows.collect()
    )
    assert got == sorted([*closed, *((k, s, e, v) for (k, s, e), v in windows.items())])

    report = backfill(spark, "window_app:app", "clicks_per_page")[0]
    assert report.records_read == len(CLICKS) and report.late == 0
    assert report.windows == len(windows) and sum(report.ends.values()) == len(CLICKS)

    async def after_backfill() -> tuple[dict[Any, int], list[Any], list[Any]]:
        async with AppDriver(module.app, data_dir=str(history), state_dir=str(tmp_path / "state")) as driver:
            await driver.process()
            served = _windows(module.per_page)
            before = _closed(await driver.read(module.page_windows))
            await driver.send(module.clicks, later[1], key=later[0], timestamp=later[2])
            await driver.process()
            return served, before, _closed(await driver.read(module.page_windows))

    served, before, emitted = asyncio.run(after_backfill())
    assert served == windows  # the worker's windows, restored from the backfilled changelog
    # The declared output topic (to_stream(emit="close").to(page_windows)) holds what the
    # replaying worker wrote: the windows stream time closed, each once, in the worker's order.
    assert before == closed
    assert report.streams == {"wbf-clicks_per_page-windows": len(closed), "page-windows": len(closed)}
    # The new click closes the backfilled windows with the worker's counts, and only those not
    # emitted yet (stream time and emit progress came with the state); nothing was forwarded
    # twice (the group moved past the windows the backfill wrote).
    assert emitted == [*closed, *closed_later]


def _visits() -> list[tuple[str, str, int]]:
    """Visits of five users, out of order within their partitions, some beyond the grace."""
    rnd = random.Random(7)
    out = []
    for i in range(150):
        ts = BASE + i * 4_000 - rnd.choice([0, 0, 0, 3_000, 20_000, 90_000])
        out.append((f"u{rnd.randrange(5)}", f"page{rnd.randrange(9)}", max(ts, BASE)))
    return out


def test_late_records_and_sessions_equal_the_worker_record_for_record(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a repartition a task reads its partition in offset order: the backfill's order
    is exactly the worker's, so even late records agree."""
    from streamkit.spark.backfill import backfill

    history, replay = tmp_path / "history", tmp_path / "replay"
    module = _module(monkeypatch, history)
    visits = _visits()
    _load(history, "visits", str, str, 2, visits)
    shutil.copytree(history, replay)

    async def run(data_dir: Path, state: str) -> tuple[dict[Any, Any], list[Any]]:
        async with AppDriver(module.app, data_dir=str(data_dir), state_dir=str(tmp_path / state)) as driver:
            await driver.process()
            return _windows(module.sessions), _late(await driver.read(module.app.topics["wbf-late"]))

    sessions, late = asyncio.run(run(replay, "replay-state"))
    assert late and sessions  # the history has late records

    report = backfill(spark, "window_app:app", "visit_sessions")[0]
    assert report.late == len(late) and report.records_read == len(visits)
    served, backfilled_late = asyncio.run(run(history, "state"))
    assert served == sessions  # the same sessions, their pages in the same order
    assert backfilled_late == late  # the same late records, with the same reasons and stream times


@pytest.mark.parametrize("scan", ["driver", "spark"])
def test_a_second_backfill_replaces_the_first(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scan: str
) -> None:
    """Windows of an earlier changelog that the new result lacks are deleted, not served
    (the earlier changelog's keys read in the driver, as a small one is, or on Spark)."""
    from streamkit.spark.backfill import backfill

    if scan == "spark":
        monkeypatch.setattr(importlib.import_module("streamkit.spark.writes"), "DRIVER_SCAN", 0)

    module = _module(monkeypatch, tmp_path / "log")
    _load(tmp_path / "log", "visits", str, str, 2, [("u1", "a", BASE), ("u2", "b", BASE + 10_000)])
    first = backfill(spark, "window_app:app", "visit_sessions")[0]
    assert first.windows == 2 and first.deleted == 0
    # Only the later visit: u1's session is not in the result any more.
    second = backfill(spark, "window_app:app", "visit_sessions", from_ms=BASE + 5_000)[0]
    # u1's window and its index entry; the stream time of the partitions without u2 goes too
    assert second.records_read == 1 and second.windows == 1 and second.deleted in (2, 3)
    third = backfill(spark, "window_app:app", "visit_sessions", from_ms=BASE + 5_000)[0]
    assert third.deleted == 0  # keys deleted before are not deleted again

    async def served() -> dict[Any, Any]:
        async with AppDriver(module.app, data_dir=str(tmp_path / "log"), state_dir=str(tmp_path / "state")) as driver:
            await driver.process()
            return _windows(module.sessions)

    assert asyncio.run(served()) == {("u2", BASE + 10_000, BASE + 10_000): ["b"]}


def test_a_backfill_over_the_kafka_protocol(
    spark: Any, bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unique: str
) -> None:
    """An app on ``kafka://`` is backfilled over the wire (``streamkit broker`` and Apache
    Kafka): the source read, the changelog written and the group committed through the Kafka
    protocol, and the changelog read back by the data source's ``bootstrap`` option. Both are
    shared: the app is named by the test (``BF_ID``)."""
    from streamkit.log.records import NewRecord
    from streamkit.spark.backfill import backfill
    from streamkit.spark.logs import BrokerLog
    from streamkit.transport.kafka_tools import KafkaTools

    monkeypatch.setenv("BF_BROKER", f"kafka://{bootstrap}")
    monkeypatch.setenv("BF_ID", unique)
    monkeypatch.syspath_prepend(str(HERE))
    sys.modules.pop("window_app", None)
    module = importlib.import_module("window_app")
    topic = module.visits.name
    # Moved to now, a whole number of minutes on: a broker deletes records older than
    # retention.ms (7 days) even from a partition's only segment, and 2023's would be gone at
    # its next retention check (docs/kafka.md, retention).
    shift = (int(time.time() * 1000) - BASE) // 60_000 * 60_000
    visits = [(user, page, ts + shift) for user, page, ts in _visits()[:60]]

    async def create() -> None:
        async with KafkaTools(bootstrap) as tools:
            await tools.create_topic(topic, 2, {})

    asyncio.run(create())
    log = BrokerLog(bootstrap, topic)
    try:
        from streamkit._core.partitioner import partition_for_key

        for p in range(2):
            log.append(p, [NewRecord(k.encode(), v.encode(), ts, ())
                           for k, v, ts in visits if partition_for_key(k.encode(), 2) == p], "none")
    finally:
        log.close()
    # The same history on files, for the worker's answer.
    _load(tmp_path / "files", topic, str, str, 2, visits)

    async def worker() -> tuple[dict[Any, Any], int]:
        async with AppDriver(module.app, data_dir=str(tmp_path / "files"), state_dir=str(tmp_path / "s")) as d:
            await d.process()
            return _windows(module.sessions), len(await d.read(module.app.topics[f"{unique}-late"]))

    sessions, late = asyncio.run(worker())
    report = backfill(spark, "window_app:app", "visit_sessions")[0]
    assert report.records_read == len(visits) and report.late == late
    assert report.windows == len(sessions)

    async def committed() -> dict[int, int]:
        async with KafkaTools(bootstrap) as tools:
            return await tools.committed(unique, topic)

    assert asyncio.run(committed()) == report.ends
    changelog = (spark.read.format("streamkit").option("bootstrap", bootstrap)
                 .option("topic", module.sessions.table.changelog_topic.name).load())
    from streamkit.windows import decode_window_key

    stored = {}
    for r in changelog.collect():
        if bytes(r.key)[:1] == b"\x01":  # a window: max timestamp (8 bytes) | aggregate
            key, start, end = decode_window_key(bytes(r.key)[1:])
            stored[(key.decode(), start, end)] = json.loads(bytes(r.value)[8:])
    assert stored == sessions  # the worker's sessions, in the worker's store layout
