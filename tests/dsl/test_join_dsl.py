"""Windowed stream-stream joins run by the worker (``app.stream(a).join(app.stream(b), ...)``).

The model runs of ``test_join_model.py`` give the expected output: both sides are read from one
topic (a self-join, filtered by side), so the join task sees the records exactly in the
topic's order and the output, late records and held state must equal the model's, also when
the worker is stopped in the middle of the input and started again on the same log and state
directory. Two-topic joins, repartitioning and the refusals are checked below.
"""

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
from streamkit._core.errors import ConfigError
from streamkit.runtime import Worker
from streamkit.tables.errors import TableError
from streamkit.testing import AppDriver
from streamkit.windows import Tumbling
from tests.runtime.test_alignment import _settled
from tests.support.workers import read_topic, until_assigned
from tests.windows.test_join_model import model_join

BASE = 1_700_000_000_000
Input = list[tuple[str, str, int]]  # side, key, timestamp (ms after BASE)


def _pair(left: Any, right: Any) -> list[Any]:
    return [None if left is None else left["id"], None if right is None else right["id"]]


def _self_join_app(how: str, within_s: float, grace_s: float, store: str) -> tuple[sk.App, sk.Topic, sk.Topic]:
    app = sk.App("joins", store=store)
    events = app.topic("events", key_type=str, value_type=dict, partitions=1)
    out = app.topic("joined", key_type=str, value_type=list, partitions=1)
    left = app.stream(events).filter(lambda v: v["side"] == "left")
    right = app.stream(events).filter(lambda v: v["side"] == "right")
    left.join(right, _pair, within=within_s, grace=grace_s, how=how).to(out)
    return app, events, out


