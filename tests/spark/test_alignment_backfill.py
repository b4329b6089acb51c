"""Issue 22's case, the worker beside the backfill: the same page views (four partitions, out
of order, some late by minutes) in two embedded logs; a worker catches up on one, ``backfill``
replays the other. Both write the same closed windows to ``pv-closed`` and the same records to
``pv-late``, and both equal the model of ``tests/runtime/pageviews.py`` (the timestamp-merged
order of the source partitions, each repartition partition's windowed task fed its part)."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord
from tests.runtime.pageviews import PARTITIONS, Views, expected, page_views
from tests.spark.conftest import log_records

pytestmark = pytest.mark.spark


def _write(data_dir: Path, views: Views) -> None:
    with LogManager(data_dir, background=False) as log:
        log.create_topic("pv-views", PARTITIONS)
        for p, records in enumerate(views):
            part = log.partition("pv-views", p)
            for at in range(0, len(records), 50):
                part.append_records([
                    NewRecord(user.encode(), json.dumps({"user": user}).encode(), ts) for user, ts in records[at : at + 50]
                ])


def _outputs(data_dir: Path) -> tuple[list[tuple[str, int]], list[tuple[str, int, int, int]]]:
    late = sorted(
        (json.loads(r.value or b"null")["user"], int(dict(r.headers)["streamkit.timestamp"]))
        for records in log_records(data_dir, "pv-late").values()
        for r in records
    )
    closed = []
    for records in log_records(data_dir, "pv-closed").values():
        for r in records:
            body = json.loads(r.value or b"null")
            closed.append(((r.key or b"").decode(), body["window_start"], body["window_end"], body["value"]))
    return late, sorted(closed)


def _app_module(monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> Any:
    monkeypatch.setenv("PV_BROKER", f"file://{data_dir}")
    sys.modules.pop("tests.runtime.pageviews", None)
    return importlib.import_module("tests.runtime.pageviews")


def test_a_worker_catching_up_and_a_backfill_give_the_same_windows_and_late_records(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from streamkit.runtime import Worker
    from streamkit.spark.backfill import backfill

    views = page_views(4000, seed=22)
    want = expected(views)
    assert len(want[0]) > 40  # late records, beyond the 2% truly late: disorder past the grace

    replayed, caught_up = tmp_path / "backfill", tmp_path / "worker"
    _write(replayed, views)
    _write(caught_up, views)

    module = _app_module(monkeypatch, caught_up)

    async def catch_up() -> None:
        async with Worker(module.app, state_dir=str(tmp_path / "state")) as worker:
            loop = asyncio.get_running_loop()
            deadline, streak = loop.time() + 120, 0
            while streak < 3:
                assert loop.time() < deadline
                streak = streak + 1 if await worker.settle() else 0
                await asyncio.sleep(0.1)

    asyncio.run(catch_up())
    by_worker = _outputs(caught_up)

    _app_module(monkeypatch, replayed)
    backfill(spark, "tests.runtime.pageviews:app", "per_minute")
    by_backfill = _outputs(replayed)

    assert by_backfill == by_worker
    assert by_worker == want
