"""Faust-spelled windowed tables (``app.Table(...).tumbling(...)``) run by a real worker on the
embedded log: ``table[k] += 1``, the reads (``current``, ``now``, ``value``, ``delta``),
``on_window_close`` once per window by stream time (also across a restart), expiry bounding
the stored state, and late records routed to ``<app>-late`` and counted on ``/status`` and
``/metrics``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import aiokafka
import pytest

import streamkit as sk
from streamkit.faust.windows import FaustWindowedTable, WindowWrapper
from streamkit.tables.partition import SortedPartition
from streamkit.testing import AppDriver
from streamkit.web import WebServer
from streamkit.windows import Tumbling
from tests.support.broker import BrokerProcess

HERE = Path(__file__).resolve().parent
STREAMKIT = str(Path(sys.executable).parent / "streamkit")
MINUTE = 60_000
BASE = 1_700_000_000_000 - 1_700_000_000_000 % (60 * MINUTE)  # a round hour, far from 0
B = BASE / 1000  # in Faust's seconds


def faust_range(start_s: float, size_s: float = 60.0) -> tuple[float, float]:
    """A window as Faust names it: end = start + size - 0.1 (computed as Faust does)."""
    return start_s, start_s + size_s - 0.1


@pytest.fixture
def dirs() -> Iterator[dict[str, str]]:
    tmp = tempfile.mkdtemp(prefix="faust-windows-")
    yield {"data_dir": f"{tmp}/log", "state_dir": f"{tmp}/state"}
    shutil.rmtree(tmp, ignore_errors=True)


def _stored_rows(table: WindowWrapper) -> int:
    """Every key the table's partition 0 holds: windows, their by-end index, the driver's progress."""
    state = table.table.partition_state(0)
    assert isinstance(state, SortedPartition)
    return sum(1 for _ in state.items())


async def test_plus_equals_counts_every_window_and_the_reads_pick_one() -> None:
    app = sk.App("fw-reads")
    views = app.topic("views", key_type=str, value_type=str, partitions=1)
    tumbling = app.Table("per_minute", default=int).tumbling(60, expires=timedelta(hours=1))
    hopping = app.Table("per_2_minutes_every_minute", default=int).hopping(120, 60)
    seen: list[tuple[Any, ...]] = []

    @app.agent(views)
    async def count(stream: sk.Stream) -> None:
        async for event in stream.events():
            tumbling[event.key] += 1
            hopping[event.key] += 1
            seen.append((
                tumbling[event.key].current(), tumbling[event.key].value(), tumbling[event.key].delta(60),
                hopping[event.key].current(), event.key in tumbling,
            ))

    async with AppDriver(app, start_ms=BASE + 130_000) as driver:
        for ts in (1_000, 20_000, 61_000, 62_000, 125_000):
            await driver.send(views, "v", key="ann", timestamp=BASE + ts)
        await driver.process()
        # (current, value, delta(60 s), the hopping window starting last)
        assert seen == [(1, 1, 0, 1, True), (2, 2, 0, 2, True), (1, 1, 2, 1, True), (2, 2, 2, 2, True), (1, 1, 2, 1, True)]
        # Outside an agent: now() is the window of the worker's clock (BASE + 130 s); for
        # hopping windows the earliest one holding it, [60 s, 180 s).
        assert tumbling["ann"].now() == 1
        assert hopping["ann"].now() == 3
        assert tumbling["bob"].now() == 0  # the default
        assert tumbling["ann"][faust_range(B + 60)] == 2  # a window by its Faust range
        assert list(tumbling.items().now()) == [("ann", 1)]
        assert list(tumbling.relative_to_now().items()) == [("ann", 1)]
        assert "ann" in tumbling.relative_to_now()
        assert "| 'ann' | 1     |" in tumbling.relative_to_now().as_ansitable()
        assert tumbling.windows("ann") == [
            {"start": BASE, "end": BASE + MINUTE, "value": 2},
            {"start": BASE + MINUTE, "end": BASE + 2 * MINUTE, "value": 2},
            {"start": BASE + 2 * MINUTE, "end": BASE + 3 * MINUTE, "value": 1},
        ]
        with pytest.raises(sk.StreamkitError, match="no event being processed"):
            tumbling["ann"].value()


async def test_set_delete_and_relative_to_field() -> None:
    app = sk.App("fw-set")
    readings = app.topic("readings", key_type=str, value_type=dict, partitions=1)
    latest = app.Table("latest", default=float).tumbling(timedelta(seconds=10)).relative_to_field("at")

    @app.agent(readings)
    async def keep(stream: sk.Stream) -> None:
        async for event in stream.events():
            if event.value.get("drop"):
                del latest[event.key]
            else:
                latest[event.key] = event.value["v"]

    async with AppDriver(app) as driver:
        # The field's time (seconds), not the record's, places the writes.
        await driver.send(readings, {"at": B + 1, "v": 1.5}, key="t", timestamp=BASE + 50_000)
        await driver.send(readings, {"at": B + 2, "v": 2.5}, key="t", timestamp=BASE)
        await driver.send(readings, {"at": B + 11, "v": 7.0}, key="t", timestamp=BASE)
        await driver.send(readings, {"at": B + 12, "v": 8.0}, key="u", timestamp=BASE)
        await driver.send(readings, {"at": B + 13, "drop": True}, key="u", timestamp=BASE)
        await driver.process()
        assert latest.windows("t") == [
            {"start": BASE + 10_000, "end": BASE + 20_000, "value": 7.0},  # [0, 10 s) closed and expired
        ]
        assert latest.windows("u") == []


@pytest.mark.parametrize("local_state", ["kept", "lost"])
async def test_on_window_close_runs_once_per_window_by_stream_time_across_a_restart(
    dirs: dict[str, str], local_state: str
) -> None:
    closed: list[tuple[Any, Any]] = []

    async def on_close(key: Any, value: Any) -> None:
        await asyncio.sleep(0)
        closed.append((key, value))

    def declare() -> tuple[sk.App, sk.Topic, WindowWrapper]:
        app = sk.App("fw-close")
        views = app.topic("views", key_type=str, value_type=str, partitions=1)
        table = app.Table("per_minute", default=int, on_window_close=on_close).tumbling(60, grace=5)

        @app.agent(views)
        async def count(stream: sk.Stream) -> None:
            async for event in stream.events():
                table[event.key] += 1

        return app, views, table

    app, views, _table = declare()
    async with AppDriver(app, **dirs) as driver:
        for key, ts in (("a", 1_000), ("b", 2_000), ("a", 30_000), ("a", 64_000), ("a", 65_000), ("b", 66_000)):
            await driver.send(views, "v", key=key, timestamp=BASE + ts)
        await driver.process()
        # 65 s = the end of [0, 60 s) + grace: "a" closed it (for both keys: stream time is the
        # partition's); the wall clock moving on closes nothing.
        assert closed == [(("a", faust_range(B)), 2), (("b", faust_range(B)), 1)]
        await driver.advance(3600)
        assert len(closed) == 2

    if local_state == "lost":  # restored from the changelog alone
        shutil.rmtree(dirs["state_dir"])
    app, views, _table = declare()  # a restarted worker: closed windows stay closed
    async with AppDriver(app, **dirs) as driver:
        await driver.send(views, "v", key="b", timestamp=BASE + 124_000)
        await driver.send(views, "v", key="b", timestamp=BASE + 125_000)
        await driver.process()
    assert closed[2:] == [(("a", faust_range(B + 60)), 2), (("b", faust_range(B + 60)), 1)]


async def test_sync_callback_and_session_windows() -> None:
    closed: list[tuple[Any, Any]] = []
    app = sk.App("fw-session")
    clicks = app.topic("clicks", key_type=str, value_type=str, partitions=1)
    sessions = app.Table("sessions", default=int, on_window_close=lambda k, v: closed.append((k, v))).session(10, grace=20)

    @app.agent(clicks)
    async def count(stream: sk.Stream) -> None:
        async for event in stream.events():
            sessions[event.key] += 1

    async with AppDriver(app) as driver:
        for ts in (0, 8_000, 25_000, 17_000, 100_000):  # 17 s bridges [0, 8 s] and [25 s]
            await driver.send(clicks, "c", key="k", timestamp=BASE + ts)
        await driver.process()
    assert closed == [(("k", (B, B + 25)), 4)]


async def test_expiry_keeps_the_stored_windows_bounded_and_tombstones_them(dirs: dict[str, str]) -> None:
    def declare() -> tuple[sk.App, sk.Topic, WindowWrapper, list[int]]:
        app = sk.App("fw-expire")
        views = app.topic("views", key_type=str, value_type=str, partitions=1)
        table = app.Table("per_minute", default=int).tumbling(60, expires=600)
        old: list[int] = []

        @app.agent(views)
        async def count(stream: sk.Stream) -> None:
            async for event in stream.events():
                table[event.key] += 1
                old.append(table[event.key].delta(300))

        return app, views, table, old

    app, views, table, old = declare()
    rows = []
    async with AppDriver(app, **dirs) as driver:
        for minute in range(120):
            for key in ("a", "b", "c"):
                await driver.send(views, "v", key=key, timestamp=BASE + minute * MINUTE + 1_000)
                await driver.send(views, "v", key=key, timestamp=BASE + minute * MINUTE + 2_000)
            if minute % 10 == 9:
                await driver.process()
                rows.append(_stored_rows(table))
        assert old[-1] == 2  # closed windows stay readable until they expire
        changelog = await driver.read(app.topics["fw-expire-per_minute-changelog"])
    # 10 minutes kept (start + 600 s <= stream time expires), 3 keys, a window and its index
    # entry each, plus the driver's stream time: bounded however long the run.
    assert max(rows[1:]) <= 3 * 2 * 11 + 1
    assert min(rows[1:]) >= 3 * 2 * 9
    tombstones = [e for e in changelog if e.value is None]
    assert len(tombstones) >= 2 * 3 * 100

    app, views, table, old = declare()  # after a restart, expiry goes on from the stored stream time
    async with AppDriver(app, **dirs) as driver:
        await driver.process()
        assert len(table.windows("a")) == 10
        await driver.send(views, "v", key="a", timestamp=BASE + 300 * MINUTE)
        await driver.process()
        assert [w["start"] for w in table.windows("a")] == [BASE + 300 * MINUTE]
        assert _stored_rows(table) == 3


async def test_late_writes_go_to_the_late_topic_and_are_counted_on_status_and_metrics() -> None:
    app = sk.App("fw-late")
    views = app.topic("views", key_type=str, value_type=str, partitions=1)
    joined = app.topic("joined", key_type=str, value_type=list, partitions=1)
    table = app.Table("per_minute", default=int).tumbling(60, grace=10)
    declarative = app.stream(views).group_by_key().window(Tumbling(60)).count("views_per_minute")
    app.stream(views).join(app.stream(views), lambda a, b: [a, b], within=5).to(joined)

    @app.agent(views)
    async def count(stream: sk.Stream) -> None:
        async for event in stream.events():
            table[event.key] += 1

    async with AppDriver(app) as driver, WebServer(driver.worker, port=0) as web:
        for ts in (1_000, 69_000, 30_000, 71_000, 2_000):  # 30 s: late for the declarative table only
            await driver.send(views, f"at {ts}", key="ann", timestamp=BASE + ts)
        await driver.process()
        late = await driver.read(app.topics["fw-late-late"])
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{web.url}/status") as r:
                status = await r.json()
            async with http.get(f"{web.url}/metrics") as r:
                metrics = await r.text()
        assert [w["value"] for w in table.windows("ann")] == [2]  # [60 s, 120 s); [0, 60 s) expired
        assert declarative.windows("ann")[-1]["value"] == 2
    by_table = sorted((dict(e.headers)["streamkit.table"].decode(), e.value) for e in late)
    # The self-join (within 5 s, no grace) sets aside both sides of the 30 s and 2 s records.
    join_state = next(name for name, t in app.tables.items() if name not in ("per_minute", "views_per_minute"))
    assert by_table == sorted([
        ("per_minute", "at 2000"), ("views_per_minute", "at 2000"), ("views_per_minute", "at 30000"),
        *[(join_state, f"at {ts}") for ts in (30_000, 30_000, 2_000, 2_000)],
    ])
    assert status["late_records"] == {
        join_state: {"window-closed": 4}, "per_minute": {"window-closed": 1}, "views_per_minute": {"window-closed": 2},
    }
    assert {t["name"]: t.get("late_records") for t in status["tables"]} == {
        join_state: 4, "per_minute": 1, "views_per_minute": 2,
    }
    assert 'streamkit_late_records_total{app="fw-late",table="per_minute",reason="window-closed"} 1' in metrics
    assert 'streamkit_late_records_total{app="fw-late",table="views_per_minute",reason="window-closed"} 2' in metrics


def test_declaring_windowed_tables(caplog: pytest.LogCaptureFixture) -> None:
    app = sk.App("fw-declare")
    plain = app.Table("t", default=int)
    wrapper = plain.tumbling(timedelta(minutes=1), expires=timedelta(hours=1))
    assert isinstance(app.tables["t"], FaustWindowedTable)
    assert app.tables["t"].retention_ms == 3_600_000
    assert app.topics["fw-declare-t-changelog"].key_serde.name == "raw"
    with pytest.raises(sk.ConfigError, match="windowed already"):
        plain.hopping(60, 30)
    with caplog.at_level(logging.WARNING, logger="streamkit.windows.wtable"):
        app.Table("u").tumbling(60, expires=30, grace=10)  # Faust accepts it: kept until it closes
    assert app.tables["u"].retention_ms is None
    assert "expires=30s is shorter than its windows last" in caplog.text
    app.Table("v").tumbling(60, expires=70, grace=10)
    assert app.tables["v"].retention_ms == 70_000
    assert repr(app.Table("s").sliding(5)).startswith("<WindowWrapper 's' Sliding")
    assert wrapper.table.window_range(0, 60_000) == (0.0, 59.9)


class _Worker:
    """``streamkit worker -A faust_window_app:app`` on a broker, with its HTTP API."""

    def __init__(self, bootstrap: str, state_dir: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(HERE), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [STREAMKIT, "worker", "-A", "faust_window_app:app", "--broker", f"kafka://{bootstrap}",
             "--state-dir", str(state_dir), "--web-port", "0", "--progress-interval", "0"],
            env=env, stderr=subprocess.PIPE, text=True, cwd=state_dir.parent,
        )
        self.url = ""

    async def started(self) -> str:
        assert self.proc.stderr is not None
        lines = []
        for _ in range(200):
            line = await asyncio.to_thread(self.proc.stderr.readline)
            lines.append(line)
            match = re.search(r"web: (http://\S+)", line)
            if match:
                self.url = match.group(1)
                return self.url
            if not line:
                break
        raise AssertionError("".join(lines))

    async def status(self) -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, http.get(f"{self.url}/status") as r:
            body: dict[str, Any] = await r.json()
            return body

    async def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.stderr is not None
        rest = await asyncio.to_thread(self.proc.stderr.read)
        assert self.proc.wait(30) == 0, rest


async def _produce(bootstrap: str, records: list[tuple[str, int]]) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, ts in records:
            await producer.send_and_wait("fw-views", b'"v"', key=key.encode(), partition=0, timestamp_ms=BASE + ts)
    finally:
        await producer.stop()


async def _closed_windows(bootstrap: str, at_least: int) -> list[tuple[str, float, int]]:
    """The records of ``fw-closed``, once there are ``at_least`` (bounded wait), and any more
    that one more fetch finds."""
    consumer = aiokafka.AIOKafkaConsumer("fw-closed", bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    out: list[tuple[str, float, int]] = []
    try:
        deadline = asyncio.get_running_loop().time() + 60
        extra = 1
        while extra and asyncio.get_running_loop().time() < deadline:
            if len(out) >= at_least:
                extra -= 1
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    value = json.loads(r.value)
                    out.append((r.key.decode(), value["start"], value["count"]))
    finally:
        await consumer.stop()
    return out


async def _until_idle(worker: _Worker) -> dict[str, Any]:
    """/status once the worker has no lag left (bounded wait)."""
    for _ in range(300):
        status = await worker.status()
        if status["lag"] and set(status["lag"].values()) == {0} and status["committed"]:
            return status
        await asyncio.sleep(0.1)
    raise AssertionError(f"the worker did not catch up: {status}")


async def test_streamkit_worker_on_streamkit_broker_fires_each_window_once_across_a_restart(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--default-partitions", "1").start(same_port=False)
    try:
        await _produce(broker.bootstrap, [("ann", 1_000), ("bob", 2_000), ("ann", 30_000), ("ann", 61_000), ("ann", 5_000)])
        worker = _Worker(broker.bootstrap, tmp_path / "state")
        try:
            await worker.started()
            assert await _closed_windows(broker.bootstrap, 2) == [("ann", B, 2), ("bob", B, 1)]
            status = await _until_idle(worker)
            assert status["late_records"] == {"per_minute": {"window-closed": 1}}
        finally:
            await worker.stop()
        await _produce(broker.bootstrap, [("bob", 125_000)])
        worker = _Worker(broker.bootstrap, tmp_path / "state")
        try:
            await worker.started()
            await _until_idle(worker)
        finally:
            await worker.stop()
        assert await _closed_windows(broker.bootstrap, 3) == [("ann", B, 2), ("bob", B, 1), ("ann", B + 60, 1)]
    finally:
        assert broker.stop() == 0, broker.stderr()


FAUST_WINDOWS = """
import json, sys
from faust.windows import HoppingWindow
out = []
for size, step, ts, d in json.load(sys.stdin):
    w = HoppingWindow(size, step)
    out.append([w.ranges(ts), w.current(ts), w.earliest(ts), w.delta(ts, d)])
