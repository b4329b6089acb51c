"""The backfill folds each table partition in the order a worker with ``max_task_drift_ms=0``
gives it (issue 22): the upstream tasks hand out the records of every source partition feeding
the repartition topic in one timestamp merge (``heapq.merge`` of the whole partitions), and each
repartition partition receives its part of that merge. The model below computes that order
straight from the merge; the backfill must fold, window and drop late records exactly so, also
when a partition is read by several Spark tasks and when the backfill starts mid-partition."""

from __future__ import annotations

import heapq
import importlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord
from tests.spark.conftest import log_records

HERE = Path(__file__).resolve().parent
BASE = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a round minute
PARTITIONS = 4
SIZE_MS, GRACE_MS = 10_000, 2_000  # order_app's tumbling windows


def _events() -> list[list[tuple[str, int, int]]]:
    """Per source partition, in offset order: (user, event number, timestamp ms). Each
    partition runs at its own pace and is out of order by up to 8 s (beyond the grace)."""
    rnd = random.Random(22)
    out: list[list[tuple[str, int, int]]] = []
    n = 0
    for p in range(PARTITIONS):
        records = []
        for i in range(40):
            ts = BASE + i * (700 + 300 * p) - rnd.choice([0, 0, 0, 1_500, 4_000, 8_000])
            records.append((f"u{rnd.randrange(6)}", n, max(ts, BASE)))
            n += 1
        out.append(records)
    return out


def _write(data_dir: Path, events: list[list[tuple[str, int, int]]]) -> None:
    with LogManager(data_dir, background=False) as log:
        log.create_topic("events", PARTITIONS)
        for p, records in enumerate(events):
            part = log.partition("events", p)
            for at in range(0, len(records), 3):  # batches of 3: splits and starts cut batches
                part.append_records([
                    NewRecord(f"e{n}".encode(), json.dumps({"user": user, "n": n}).encode(), ts)
                    for user, n, ts in records[at : at + 3]
                ])


def _module(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> Any:
    monkeypatch.setenv("BF_BROKER", f"file://{data_dir}")
    monkeypatch.syspath_prepend(str(HERE))
    sys.modules.pop("order_app", None)
    return importlib.import_module("order_app")


def _received(module: Any, table: str, events: list[list[tuple[str, int, int]]], starts: list[int]) -> dict[int, list[tuple[str, int, int]]]:
    """The model: per repartition partition, what it receives from the whole merge of the
    source partitions (each in offset order; ties: the lower partition), without the records
    before ``starts`` (a backfill from there: those were processed before)."""
    from streamkit._core.partitioner import partition_for_key
    from streamkit.spark.planning import plan_of

    keys = plan_of(module.app, table).repartitions[0].topic.key_serde
    named = [[(ts, p, offset, user, n) for offset, (user, n, ts) in enumerate(records)] for p, records in enumerate(events)]
    out: dict[int, list[tuple[str, int, int]]] = {}
    for ts, p, offset, user, n in heapq.merge(*named, key=lambda r: r[0]):
        if offset >= starts[p]:
            out.setdefault(partition_for_key(keys.dumps(user) or b"", PARTITIONS), []).append((user, n, ts))
    return out


def _trails(received: dict[int, list[tuple[str, int, int]]]) -> dict[str, list[int]]:
    trails: dict[str, list[int]] = {}
    for records in received.values():
        for user, n, _ts in records:
            trails.setdefault(user, []).append(n)
    return trails


def _windows_and_late(received: dict[int, list[tuple[str, int, int]]]) -> tuple[dict[tuple[str, int], int], list[int]]:
    """Tumbling windows per repartition partition's task: stream time is the largest timestamp
    the task has seen; a record is late when its window closed (stream time >= end + grace)."""
    counts: dict[tuple[str, int], int] = {}
    late: list[int] = []
    for records in received.values():
        stream_time = -1
        for user, n, ts in records:
            stream_time = max(stream_time, ts)
            start = ts - ts % SIZE_MS
            if stream_time >= start + SIZE_MS + GRACE_MS:
                late.append(n)
            else:
                counts[(user, start)] = counts.get((user, start), 0) + 1
    return counts, sorted(late)


def _topic(data_dir: Path, topic: str) -> list[tuple[Any, Any]]:
    return [((r.key or b"").decode(), json.loads(r.value or b"null"))
            for records in log_records(data_dir, topic).values() for r in records]


SPLITS = pytest.mark.parametrize("split", [None, 7], ids=["one-task-per-partition", "split-every-7-offsets"])


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: int | None) -> tuple[Any, Any, list[list[tuple[str, int, int]]]]:
    from streamkit.spark import backfill as backfill_module

    if split is not None:  # each partition read by several Spark tasks
        monkeypatch.setattr(backfill_module, "SPLIT_OFFSETS", split)
    module = _module(monkeypatch, tmp_path)
    events = _events()
    _write(tmp_path, events)
    return backfill_module, module, events


