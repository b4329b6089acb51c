"""Recovery: the changelog tail past the local state, and local state that cannot be trusted."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import streamkit as sk
from streamkit._core.partitioner import partition_for_key
from streamkit.runtime import Worker
from streamkit.tables.store import RocksStore
from streamkit.testing import AppDriver
from streamkit.transport import open_log_client
from streamkit.transport.embedded.client import EmbeddedLogClient
from tests.runtime.test_alignment import _settled
from tests.tables import counting_app as capp


async def _run(tmp: Path, pairs: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Run the counting app over ``pairs``; return each table partition's restored records."""
    async with AppDriver(capp.app, data_dir=str(tmp / "log"), state_dir=str(tmp / "state")) as driver:
        restored = {key: p.records for key, p in driver.worker.state_manager.restores.items()}
        for key, value in pairs:
            await driver.send(capp.events, value, key=key)
        await driver.process()
        return restored


async def _run_on(url: str, app_id: str, state: Path, pairs: list[tuple[str, int]]) -> tuple[dict[tuple[str, int], int], dict[str, int]]:
    """The counting app as ``app_id`` on ``url`` (a worker, as an app runs), over ``pairs``:
    each table partition's restored records, and the table once everything was processed."""
    app, events, counts = capp.declare(app_id, url, commit_interval=0.2)
    async with Worker(app, state_dir=str(state)) as worker:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while worker.state_manager.held != {0, 1, 2}:  # assigned and restored
            assert loop.time() < deadline, "the worker was not given every partition"
            await asyncio.sleep(0.05)
        restored = {key: p.records for key, p in worker.state_manager.restores.items()}
        for key, value in pairs:
            await (await events.send(key=key, value=value))
        await _settled(worker)
        return restored, dict(counts.items())


async def test_a_restart_replays_exactly_the_changelog_tail(log_url: str, tmp_path: Path, unique: str) -> None:
    """On each backend: a change in the changelog past what the local store recorded (a worker
    killed between sending it and storing it) is the one record the restart replays."""
    await _run_on(log_url, unique, tmp_path / "state", [("a", 1), ("b", 2), ("a", 3)])
    client = open_log_client(log_url)
    await client.start()
    try:
        partition = partition_for_key(b"a", 3)
        producer = client.producer()
        await producer.start()
        await producer.send(f"{unique}-counts-changelog", b"a", b"40", partition=partition)
        await producer.aclose()
    finally:
        await client.aclose()
    restored, table = await _run_on(log_url, unique, tmp_path / "state", [])
    assert restored[("counts", partition)] == 1
    assert sum(restored.values()) == 1
    assert table == {"a": 40, "b": 2}


async def test_corrupt_local_state_is_rebuilt_from_the_changelog(tmp_path: Path) -> None:
    await _run(tmp_path, [("a", 1), ("b", 2), ("c", 5)])
    for directory, _dirs, files in os.walk(tmp_path / "state"):
        for name in files:
            if name == "CURRENT" or name.startswith("MANIFEST"):
                Path(directory, name).write_bytes(b"\x00damaged")
    async with AppDriver(capp.app, data_dir=str(tmp_path / "log"), state_dir=str(tmp_path / "state")) as driver:
        wiped = [p.wiped for p in driver.worker.state_manager.restores.values() if p.wiped]
        assert wiped and all(w.startswith("corrupt") for w in wiped)
        assert dict(capp.counts.items()) == {"a": 1, "b": 2, "c": 5}


async def test_foreign_local_state_is_rebuilt_not_served(tmp_path: Path) -> None:
    await _run(tmp_path, [("a", 1)])
    partition = partition_for_key(b"a", 3)
    path = tmp_path / "state" / "counts" / str(partition)
    store = RocksStore(str(path))
    store.set_identity("another-app/counts/0/another-app-counts-changelog")
    store.apply([(b"intruder", b"99")], 1)
    store.close()
    async with AppDriver(capp.app, data_dir=str(tmp_path / "log"), state_dir=str(tmp_path / "state")) as driver:
        progress = driver.worker.state_manager.restores[("counts", partition)]
        assert progress.wiped is not None and progress.wiped.startswith("foreign")
        assert dict(capp.counts.items()) == {"a": 1}


async def test_state_ahead_of_a_recreated_changelog_is_rebuilt(tmp_path: Path) -> None:
    await _run(tmp_path, [("a", 1), ("a", 1), ("b", 1)])
    client = EmbeddedLogClient(str(tmp_path / "log"))
    await client.start()
    client.log.delete_topic("tcount-counts-changelog")
    await client.aclose()
    async with AppDriver(capp.app, data_dir=str(tmp_path / "log"), state_dir=str(tmp_path / "state")) as driver:
        wiped = [p.wiped for p in driver.worker.state_manager.restores.values() if p.wiped]
        assert wiped and all(w.startswith("ahead") for w in wiped)
        assert dict(capp.counts.items()) == {}


class Reading(sk.Record):
    sensor: str
    value: float


async def test_records_in_an_untyped_table_read_back_as_records_after_a_restart(tmp_path: Path) -> None:
    """Faust keeps a table's values as Python objects; here they are stored, so an untyped
    table (``default=list``, no ``value_type``) must give back the same records, nested in
    lists and dicts, from RocksDB and from the changelog alone."""
    app = sk.App("untyped-records")
    readings = app.topic("readings", value_type=Reading, partitions=1)
    history = app.Table("history", default=list, partitions=1)

    @app.agent(readings)
    async def keep(stream: Any) -> None:
        async for reading in stream:
            history[reading.sensor] = [*history[reading.sensor], reading]

    expected = [Reading(sensor="s", value=1.5), Reading(sensor="s", value=2.5)]
    async with AppDriver(app, data_dir=str(tmp_path / "log"), state_dir=str(tmp_path / "state")) as driver:
        for reading in expected:
            await driver.send(readings, reading, key="s")
        await driver.process()
    for wipe in (False, True):
        if wipe:
            shutil.rmtree(tmp_path / "state")
        async with AppDriver(app, data_dir=str(tmp_path / "log"), state_dir=str(tmp_path / "state")):
            assert history["s"] == expected
            assert all(type(r) is Reading for r in history["s"])