async def _run(
    how: str, records: Input, restart_at: int | None, store: str = "rocksdb://", wipe: bool = False
) -> Any:
    """Run the self-join over ``records``, stopping the worker after ``restart_at`` records and
    starting it again on the same log (and, unless ``wipe``, the same local state: with
    ``wipe`` the join state is rebuilt from its changelog alone)."""
    app, events, out = _self_join_app(how, 0.010, 0.004, store)
    tmp = tempfile.mkdtemp(prefix="join-dsl-")
    dirs = {"data_dir": f"{tmp}/log", "state_dir": f"{tmp}/state"}
    cut = len(records) if restart_at is None else min(restart_at, len(records))
    try:
        for lo, hi in ((0, cut), (cut, len(records))):
            if wipe and lo:
                shutil.rmtree(dirs["state_dir"], ignore_errors=True)
            async with AppDriver(app, **dirs) as driver:
                for i in range(lo, hi):
                    side, key, ts = records[i]
                    await driver.send(events, {"side": side, "id": i}, key=key, timestamp=BASE + ts)
                await driver.process()
                joined = [(e.key, e.timestamp - BASE, *e.value) for e in await driver.read(out)]
                late = [
                    (e.value["id"], dict(e.headers)["streamkit.reason"].decode())
                    for e in await driver.read(app.topics["joins-late"])
                ]
                described = {t["name"]: t for t in driver.worker.state_manager.describe()}
        return joined, late, described["joined-join"]["late_records"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


inputs = st.lists(
    st.tuples(st.sampled_from(["left", "right"]), st.sampled_from(["a", "b"]), st.integers(0, 60) | st.integers(0, 4)),
    max_size=30,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=inputs, how=st.sampled_from(["inner", "left", "outer"]), restart=st.none() | st.integers(0, 30),
    wipe=st.booleans(),
)
def test_the_worker_matches_the_model_also_across_a_restart(
    records: Input, how: str, restart: int | None, wipe: bool
) -> None:
    model = model_join(10, 4, how, [(s, k.encode(), ts, i) for i, (s, k, ts) in enumerate(records)])
    joined, late, counted = asyncio.run(_run(how, records, restart, wipe=wipe))
    assert joined == [(k.decode(), ts, left, right) for k, ts, left, right in model.outputs]
    assert late == model.late
    assert counted == len(model.late)


def test_a_restart_mid_input_gives_what_an_uninterrupted_run_gives() -> None:
    records: Input = [
        ("left", "a", 0), ("right", "b", 3), ("left", "b", 3), ("right", "a", 8), ("left", "a", 9),
        ("right", "a", 9), ("left", "b", 30), ("right", "a", 1), ("left", "a", 31), ("right", "b", 22),
        ("left", "a", 60), ("right", "a", 55),
    ]
    whole = asyncio.run(_run("outer", records, None))
    for cut in (3, 7, 10):
        assert asyncio.run(_run("outer", records, cut)) == whole
        assert asyncio.run(_run("outer", records, cut, wipe=True)) == whole  # from the changelog alone
    joined, late, counted = whole
    # Right a at 1 comes when stream time is 30, yet the left side still keeps a at 9 (24 ms
    # behind its newest, 30): as in Kafka Streams it pairs, and nothing is late.
    assert late == [] and counted == 0
    assert ("a", 9, 4, 7) in joined
    assert (("a", 9, 0, 5) in joined) and (("b", 3, None, 1) not in joined)


def test_join_state_in_memory_gives_the_same_answers() -> None:
    records: Input = [("left", "a", 0), ("right", "a", 5), ("left", "b", 6), ("right", "b", 40), ("left", "a", 59)]
    assert asyncio.run(_run("left", records, 2, store="memory://")) == asyncio.run(_run("left", records, 2))


async def test_two_topics_with_a_rekeyed_side_are_repartitioned_and_joined(log_url: str, tmp_path: Path, unique: str) -> None:
    """On each backend: the re-keyed side goes through its repartition topic to the join."""
    app = sk.App(unique, broker=log_url, commit_interval=0.2)
    orders = app.topic(f"{unique}-orders", key_type=str, value_type=dict, partitions=3)
    payments = app.topic(f"{unique}-payments", key_type=str, value_type=dict, partitions=2)  # keyed by payment id
    out = app.topic(f"{unique}-paid", key_type=str, value_type=dict, partitions=3)
    by_order = app.stream(payments).map(lambda k, p: (p["order"], p))
    app.stream(orders).join(by_order, lambda o, p: {"order": o["id"], "amount": p["amount"]}, within=60).to(out)
    assert f"{unique}-{unique}-paid-join-right-repartition" in app.topics
    assert sorted(s.name for plan in app.plans for s in plan.stages) == [f"{unique}-paid", f"{unique}-paid-join-right"]
    async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
        await until_assigned(worker, 3 + 2 + 3)  # orders, payments, the repartition topic
        for i in range(12):
            await (await orders.send(key=f"o{i}", value={"id": f"o{i}"}, timestamp=BASE + i * 1000))
        for i in range(12):
            await (await payments.send(key=f"pay-{i}", value={"order": f"o{i}", "amount": i}, timestamp=BASE + i * 1000 + 500))
        await _settled(worker)
    got = sorted((r.key.decode(), json.loads(r.value)["amount"], r.timestamp - BASE) for r in await read_topic(log_url, out.name))
    assert got == [(f"o{i}", i, i * 1000 + 500) for i in sorted(range(12), key=lambda i: f"o{i}")]


async def test_a_join_feeds_a_grouped_aggregation() -> None:
    app = sk.App("joinagg")
    clicks = app.topic("clicks", key_type=str, value_type=dict, partitions=2)
    views = app.topic("views", key_type=str, value_type=dict, partitions=2)
    joined = app.stream(clicks).join(app.stream(views), lambda c, v: {"page": v["page"]}, within=5)
    per_page = joined.group_by(lambda v: v["page"], name="page").count("clicks_per_page", key_type=str)
    async with AppDriver(app) as driver:
        for i, (user, page) in enumerate([("u1", "home"), ("u2", "home"), ("u3", "cart")]):
            await driver.send(views, {"page": page}, key=user, timestamp=BASE + i)
            await driver.send(clicks, {"x": 1}, key=user, timestamp=BASE + i + 1000)
        await driver.process()
        assert dict(per_page.items()) == {"home": 2, "cart": 1}


def test_bad_joins_are_refused_clearly() -> None:
    app = sk.App("bad")
    a = app.topic("a", key_type=str, partitions=2)
    b = app.topic("b", key_type=str)
    with pytest.raises(ConfigError, match="needs within="):
        app.stream(a).join(app.stream(b), lambda x, y: x)
    with pytest.raises(ConfigError, match="one of"):
        app.stream(a).join(app.stream(b), lambda x, y: x, within=1, how="full")
    with pytest.raises(ConfigError, match="seconds >= 0"):
        app.stream(a).join(app.stream(b), lambda x, y: x, within=-1)
    with pytest.raises(ConfigError, match="is for joining two streams"):
        app.stream(a).join(app.Table("t"), lambda x, y: x, within=1)
    joined = app.stream(a).join(app.stream(b).map(lambda k, v: (v, k)), lambda x, y: x, within=1)
    with pytest.raises(ConfigError, match="one stream-stream join"):
        joined.join(app.stream(b), lambda x, y: x, within=1)
    with pytest.raises(ConfigError, match="declare that topic with partitions="):
        app.stream(b).join(app.stream(a).map(lambda k, v: (v, k)), lambda x, y: x, within=1).to("out")


def test_join_state_is_not_queryable_but_the_stream_table_join_still_works() -> None:
    app = sk.App("state")
    a = app.topic("a", key_type=str, partitions=2)
    b = app.topic("b", key_type=str, partitions=2)
    app.stream(a).join(app.stream(b), lambda x, y: x, within=1, name="j").to("out")
    with pytest.raises(TableError, match="not queryable"):
        app.tables["out-j"]["k"]
    users = app.Table("users", partitions=2)
    enriched = app.stream(a).join(users, lambda x, u: (x, u), how="left")
    assert type(enriched.nodes[-1]).__name__ == "Join"


async def test_mapped_values_reach_the_joiner_alike_from_either_side_and_feed_windows() -> None:
    app = sk.App("retyped")
    a = app.topic("a", key_type=str, value_type=str, partitions=1)
    b = app.topic("b", key_type=str, value_type=str, partitions=1)
    out = app.topic("out", key_type=str, value_type=list, partitions=1)
    seen: list[tuple[str, str]] = []

    def pair(left: Any, right: Any) -> list[Any]:
        seen.append((type(left).__name__, type(right).__name__))
        return [left, right]

    joined = app.stream(a).map_values(lambda v: (v, 1)).join(app.stream(b), pair, within=10)
    joined.to(out)
    per_window = (
        app.stream(a).join(app.stream(b), lambda x, y: x + y, within=10, name="j2")
        .group_by_key().window(Tumbling(60)).count("pairs_per_minute", key_type=str)
    )
    async with AppDriver(app) as driver:
        await driver.send(a, "x", key="k", timestamp=BASE + 1000)   # stored, paired later
        await driver.send(b, "y", key="k", timestamp=BASE + 2000)
        await driver.process()
        await driver.send(a, "z", key="k", timestamp=BASE + 3000)   # in hand, paired at once
        await driver.process()
        values = [e.value for e in await driver.read(out)]
        windows = per_window.windows("k")
    assert values == [[["x", 1], "y"], [["z", 1], "y"]]
    assert seen == [("list", "str"), ("list", "str")]
    assert [(w["start"] - BASE + BASE % 60_000, w["value"]) for w in windows] == [(0, 2)]


def _merged(left: list[tuple[str, int]], right: list[tuple[str, int]]) -> list[tuple[str, str, int, int]]:
    """Both topics' records as one task takes them: by timestamp, left first on a tie, each
    topic in offset order (see test_join_order.py). Values are ids: left i, right 100 + i."""
    queues = [[("left", k, ts, i) for i, (k, ts) in enumerate(left)], [("right", k, ts, 100 + i) for i, (k, ts) in enumerate(right)]]
    out = []
    while queues[0] or queues[1]:
        side = min((q[0][2], s) for s, q in enumerate(queues) if q)[1]
        out.append(queues[side].pop(0))
    return out


async def _two_topics(how: str, left: list[tuple[str, int]], right: list[tuple[str, int]]) -> list[Any]:
    tmp = tempfile.mkdtemp(prefix="join-two-")
    dirs = {"data_dir": f"{tmp}/log", "state_dir": f"{tmp}/state"}
    try:
        loader = sk.App("two")
        topics = [loader.topic(name, key_type=str, value_type=dict, partitions=1) for name in ("l", "r")]
        async with AppDriver(loader, **dirs) as driver:  # the whole input is in the log first
            for topic, records, base in ((topics[0], left, 0), (topics[1], right, 100)):
                for i, (key, ts) in enumerate(records):
                    await driver.send(topic, {"id": base + i}, key=key, timestamp=BASE + ts)
        app = sk.App("two")
        lt, rt = (app.topic(name, key_type=str, value_type=dict, partitions=1) for name in ("l", "r"))
        out = app.topic("out", key_type=str, value_type=list, partitions=1)
        app.stream(lt).join(app.stream(rt), _pair, within=0.010, grace=0.004, how=how).to(out)
        async with AppDriver(app, **dirs) as driver:
            await driver.process()
            return [(e.key, e.timestamp - BASE, *e.value) for e in await driver.read(out)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


side_records = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 60)), max_size=15)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(left=side_records, right=side_records, how=st.sampled_from(["inner", "left", "outer"]))
def test_two_topics_are_joined_in_timestamp_order_and_a_replay_gives_the_same_output(
    left: list[tuple[str, int]], right: list[tuple[str, int]], how: str
) -> None:
    # The input is in the log before the worker starts and small enough for one fetch of each
    # topic, so the task holds both sides at once and takes them in timestamp order (the
    # runtime does not yet wait for a partition that has records it has not fetched).
    merged = _merged(left, right)
    model = model_join(10, 4, how, [(s, k.encode(), ts, v) for s, k, ts, v in merged])
    first = asyncio.run(_two_topics(how, left, right))
    assert first == [(k.decode(), ts, lv, rv) for k, ts, lv, rv in model.outputs]
    assert asyncio.run(_two_topics(how, left, right)) == first


