"""A commit runs to its end whatever becomes of its caller. A stop cancels the commit loop;
cut between sending a table's changes to the changelog and writing them to the store, the
changes stayed out of the store, and the next commit recorded there a changelog offset past
them, so a restart did not restore them (a windowed count lost a record so, under
exactly-once, across a stop and a restart)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import streamkit as sk
from streamkit._core.types import TopicPartition
from streamkit.runtime import Worker
from streamkit.tables.store import Change, RocksStore


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_cancelled_commit_ends_all_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guarantee: str) -> None:
    app = sk.App("cc", broker=f"file://{tmp_path / 'log'}", commit_interval=3600, processing_guarantee=guarantee)
    topic = app.topic("cc-in", key_type=str, value_type=int, partitions=1)
    counts = app.Table("counts", default=int, key_type=str, value_type=int, partitions=1)

    @app.agent(topic)
    async def count(stream: sk.Stream) -> None:
        async for key, value in stream.items():
            counts[key] += value

    applying = threading.Event()
    real_apply = RocksStore.apply

    def slow_apply(self: RocksStore, changes: Sequence[Change], changelog_offset: int) -> None:
        applying.set()  # a slow disk: the fault this test needs
        time.sleep(0.3)
        real_apply(self, changes, changelog_offset)

    tp = TopicPartition("cc-in", 0)
    async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
        for i in range(100):
            await topic.send(key=f"k{i % 7}", value=1)
        await worker.commit()  # under exactly-once, the worker's own sends are in its transaction
        while not await worker.settle():
            await asyncio.sleep(0.05)
        monkeypatch.setattr(RocksStore, "apply", slow_apply)
        caller = asyncio.create_task(worker.commit())
        await asyncio.to_thread(applying.wait, 10)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        assert caller.cancelled()
        # Nobody commits again: the cancelled commit itself ends, offsets included.
        for _ in range(100):
            if worker.committed.get(tp) == 100:
                break
            await asyncio.sleep(0.05)
        assert worker.committed.get(tp) == 100
        monkeypatch.setattr(RocksStore, "apply", real_apply)
    async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
        while not await worker.settle():
            await asyncio.sleep(0.05)
        assert {k: counts[k] for k in (f"k{i}" for i in range(7))} == {f"k{i}": 15 if i < 2 else 14 for i in range(7)}
