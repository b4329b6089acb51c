"""The declarative DSL run by the worker: aggregations, duality, stream-table and table-table
joins, each against the answer computed in plain Python."""

from __future__ import annotations

import collections

import pytest

import streamkit as sk
from streamkit._core.errors import ConfigError
from streamkit.testing import AppDriver
from streamkit.windows.wtable import late_counts


async def test_group_by_count_and_sum_match_plain_python() -> None:
    app = sk.App("dsl-count")
    orders = app.topic("orders", key_type=str, value_type=dict, partitions=3)
    per_user = app.stream(orders).group_by(lambda o: o["user"], name="user").count("orders_per_user")
    spent = app.stream(orders).group_by(lambda o: o["user"], name="user").sum("spent", lambda o: o["amount"])
    data = [(f"o{i}", {"user": f"u{i % 4}", "amount": i}) for i in range(40)]
    async with AppDriver(app) as driver:
        for key, value in data:
            await driver.send(orders, value, key=key)
        await driver.process()
        assert dict(per_user.items()) == dict(collections.Counter(v["user"] for _, v in data))
        expected: dict[str, int] = collections.defaultdict(int)
        for _, v in data:
            expected[v["user"]] += v["amount"]
        assert dict(spent.items()) == expected
        assert per_user["u1"] == 10


async def test_map_rekeys_filter_drops_and_reduce_and_aggregate_fold() -> None:
    app = sk.App("dsl-fold")
    readings = app.topic("readings", key_type=str, value_type=int, partitions=2)
    stream = app.stream(readings).filter(lambda v: v >= 0).map(lambda k, v: (k.split("/")[0], v))
    highest = stream.group_by_key().reduce("highest", max)
    seen = stream.group_by_key(name="key2").aggregate("seen", list, lambda k, v, agg: [*agg, v])
    data = [("a/1", 5), ("a/2", 9), ("b/1", -3), ("b/2", 4), ("a/3", 7)]
    async with AppDriver(app) as driver:
        for key, value in data:
            await driver.send(readings, value, key=key)
        await driver.process()
        assert dict(highest.items()) == {"a": 9, "b": 4}
        assert sorted(seen["a"]) == [5, 7, 9] and seen["b"] == [4]


async def test_to_table_keeps_the_latest_and_to_stream_emits_its_changes() -> None:
    app = sk.App("dsl-duality")
    users = app.topic("users", key_type=str, value_type=str, partitions=2)
    changes = app.topic("user-changes", key_type=str, value_type=str)
    names = app.stream(users).to_table("names")
    names.to_stream().filter(lambda v: v is not None).map_values(str.upper).to(changes)
    async with AppDriver(app) as driver:
        await driver.send(users, "ann", key="1")
        await driver.send(users, "bob", key="2")
        await driver.process()
        await driver.send(users, "anne", key="1")
        await driver.send(users, None, key="2")  # a tombstone deletes the key
        await driver.process()
        assert dict(names.items()) == {"1": "anne"}
        emitted = [(e.key, e.value) for e in await driver.read(changes)]
    assert sorted(emitted) == [("1", "ANN"), ("1", "ANNE"), ("2", "BOB")]


async def test_stream_table_join_inner_and_left() -> None:
    app = sk.App("dsl-enrich")
    users = app.topic("users", key_type=str, value_type=str, partitions=2)
    clicks = app.topic("clicks", key_type=str, value_type=str, partitions=2)
    inner_out = app.topic("inner-out", key_type=str, value_type=dict)
    left_out = app.topic("left-out", key_type=str, value_type=dict)
    names = app.stream(users).to_table("names")
    app.stream(clicks).join(names, lambda c, u: {"page": c, "user": u}).to(inner_out)
    app.stream(clicks).join(names, lambda c, u: {"page": c, "user": u}, how="left").to(left_out)
    async with AppDriver(app) as driver:
        await driver.send(users, "ann", key="1")
        await driver.process()
        await driver.send(clicks, "/home", key="1")
        await driver.send(clicks, "/cart", key="2")
        await driver.process()
        inner = [(e.key, e.value) for e in await driver.read(inner_out)]
        left = sorted((e.key, e.value["user"]) for e in await driver.read(left_out))
    assert inner == [("1", {"page": "/home", "user": "ann"})]
    assert left == [("1", "ann"), ("2", None)]


async def test_stream_aggregations_skip_null_values_and_count_them() -> None:
    """Kafka Streams' KStreamAggregate/KStreamReduce skip a record without value (dropped)."""
    app = sk.App("dsl-nulls")
    events = app.topic("events", key_type=str, value_type=int, partitions=1)
    counts = app.stream(events).group_by(lambda v: "none" if v is None else "n", name="g").count("counts")
    async with AppDriver(app) as driver:
        await driver.send(events, None, key="a")
        await driver.send(events, 3, key="a")
        await driver.process()
        assert dict(counts.items()) == {"n": 1}
    assert late_counts(app)["counts"] == {"null-value": 1}


