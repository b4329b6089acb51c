"""Windowed aggregations run by the worker (``app.stream(t).group_by(f).window(spec).count``),
compared with the plain-Python reference models of ``test_reference_model.py``: the windows
emitted on close, the late records, and the windows still open, also across a restart."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit.runtime import Worker
from streamkit.testing import AppDriver
from streamkit.windows import Session, Tumbling
from tests.runtime.test_alignment import _settled
from tests.support.workers import read_topic, until_assigned
from tests.windows.test_reference_model import model_session, model_time

Input = list[tuple[str, int]]  # key, timestamp ms
BASE = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a round minute, far from 0


def _app(spec: Any, name: str, **settings: Any) -> tuple[sk.App, sk.Topic, sk.Topic, Any]:
    app = sk.App(name, **settings)
    clicks = app.topic(f"{name}-clicks", key_type=str, value_type=str, partitions=1)
    out = app.topic(f"{name}-per-window", key_type=str, value_type=dict, partitions=1)
    table = app.stream(clicks).group_by_key().window(spec).count("clicks_per_window", key_type=str, value_type=int)
    table.to_stream(emit="close").to(out)
    return app, clicks, out, table


async def _run(spec: Any, records: Input, restart_at: int | None) -> tuple[list[Any], list[Any], dict[Any, int]]:
    app, clicks, out, table = _app(spec, "win")
    tmp = tempfile.mkdtemp(prefix="windows-dsl-")
    dirs = {"data_dir": f"{tmp}/log", "state_dir": f"{tmp}/state"}
    cut = len(records) if restart_at is None else restart_at
    try:
        for part in (records[:cut], records[cut:]):
            async with AppDriver(app, **dirs) as driver:
                for key, ts in part:
                    await driver.send(clicks, "x", key=key, timestamp=BASE + ts)
                await driver.process()
                emitted = [(e.key, e.value["window_start"] - BASE, e.value["window_end"] - BASE, e.value["value"])
                           for e in await driver.read(out)]
                late = [(e.key.decode(), dict(e.headers)["streamkit.reason"].decode(), int(dict(e.headers)["streamkit.timestamp"]) - BASE)
                        for e in await driver.read(app.topics["win-late"])]
                final = {(k, s - BASE, e - BASE): v for (k, (s, e)), v in table.items()}
        return emitted, late, final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _expected(model: Any, records: Input) -> tuple[list[Any], list[Any], dict[Any, int]]:
    closes = [(k.decode(), s, e, len(ids)) for k, s, e, ids in model.closes]
    late = [(records[i][0], reason, records[i][1]) for i, reason in model.late]
    final = {(k.decode(), s, e): len(ids) for (k, s, e), ids in model.final.items()}
    return closes, late, final


inputs = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 120_000)), min_size=1, max_size=25)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=inputs, restart=st.none() | st.integers(0, 25))
def test_tumbling_counts_closes_and_late_records_match_the_model(records: Input, restart: int | None) -> None:
    size, grace = 30_000, 5_000
    model = model_time(size, size, grace, [(k.encode(), ts) for k, ts in records])
    got = asyncio.run(_run(Tumbling(30, grace=5), records, restart))
    assert got == _expected(model, records)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=inputs, restart=st.none() | st.integers(0, 25))
def test_session_counts_closes_and_late_records_match_the_model(records: Input, restart: int | None) -> None:
    gap, grace = 10_000, 2_000
    model = model_session(gap, grace, [(k.encode(), ts) for k, ts in records])
    got = asyncio.run(_run(Session(10, grace=2), records, restart))
    assert got == _expected(model, records)


async def test_a_tumbling_count_stopped_and_started_again_matches_the_model(log_url: str, tmp_path: Path, unique: str) -> None:
    """On each backend, a worker (not ``AppDriver``) stopped in the middle: the windows closed,
    the late records and the windows still open are the model's."""
    records: Input = [
        ("a", 0), ("b", 1_000), ("a", 29_000), ("a", 31_000), ("b", 20_000),  # b 20 s: within the grace
        ("c", 61_000), ("a", 10_000), ("b", 62_000),  # a 10 s: its window closed at 35 s
        ("a", 95_000), ("c", 70_000), ("b", 64_000), ("c", 40_000),
    ]
    size, grace = 30_000, 5_000
    app, clicks, out, table = _app(Tumbling(30, grace=5), unique, broker=log_url, commit_interval=0.2)
    for part in (records[:5], records[5:]):
        async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
            await until_assigned(worker, 1)
            for key, ts in part:
                await (await clicks.send(key=key, value="x", timestamp=BASE + ts))
            await _settled(worker)
            final = {(k, s - BASE, e - BASE): v for (k, (s, e)), v in table.items()}
    emitted = []
    for r in await read_topic(log_url, out.name):
        body = json.loads(r.value)
        emitted.append((r.key.decode(), body["window_start"] - BASE, body["window_end"] - BASE, body["value"]))
    late = [(r.key.decode(), dict(r.headers)["streamkit.reason"].decode(), int(dict(r.headers)["streamkit.timestamp"]) - BASE)
            for r in await read_topic(log_url, f"{unique}-late")]
    model = model_time(size, size, grace, [(k.encode(), ts) for k, ts in records])
    assert (emitted, late, final) == _expected(model, records)
    assert late and emitted and final  # each part of the answer is there to get wrong


async def test_windows_are_queryable_over_http() -> None:
    import aiohttp

    from streamkit.web import WebServer

    app, clicks, _out, _table = _app(Tumbling(60), "winq")
    async with AppDriver(app) as driver, WebServer(driver.worker, port=0) as web:
        for ts in (0, 1_000, 30_000):
            await driver.send(clicks, "x", key="ann", timestamp=BASE + ts)
        await driver.process()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{web.url}/tables/clicks_per_window/ann") as r:
                body = await r.json()
            async with http.get(f"{web.url}/tables/clicks_per_window/ann?from={BASE + 60_000}") as r:
                later = await r.json()
            async with http.get(f"{web.url}/tables/clicks_per_window/ann?from=soon") as r:
                assert r.status == 400
    assert body == {"key": "ann", "windows": [{"start": BASE, "end": BASE + 60_000, "value": 3}]}
    assert later == {"key": "ann", "windows": []}


def test_a_windowed_table_is_not_a_dict() -> None:
    from streamkit.tables import TableError

    table = _app(Tumbling(60), "wind")[3]
    with pytest.raises(TableError, match=r"read with \.windows"):
        table.table["ann"]


async def test_a_session_reduce_merges_sessions_with_the_reducer() -> None:
    # The session driver folds the sessions a record joins from the initializer (None for a
    # reduce): the merge must skip it, not call the reducer on None (that sent the record to
    # the dead-letter topic).
    app = sk.App("win-reduce")
    clicks = app.topic("clicks", key_type=str, value_type=int, partitions=1)
    table = app.stream(clicks).group_by_key().window(Session(10)).reduce("sum", lambda a, b: a + b)
    windows = []
    async with AppDriver(app) as driver:
        for values in (((1, 0), (2, 5_000)), ((4, 30_000), (8, 22_000))):  # 22 s bridges the gap to 30 s
            for value, ts in values:
                await driver.send(clicks, value, key="a", timestamp=BASE + ts)
            await driver.process()
            windows.append([(w["start"] - BASE, w["end"] - BASE, w["value"]) for w in table.windows("a")])
        dead = await driver.read(app.topics["win-reduce-dlq"])
    assert dead == []
    assert windows == [[(0, 5_000, 3)], [(22_000, 30_000, 12)]]  # the first closed and went at 30 s