@pytest.mark.spark
def test_the_backfill_refuses_a_table_fed_by_a_stream_join_by_name() -> None:
    from streamkit.spark.planning import find_pipeline

    app = sk.App("nobackfill")
    a = app.topic("a", key_type=str, value_type=dict, partitions=2)
    b = app.topic("b", key_type=str, value_type=dict, partitions=2)
    joined = app.stream(a).join(app.stream(b), lambda x, y: {"page": y["page"]}, within=5, name="clicks")
    joined.group_by(lambda v: v["page"], name="page").count("per_page")
    with pytest.raises(ConfigError, match="stream-stream join 'clicks'"):
        find_pipeline(app, "per_page")


def test_the_dsl_docstring_examples_run() -> None:
    import doctest

    import streamkit.dsl.builders

    result = doctest.testmod(streamkit.dsl.builders, raise_on_error=False, verbose=False)
    assert result.attempted >= 6 and result.failed == 0


async def test_a_record_without_a_value_moves_the_joins_stream_time() -> None:
    # Kafka Streams' KStreamKStreamJoin advances its stream time before it skips a record with
    # no value (checked on 4.4's TopologyTestDriver): a right record at 200 with no value makes
    # the left record at 150 arrive after its window (150 + 10 < 200), so the outer join emits
    # it unpaired at once; a left record without a key is emitted unpaired too.
    app = sk.App("join-nulls")
    lt = app.topic("l", key_type=str, value_type=int, partitions=1)
    rt = app.topic("r", key_type=str, value_type=int, partitions=1)
    out = app.topic("out", key_type=str, value_type=list, partitions=1)
    app.stream(lt).join(app.stream(rt), lambda a, b: [a, b], within=0.010, how="outer").to(out)
    async with AppDriver(app) as driver:
        await driver.send(lt, 1, key="a", timestamp=BASE + 100)
        await driver.process()
        await driver.send(rt, None, key="b", timestamp=BASE + 200)
        await driver.process()
        await driver.send(lt, 2, key="c", timestamp=BASE + 150)
        await driver.process()
        await driver.send(lt, 3, key=None, timestamp=BASE + 160)
        await driver.process()
        joined = [(e.key, e.timestamp - BASE, e.value) for e in await driver.read(out)]
        late = [dict(e.headers)["streamkit.reason"] for e in await driver.read(app.topics["join-nulls-late"])]
    assert joined == [("c", 150, [2, None]), (None, 160, [3, None])]
    assert late == [b"null-value"]