print(json.dumps(out))
"""


def test_window_ranges_and_reads_pick_the_windows_faust_streaming_picks(faust_python: Path) -> None:
    """Faust's own window classes name the windows of a timestamp, its ``current``,
    ``earliest`` (``now()``) and ``delta`` windows; ours must name the same ones."""
    import random

    rng = random.Random(7)
    cases = []
    for size, step in ((60, 60), (120, 60), (10, 5), (300, 100), (1, 1)):
        for _ in range(20):
            cases.append((size, step, round(rng.uniform(size, 10**9), 3), rng.choice([0, step, 3 * size])))
    run = subprocess.run(
        [str(faust_python), "-c", FAUST_WINDOWS], input=json.dumps(cases), capture_output=True, text=True, check=True
    )
    faust = json.loads(run.stdout)
    app = sk.App("fw-faust-math")
    for i, ((size, step, ts, d), (ranges, current, earliest, delta)) in enumerate(zip(cases, faust, strict=True)):
        table = app.Table(f"t{i}").hopping(size, step).table
        ts_ms = round(ts * 1000)
        assert [list(table.window_range(*w)) for w in table.spec.windows_for(ts_ms)] == ranges
        for ours, theirs in (
            (table.window_at(None, ts_ms), current),
            (table.window_at(None, ts_ms, earliest=True), earliest),
            (table.window_at(None, ts_ms - d * 1000), delta),
        ):
            assert ours is not None and list(table.window_range(*ours)) == theirs


def test_expiry_scans_only_the_index_it_may_delete() -> None:
    """Between commits a deleted window's index entry waits as a tombstone in the partition's
    overlay; expiry must not walk those again on every record (that made a long run between
    two commits quadratic): over N in-order records, each closing a window, the index keys the
    driver's range reads cover stay O(N)."""
    from streamkit.tables.partition import WindowStoreView
    from streamkit.tables.store import MemoryStore
    from streamkit.windows import Aggregation, WindowAggregator

    covered = [0]

    class CountingView(WindowStoreView):
        def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
            covered[0] += len(self.partition._order.between(lo, hi))
            return super().range(lo, hi)

    state = SortedPartition(0, MemoryStore())
    count = Aggregation(lambda: 0, lambda n, _v: n + 1, lambda n: str(n).encode(), int)
    driver = WindowAggregator(Tumbling(0.01), count, CountingView(state), emit="close")
    n = 2_000
    for i in range(n):
        driver.process(b"k", 10 * i, None)
    assert state.dirty > n  # nothing was committed: the tombstones are all in the overlay
    assert covered[0] < 5 * n


async def test_sliding_windows_in_faust_spelling() -> None:
    app = sk.App("fw-sliding")
    clicks = app.topic("clicks", key_type=str, value_type=str, partitions=1)
    table = app.Table("within_5s", default=int).sliding(5, grace=60)
    current: list[int] = []

    @app.agent(clicks)
    async def count(stream: sk.Stream) -> None:
        async for event in stream.events():
            table[event.key] += 1
            current.append(table[event.key].current())  # the record's window [t - 5 s, t]

    async with AppDriver(app) as driver:
        for ts in (10_000, 12_000, 20_000, 14_000):
            await driver.send(clicks, "c", key="k", timestamp=BASE + ts)
        await driver.process()
        windows = [(w["start"] - BASE, w["end"] - BASE, w["value"]) for w in table.windows("k")]
    assert current == [1, 2, 1, 3]
    assert windows == [
        (5_000, 10_000, 1), (7_000, 12_000, 2), (9_000, 14_000, 3), (10_001, 15_001, 2),
        (12_001, 17_001, 1), (15_000, 20_000, 1),
    ]