async def test_aggregates_and_table_joins_are_stamped_with_the_largest_timestamp_behind_them() -> None:
    app = sk.App("dsl-stamps")
    events = app.topic("events", key_type=str, value_type=int, partitions=1)
    lt = app.topic("lt", key_type=str, value_type=int, partitions=1)
    rt = app.topic("rt", key_type=str, value_type=int, partitions=1)
    sums = app.stream(events).group_by_key().sum("sums")
    joined = app.stream(lt).to_table("left").join(app.stream(rt).to_table("right"), lambda a, b: [a, b], name="j")
    async with AppDriver(app) as driver:
        for topic, value, ts in [(events, 5, 3000), (events, 2, 2001), (rt, 1, 991_000), (lt, 2, 988_001)]:
            await driver.send(topic, value, key="k", timestamp=ts)
            await driver.process()
        for _ in range(3):
            await driver.advance(1)  # the join reads the sides' changelogs
        stamps = [(e.value, e.timestamp) for e in await driver.read(sums.table.changelog_topic)]
        joins = [(e.value, e.timestamp) for e in await driver.read(joined.table.changelog_topic)]
    assert stamps == [(5, 3000), (7, 3000)]
    assert joins == [([2, 1], 991_000)]


@pytest.mark.parametrize(("how", "expected"), [
    # right c=1; left tombstone for c (never held); left c=9; right tombstone for c
    ("inner", [None, [9, 1], None]),
    ("left", [None, [9, 1], [9, None]]),
    ("outer", [[None, 1], [None, 1], [9, 1], [9, None]]),
])
async def test_table_table_joins_forward_every_update_as_kafka_streams(how: str, expected: list[object]) -> None:
    """With the tables' cache off (Kafka Streams' statestore.cache.max.bytes=0)."""
    app = sk.App(f"dsl-tt-forward-{how}")
    lt = app.topic("lt", key_type=str, value_type=int, partitions=1)
    rt = app.topic("rt", key_type=str, value_type=int, partitions=1)
    out = app.topic("out", key_type=str, value_serializer="json", partitions=1)
    left = app.stream(lt).to_table("left", cache=False)
    right = app.stream(rt).to_table("right", cache=False)
    joined = left.join(right, lambda a, b: [a, b], how=how, name="j", cache=False)
    joined.to_stream().to(out)
    async with AppDriver(app) as driver:
        for topic, value in [(rt, 1), (lt, None), (lt, 9), (rt, None)]:
            await driver.send(topic, value, key="c")
            await driver.process()
            for _ in range(3):
                await driver.advance(1)
        assert [e.value for e in await driver.read(out)] == expected


async def test_ktable_filter_and_map_values() -> None:
    """A key that stops qualifying is deleted downstream; a tombstone stays a tombstone."""
    app = sk.App("dsl-ktable-ops")
    events = app.topic("events", key_type=str, value_type=int, partitions=1)
    out = app.topic("out", key_type=str, value_serializer="json", partitions=1)
    even = app.stream(events).to_table("t").map_values(lambda v: v + 1, name="inc").filter(lambda v: v % 2 == 0,
                                                                                            name="even")
    even.to_stream().to(out)
    async with AppDriver(app) as driver:
        for key, value in [("a", 1), ("a", 2), ("b", 3), ("a", None), ("c", None)]:
            await driver.send(events, value, key=key)
            await driver.process()
            for _ in range(3):
                await driver.advance(1)
        assert [(e.key, e.value) for e in await driver.read(out)] == [("a", 2), ("a", None), ("b", 4)]
        assert dict(even.items()) == {"b": 4}


async def test_with_the_cache_on_a_deletion_of_a_key_absent_before_and_after_sends_nothing() -> None:
    """Kafka Streams' cache flush skips null -> null; with the cache off toTable forwards it."""
    app = sk.App("dsl-cache-tombstones")
    events = app.topic("events", key_type=str, value_type=int, partitions=1)
    cached = app.stream(events).to_table("cached")
    every = app.stream(events).to_table("every", cache=False)
    async with AppDriver(app) as driver:
        for key, value in [("a", None), ("b", 1), ("b", None)]:
            await driver.send(events, value, key=key)
            await driver.process()
        assert [(e.key, e.value) for e in await driver.read(cached.table.changelog_topic)] == [("b", 1), ("b", None)]
        assert [(e.key, e.value) for e in await driver.read(every.table.changelog_topic)] == [
            ("a", None), ("b", 1), ("b", None)]


async def test_a_table_with_its_cache_off_forwards_every_update() -> None:
    """``cache=False``: each update reaches the changelog (the table's stream), not the latest
    per key per commit."""
    app = sk.App("dsl-cache-off")
    events = app.topic("events", key_type=str, value_type=int, partitions=1)
    fanned = app.stream(events).flat_map_values(lambda v: [v, v])
    cached = fanned.group_by_key().count("cached")
    every = fanned.group_by_key(name="k2").count("every", cache=False)
    async with AppDriver(app) as driver:
        await driver.send(events, 1, key="a")
        await driver.process()
        assert [e.value for e in await driver.read(cached.table.changelog_topic)] == [2]
        assert [e.value for e in await driver.read(every.table.changelog_topic)] == [1, 2]