@SPLITS
def test_a_fold_takes_each_partition_in_its_part_of_the_whole_merge(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: int | None
) -> None:
    backfill_module, module, events = _setup(tmp_path, monkeypatch, split)
    expected = _trails(_received(module, "trail", events, [0] * PARTITIONS))
    report = backfill_module.backfill(spark, "order_app:app", "trail", to_topic="trail-out")[0]
    assert report.records_read == PARTITIONS * 40
    assert dict(_topic(tmp_path, "trail-out")) == expected


@SPLITS
def test_windows_and_late_records_follow_each_partition_s_part_of_the_whole_merge(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: int | None
) -> None:
    backfill_module, module, events = _setup(tmp_path, monkeypatch, split)
    counts, late = _windows_and_late(_received(module, "per_user_10s", events, [0] * PARTITIONS))
    assert late  # the disorder is beyond the grace
    backfill_module.backfill(spark, "order_app:app", "per_user_10s", to_topic="windows-out")
    got = {(key, body["window_start"]): body["value"] for key, body in _topic(tmp_path, "windows-out")}
    assert got == counts

    reports = backfill_module.backfill(spark, "order_app:app", "trail", "per_user_10s")
    assert reports[1].late == len(late)
    assert sorted(value["n"] for _key, value in _topic(tmp_path, "ord-late")) == late


@SPLITS
def test_a_backfill_from_mid_partition_takes_the_whole_merge_from_there(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: int | None
) -> None:
    """From ``from_ms`` on (each partition's first record at or after it, so later than every
    record before it: a worker that restored its stream time from a commit there takes the
    whole merge's order from there), also when the rest of a partition is read in splits whose
    stream time before them is scanned from the backfill's start."""
    backfill_module, module, events = _setup(tmp_path, monkeypatch, split)
    backfill = backfill_module.backfill
    from_ms = BASE + 9_000
    starts = [next((o for o, (_u, _n, ts) in enumerate(records) if ts >= from_ms), len(records)) for records in events]
    expected = _trails(_received(module, "trail", events, starts))
    report = backfill(spark, "order_app:app", "trail", from_ms=from_ms, to_topic="trail-out")[0]
    assert report.records_read == sum(len(r) - s for r, s in zip(events, starts, strict=True))
    assert dict(_topic(tmp_path, "trail-out")) == expected


def test_tasks_writing_one_partition_of_a_stream_take_their_part_of_the_whole_merge(tmp_path: Path) -> None:
    """The issue's example, for the tasks that write a table's stream and the topics after it
    (``streams.publish``, ``streams.forward``): task 0 sends ts 10 (to partition A), then ts 1
    (to B); task 1 sends ts 5 (to B). B gets task 1's record first, as the whole merge (1@5,
    0@10, 0@1) has it; and a record a task's filter drops still moved its stream time."""
    import streamkit as sk
    from streamkit._core.partitioner import partition_for_key
    from streamkit.spark.access import log_access
    from streamkit.spark.streams import downstream, forward, publish

    app = sk.App("pub", broker=f"file://{tmp_path}")
    src = app.topic("src", key_type=str, value_type=str, partitions=2)
    out = app.topic("out", key_type=str, value_type=str, partitions=1)
    app.stream(src).filter(lambda v: v != "dropped").to(out)
    on = {partition_for_key(src.key_serde.dumps(k) or b"", 2): k for k in (f"k{i}" for i in range(10))}

    def sent(key: str, value: str, ts: int) -> tuple[bytes | None, bytes | None, int]:
        return src.key_serde.dumps(key), src.value_serde.dumps(value), ts

    access = log_access(app, "pub", None)
    by_partition = publish(app, access, src, [[sent(on[0], "a", 10), sent(on[1], "b", 1)], [sent(on[1], "c", 5)]])
    assert by_partition == [[sent(on[0], "a", 10)], [sent(on[1], "c", 5), sent(on[1], "b", 1)]]

    # src partition 0's task drops its record at ts 10 and sends the one at ts 1 after it
    tasks = [[sent(on[0], "dropped", 10), sent(on[0], "b", 1)], [sent(on[1], "c", 5)]]
    assert forward(app, access, src, downstream(app, src), tasks) == {"out": 2}
    assert [r.value for r in log_records(tmp_path, "out")[0]] == [src.value_serde.dumps("c"), src.value_serde.dumps("b")]
