"""``Stream`` operators through the real runtime: through, group_by, map/filter (sync and
async), items/events/enumerate, and the errors a wrong use gets."""

from __future__ import annotations

import asyncio

import pytest

import streamkit as sk
from streamkit._core.clock import SYSTEM_CLOCK
from streamkit._core.partitioner import partition_for_key
from streamkit.testing import AppDriver


async def test_through_writes_to_the_topic_and_continues_from_it_in_the_same_partition() -> None:
    app = sk.App("through")
    src = app.topic("src", key_type=str, value_type=int, partitions=3)
    mid = app.topic("mid", key_type=str, value_type=int, partitions=3)
    seen: list[tuple[str, int, str, int, int]] = []

    @app.agent(src)
    async def via(stream: sk.Stream) -> None:
        async for e in stream.map(lambda v: v * 10).through(mid).events():
            seen.append((e.topic, e.partition, e.key, e.value, e.timestamp))

    async with AppDriver(app) as driver:
        placed = {}
        for i in range(30):
            sent = await driver.send(src, i, key=f"k{i}", timestamp=1_700_000_000_000 + i)
            placed[f"k{i}"] = sent.partition
        await driver.process()
        written = await driver.read(mid)
        committed = driver.worker.committed
    # Everything went through "mid", each record in the partition it came from, with its key
    # and event time, and the agent read it from there.
    assert sorted((e.key, e.value, e.partition) for e in written) == sorted(
        (f"k{i}", i * 10, placed[f"k{i}"]) for i in range(30)
    )
    assert sorted(seen) == sorted(("mid", placed[f"k{i}"], f"k{i}", i * 10, 1_700_000_000_000 + i) for i in range(30))
    # Both the source and the through topic are committed to their ends.
    for p in range(3):
        n = sum(1 for v in placed.values() if v == p)
        if n:
            assert committed[sk.TopicPartition("src", p)] == n
            assert committed[sk.TopicPartition("mid", p)] == n
    assert app.topics["mid"] is mid  # no repartition topic of its own


async def test_through_a_topic_with_another_partition_count_places_records_by_key() -> None:
    app = sk.App("through-n")
    src = app.topic("src", key_type=str, value_type=int, partitions=3)
    mid = app.topic("mid", key_type=str, value_type=int, partitions=2)
    seen: list[tuple[str, int]] = []

    @app.agent(src)
    async def via(stream: sk.Stream) -> None:
        async for e in stream.through(mid).events():
            seen.append((e.key, e.partition))

    async with AppDriver(app) as driver:
        for i in range(20):
            await driver.send(src, i, key=f"k{i}")
        await driver.process()
    assert sorted(seen) == sorted((f"k{i}", partition_for_key(f"k{i}".encode(), 2)) for i in range(20))


async def test_a_record_failing_after_through_is_dead_lettered_from_the_through_topic() -> None:
    app = sk.App("through-dlq")
    src = app.topic("src", value_type=int)
    mid = app.topic("mid", value_type=int)
    ok: list[int] = []

    @app.agent(src)
    async def via(stream: sk.Stream) -> None:
        async for v in stream.through(mid):
            if v == 2:
                raise ValueError("two")
            ok.append(v)

    async with AppDriver(app) as driver:
        for i in range(4):
            await driver.send(src, i)
        await driver.process()
        dead = await driver.dead_letters()
    assert ok == [0, 1, 3]
    assert [dict(e.headers)["streamkit.source.topic"] for e in dead] == [b"mid"]
    assert dict(dead[0].headers)["streamkit.source.offset"] == b"2"


async def test_async_map_and_filter_items_and_enumerate() -> None:
    app = sk.App("ops")
    src = app.topic("src", key_type=str, value_type=int)
    got: list[tuple[int, tuple[str, int]]] = []

    async def double(v: int) -> int:
        await asyncio.sleep(0)
        return v * 2

    async def keep(v: int) -> bool:
        await asyncio.sleep(0)
        return v % 4 == 0

    @app.agent(src)
    async def ops(stream: sk.Stream) -> None:
        numbered = 0
        async for key, value in stream.map(double).filter(keep).items():
            got.append((numbered, (key, value)))
            numbered += 1

    async with AppDriver(app) as driver:
        for i in range(10):
            await driver.send(src, i, key=f"k{i}")
        await driver.process()
        committed = driver.worker.committed[sk.TopicPartition("src", 0)]
    assert got == [(n, (f"k{i}", i * 2)) for n, i in enumerate(i for i in range(10) if (i * 2) % 4 == 0)]
    assert committed == 10  # the filtered-out records (async filter) do not hold the commit back


async def test_group_by_with_a_lambda_needs_a_name() -> None:
    with pytest.raises(sk.ConfigError, match="group_by with a lambda needs name="):
        sk.Stream(_NoSource()).group_by(lambda v: v)


async def test_take_refuses_nonsense_arguments() -> None:
    stream = sk.Stream(_NoSource())
    with pytest.raises(sk.ConfigError, match="take needs max_ >= 1 and within > 0"):
        await stream.take(0, within=1.0).__anext__()
    with pytest.raises(sk.ConfigError, match="take needs max_ >= 1 and within > 0"):
        await stream.take(5, within=0).__anext__()


class _NoSource:
    """A source with nothing in it; only argument checks run against it."""

    clock = SYSTEM_CLOCK

    async def get(self, timeout: float | None) -> None:
        raise AssertionError("not read")

    def get_nowait(self) -> None:
        return None

    def ack(self) -> None:
        return None

    def release(self, event: object) -> None:
        return None

    def through(self, *args: object) -> object:
        raise AssertionError("not opened")


async def test_assignment_listeners_see_tasks_before_they_read_and_after_the_revocation_commit() -> None:
    """The hook points a state manager uses: stores open before a task reads its first
    record, and close after what the task finished was committed."""
    from streamkit.runtime.tasks import PartitionTask

    app = sk.App("hooks")
    src = app.topic("src", value_type=int, partitions=2)
    seen: list[int] = []
    calls: list[tuple[str, list[str], object]] = []

    @app.agent(src)
    async def count(stream: sk.Stream) -> None:
        async for v in stream:
            seen.append(v)

    driver = AppDriver(app)

    class Listener:
        async def partitions_assigned(self, assigned: set[sk.TopicPartition], tasks: list[PartitionTask]) -> None:
            assert assigned == {sk.TopicPartition("src", 0), sk.TopicPartition("src", 1)}
            calls.append(("assigned", sorted(repr(t) for t in tasks), len(seen)))

        async def partitions_revoked(
            self, revoked: set[sk.TopicPartition], tasks: list[PartitionTask], committed: bool
        ) -> None:
            calls.append(("revoked", sorted(repr(t) for t in tasks), (committed, dict(driver.worker.committed))))

    driver.worker.task_assignment.listeners.append(Listener())
    async with driver:
        for i in range(6):
            await driver.send(src, i, partition=i % 2)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while len(seen) < 6:  # processed, and (most likely) not committed yet: stop commits it
            assert loop.time() < deadline
            await asyncio.sleep(0.005)
    names = ["<PartitionTask count[0]>", "<PartitionTask count[1]>"]
    assert calls[0] == ("assigned", names, 0)
    assert calls[1] == ("revoked", names, (True, {sk.TopicPartition("src", 0): 3, sk.TopicPartition("src", 1): 3}))