@pytest.mark.parametrize("how", ["inner", "left", "outer"])
async def test_table_table_join_follows_both_sides(how: str) -> None:
    app = sk.App(f"dsl-tt-{how}")
    lt = app.topic("lt", key_type=str, value_type=int, partitions=2)
    rt = app.topic("rt", key_type=str, value_type=int, partitions=2)
    left = app.stream(lt).to_table("left")
    right = app.stream(rt).to_table("right")
    joined = left.join(right, lambda a, b: [a, b], how=how, name="joined")
    steps = [(lt, "a", 1), (rt, "a", 10), (lt, "b", 2), (rt, "c", 30), (rt, "a", None), (lt, "c", 3)]
    model_l: dict[str, int] = {}
    model_r: dict[str, int] = {}
    async with AppDriver(app) as driver:
        for topic, key, value in steps:
            await driver.send(topic, value, key=key)
            await driver.process()
            side = model_l if topic is lt else model_r
            if value is None:
                side.pop(key, None)
            else:
                side[key] = value
        keys = set(model_l) | set(model_r)
        if how == "inner":
            keys = set(model_l) & set(model_r)
        elif how == "left":
            keys = set(model_l)
        expected = {k: [model_l.get(k), model_r.get(k)] for k in keys}
        assert dict(joined.items()) == expected


async def test_process_runs_until_a_table_table_join_has_emitted() -> None:
    # Issue 29: process() promises that every record was processed, so the join's stream of
    # changes holds the row as soon as both sides' records were each followed by process().
    app = sk.App("dsl-tt-process")
    lt = app.topic("lt", key_type=str, value_type=int)
    rt = app.topic("rt", key_type=str, value_type=int)
    out = app.topic("joined-out", key_type=str, value_type=list)
    left = app.stream(lt).to_table("left")
    right = app.stream(rt).to_table("right")
    left.join(right, lambda a, b: [a, b], name="joined").to_stream().to(out)
    async with AppDriver(app) as driver:
        await driver.send(lt, 1, key="a")
        await driver.process()
        await driver.send(rt, 10, key="a")
        await driver.process()
        assert [(e.key, e.value) for e in await driver.read(out)] == [("a", [1, 10])]


def test_declarative_functions_must_be_plain() -> None:
    app = sk.App("dsl-bad")
    topic = app.topic("t")

    async def upper(v: str) -> str:
        return v.upper()

    with pytest.raises(ConfigError, match="plain functions"):
        app.stream(topic).map_values(upper)
    with pytest.raises(ConfigError, match="stream-table join is one of"):
        app.stream(topic).join(app.Table("x"), lambda a, b: a, how="outer")


async def test_flat_map_rekeys_and_values_cross_the_repartition_as_json() -> None:
    app = sk.App("dsl-flat")
    baskets = app.topic("baskets", key_type=str, value_type=dict, partitions=3)
    items = (
        app.stream(baskets)
        .flat_map(lambda user, basket: [(item, {"user": user, "n": n}) for item, n in basket.items()])
        .group_by_key(name="item")
        .aggregate("item_users", dict, lambda item, v, agg: {**agg, v["user"]: agg.get(v["user"], 0) + v["n"]})
    )
    async with AppDriver(app) as driver:
        await driver.send(baskets, {"pen": 2, "ink": 1}, key="ann")
        await driver.send(baskets, {"pen": 1}, key="bob")
        await driver.send(baskets, {"pen": 3}, key="ann")
        await driver.process()
        assert dict(items.items()) == {"pen": {"ann": 5, "bob": 1}, "ink": {"ann": 1}}
        repartitioned = await driver.read(app.topics["dsl-flat-item_users-item-repartition"])
    assert sorted(e.key for e in repartitioned) == ["ink", "pen", "pen", "pen"]
    # The definition is plain data the app keeps: the nodes, in order.
    (pipeline,) = app.topologies
    assert [type(n).__name__ for n in pipeline] == ["Source", "Map", "GroupBy", "Aggregate"]


async def test_a_join_of_streams_and_tables_not_co_partitioned_is_refused_at_start() -> None:
    app = sk.App("dsl-copart")
    users = app.topic("users", key_type=str, value_type=str, partitions=2)
    clicks = app.topic("clicks", key_type=str, value_type=str, partitions=3)
    names = app.stream(users).to_table("names", partitions=2)
    app.stream(clicks).join(names, lambda c, u: u).to(app.topic("out"))
    with pytest.raises(ConfigError, match=r"'clicks' \(3 partitions\) is joined with table 'names' \(2 partitions\)"):
        async with AppDriver(app):
            pass
