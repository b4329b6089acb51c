"""Backfill of what hangs off a table: the topic a worker writes a table's ``to_stream(...)``
to, and the map/filter pipelines into topics after it, hold what a worker replaying the
history writes; and plain reducers that do not commute fold in the worker's order."""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import streamkit as sk
from streamkit._core.errors import ConfigError
from streamkit.testing import AppDriver

HERE = Path(__file__).resolve().parent
BASE = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a round minute


def _module(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> Any:
    monkeypatch.setenv("BF_BROKER", f"file://{data_dir}")
    monkeypatch.syspath_prepend(str(HERE))
    sys.modules.pop("stream_app", None)
    return importlib.import_module("stream_app")


def _load(data_dir: Path, topic: str, value_type: Any, partitions: int, records: list[tuple[str, Any, int]]) -> None:
    """The history, written by an app that only declares the topic."""
    loader = sk.App("loader")
    declared = loader.topic(topic, key_type=str, value_type=value_type, partitions=partitions)

    async def load() -> None:
        async with AppDriver(loader, data_dir=str(data_dir)) as driver:
            for key, value, ts in records:
                await driver.send(declared, value, key=key, timestamp=ts)

    asyncio.run(load())


def _topic(spark: Any, data_dir: Path, topic: str) -> list[tuple[int, int, str, str | None, int]]:
    """(partition, offset, key, value, timestamp) of every record of ``topic``."""
    rows = spark.read.format("streamkit").option("path", str(data_dir)).option("topic", topic).load().collect()
    return sorted(
        (r.partition, r.offset, bytes(r.key).decode(), None if r.value is None else bytes(r.value).decode(),
         int(r.timestamp.timestamp() * 1000))
        for r in rows
    )


def _shuffled(keys: int, n: int, seed: int) -> list[tuple[str, int]]:
    """(key, timestamp) of ``n`` records, out of order within their keys, a few beyond a 10 s
    grace."""
    rnd = random.Random(seed)
    return [(f"k{rnd.randrange(keys)}", BASE + i * 2_000 - rnd.choice([0, 0, 0, 5_000, 30_000])) for i in range(n)]


def test_a_windowed_tables_update_stream_and_the_topic_after_it_equal_the_workers(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamkit.spark.backfill import backfill

    history, replay = tmp_path / "history", tmp_path / "replay"
    module = _module(monkeypatch, history)
    views = [(key, i % 3 + 1, max(ts, BASE)) for i, (key, ts) in enumerate(_shuffled(4, 120, 3))]
    _load(history, "views", int, 2, views)
    shutil.copytree(history, replay)

    async def worker(data_dir: Path, state: str) -> None:
        async with AppDriver(module.app, data_dir=str(data_dir), state_dir=str(tmp_path / state)) as driver:
            await driver.process()

    asyncio.run(worker(replay, "replay-state"))
    windows, updates = "sbf-view_totals-windows", "view-updates"
    emitted, forwarded = _topic(spark, replay, windows), _topic(spark, replay, updates)
    assert forwarded and len(forwarded) < len(emitted)  # the filter dropped some

    report = backfill(spark, "stream_app:app", "view_totals")[0]
    assert report.late > 0 and report.streams == {windows: len(emitted), updates: len(forwarded)}
    # Record for record, offsets and timestamps included: every update of every window.
    assert _topic(spark, history, windows) == emitted
    assert _topic(spark, history, updates) == forwarded

    async def after_backfill() -> None:
        async with AppDriver(module.app, data_dir=str(history), state_dir=str(tmp_path / "state")) as driver:
            await driver.process()
            assert len(_topic(spark, history, updates)) == len(forwarded)  # nothing forwarded twice
            await driver.send(module.views, 5, key="k1", timestamp=BASE + 400_000)
            await driver.process()

    asyncio.run(after_backfill())
    assert _topic(spark, history, updates)[len(forwarded):] == [(
        sk_partition("k1", 2), sum(1 for p, *_ in forwarded if p == sk_partition("k1", 2)), "k1",
        json.dumps(f"{(BASE + 400_000) // 30_000 * 30_000}:5"), BASE + 400_000,
    )]


def sk_partition(key: str, count: int) -> int:
    from streamkit._core.partitioner import partition_for_key

    return partition_for_key(key.encode(), count)


def test_a_reducer_that_does_not_commute_folds_in_the_workers_order(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a repartition a table partition's task reads one source partition in offset
    order, whatever the timestamps: so does the backfill. The table's changes then reach the
    topic the app forwards them to, and a worker started afterwards forwards only new ones."""
    from streamkit.spark.backfill import backfill

    history, replay = tmp_path / "history", tmp_path / "replay"
    module = _module(monkeypatch, history)
    words = [(key, f"w{i}.", ts) for i, (key, ts) in enumerate(_shuffled(5, 150, 11))]
    _load(history, "words", str, 2, words)
    shutil.copytree(history, replay)

    async def worker(data_dir: Path, state: str) -> dict[str, str]:
        async with AppDriver(module.app, data_dir=str(data_dir), state_dir=str(tmp_path / state)) as driver:
            await driver.process()
            return dict(module.joined.items())

    joined = asyncio.run(worker(replay, "replay-state"))
    assert joined == {k: "".join(w for key, w, _ in words if key == k) for k in joined}  # arrival order

    report = backfill(spark, "stream_app:app", "joined")[0]
    assert report.keys_written == len(joined) and report.streams == {"joined-changes": len(joined)}
    changes = _topic(spark, history, "joined-changes")
    assert {key: json.loads(value or "null") for *_, key, value, _ts in changes} == {
        k: v.upper() for k, v in joined.items()
    }

    async def after_backfill() -> dict[str, str]:
        async with AppDriver(module.app, data_dir=str(history), state_dir=str(tmp_path / "state")) as driver:
            await driver.process()
            served = dict(module.joined.items())
            await driver.send(module.words, "new.", key="k1", timestamp=BASE)
            await driver.process()
            return served

    assert asyncio.run(after_backfill()) == joined
    new = _topic(spark, history, "joined-changes")[len(changes):]
    assert [(key, json.loads(value or "null")) for _p, _o, key, value, _ts in new] == [
        ("k1", (joined["k1"] + "new.").upper())
    ]


def test_after_a_repartition_of_one_source_partition_the_fold_is_the_workers(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamkit.spark.backfill import backfill

    history, replay = tmp_path / "history", tmp_path / "replay"
    module = _module(monkeypatch, history)
    rnd = random.Random(5)
    letters = [(f"l{i}", rnd.choice("abc") + str(i), ts) for i, (_k, ts) in enumerate(_shuffled(1, 90, 5))]
    _load(history, "letters", str, 1, letters)
    shutil.copytree(history, replay)

    async def worker(data_dir: Path, state: str) -> dict[str, list[str]]:
        async with AppDriver(module.app, data_dir=str(data_dir), state_dir=str(tmp_path / state)) as driver:
            await driver.process()
            return dict(module.initials.items())

    initials = asyncio.run(worker(replay, "replay-state"))
    assert initials == {c: [w for _k, w, _ts in letters if w[0] == c] for c in "abc"}  # offset order
    backfill(spark, "stream_app:app", "initials")
    assert asyncio.run(worker(history, "state")) == initials


def test_a_tables_stream_read_by_what_the_backfill_cannot_run_is_refused(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamkit.spark.backfill import backfill

    module = _module(monkeypatch, tmp_path / "log")
    module.view_totals.to_stream(emit="update").group_by(lambda w: w["value"], name="v").count("by_value")
    with pytest.raises(ConfigError, match=r"'sbf-view_totals-windows' .* feeds table 'by_value'"):
        backfill(spark, "stream_app:app", "view_totals")

    @module.app.agent(module.joined.table.changelog_topic)
    async def audit(stream: Any) -> None:
        async for _ in stream:
            pass

    with pytest.raises(ConfigError, match=r"also read by \['.*audit'\]"):
        backfill(spark, "stream_app:app", "joined")


@pytest.mark.parametrize("merge", ["driver", "spark"])
def test_counts_by_the_sources_keys_and_by_keys_of_several_types_equal_the_workers(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, merge: str
) -> None:
    """Each task's counts added up in the driver (a few tasks) or by Spark (many)."""
    from streamkit.spark.backfill import backfill

    if merge == "spark":
        monkeypatch.setattr(importlib.import_module("streamkit.spark.backfill"), "DRIVER_MERGE_TASKS", 0)

    history, replay = tmp_path / "history", tmp_path / "replay"
    module = _module(monkeypatch, history)
    kinds: list[Any] = [1, True, "1", 2.5, False, 0, "a"]
    taps = [(f"t{i % 7}", {"n": i, "kind": kinds[i % len(kinds) - i % 3]}, BASE + i) for i in range(300)]
    _load(history, "taps", dict, 2, taps)
    shutil.copytree(history, replay)

    async def worker(data_dir: Path, state: str) -> tuple[dict[Any, int], dict[Any, int]]:
        async with AppDriver(module.app, data_dir=str(data_dir), state_dir=str(tmp_path / state)) as driver:
            await driver.process()
            return dict(module.tap_keys.items()), {repr(k): v for k, v in module.tap_kinds.items()}

    by_key, by_kind = asyncio.run(worker(replay, "replay-state"))
    assert sum(by_key.values()) == len(taps) and len(by_kind) == len(kinds)
    assert sum(by_kind.values()) == sum(1 for _k, t, _ts in taps if t["n"] % 5 != 0)
    backfill(spark, "stream_app:app", "tap_keys", "tap_kinds")
    assert asyncio.run(worker(history, "state")) == (by_key, by_kind)


def test_the_backfill_command_says_what_it_wrote_to_the_tables_stream(tmp_path: Path) -> None:
    import os
    import subprocess

    streamkit = str(Path(sys.executable).parent / "streamkit")
    env = {**os.environ, "BF_BROKER": f"file://{tmp_path / 'log'}", "PYTHONPATH": str(HERE), "TMPDIR": str(tmp_path)}
    _load(tmp_path / "log", "words", str, 2, [("a", "x", BASE), ("b", "y", BASE + 1), ("a", "z", BASE + 2)])
    done = subprocess.run([streamkit, "backfill", "-A", "stream_app:app", "--table", "joined"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "joined: 3 records read, 2 keys written to its changelog, 2 records written to topic joined-changes" \
        in done.stdout


def test_a_jobs_table_reaches_the_topic_after_its_stream(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamkit.spark.jobs import run_job

    history = tmp_path / "history"
    _module(monkeypatch, history)
    _load(history, "words", str, 2, [("a", "x", BASE), ("b", "y", BASE + 1), ("a", "z", BASE + 2)])
    report = run_job(spark, "stream_app:app", "stream_app:words_per_key", table="joined")
    assert report.keys_written == 2 and report.streams == {"joined-changes": 2}
    changes = _topic(spark, history, "joined-changes")
    assert sorted((key, json.loads(value or "null")) for _p, _o, key, value, _ts in changes) == [("a", "2"), ("b", "1")]
