"""Runtime parts through the real worker on the embedded log: the sender's partitioning and
timestamps, back-pressure (pause and resume) without loss, timers and tasks that fail, sinks
that are agents and callables, repeated start/stop."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

import pytest

import streamkit as sk
from streamkit._core.clock import ManualClock
from streamkit._core.partitioner import partition_for_key
from streamkit.runtime import sender as runtime_sender
from streamkit.runtime.inbox import Inbox
from streamkit.testing import AppDriver


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


# -- the sender ------------------------------------------------------------------------------


async def test_keyed_records_go_where_kafkas_partitioner_puts_them() -> None:
    app = sk.App("keyed")
    topic = app.topic("t", key_type=str, value_type=int, partitions=5)
    async with AppDriver(app) as driver:
        placed = {f"user-{i}": (await driver.send(topic, i, key=f"user-{i}")).partition for i in range(200)}
    assert placed == {k: partition_for_key(k.encode(), 5) for k in placed}
    assert len(set(placed.values())) == 5


async def test_unkeyed_records_stick_to_a_partition_for_a_batch_then_move(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_sender, "STICKY_BATCH", 10)
    app = sk.App("sticky")
    topic = app.topic("t", value_type=int, partitions=50)
    async with AppDriver(app) as driver:
        parts = [(await driver.send(topic, i)).partition for i in range(100)]
    runs = [parts[i : i + 10] for i in range(0, 100, 10)]
    assert all(len(set(run)) == 1 for run in runs)  # ten records in a row share a partition
    assert len({run[0] for run in runs}) > 1  # and the partition changes between batches


async def test_an_explicit_partition_out_of_range_is_refused() -> None:
    app = sk.App("explicit")
    topic = app.topic("t", value_type=int, partitions=2)
    async with AppDriver(app) as driver:
        assert (await driver.send(topic, 1, partition=1)).partition == 1
        with pytest.raises(sk.ConfigError, match=r"topic 't' has no partition 2 \(it has 2\)"):
            await driver.send(topic, 1, partition=2)


async def test_timestamps_come_from_the_event_else_the_clock() -> None:
    app = sk.App("stamps")
    src = app.topic("src", value_type=int)
    dst = app.topic("dst", value_type=int)
    side = app.topic("side", value_type=int)

    @app.agent(src, sink=[dst])
    async def stamp(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream:
            await side.send(value=v, timestamp=42)  # explicit wins
            yield v  # the event's timestamp flows on

    async with AppDriver(app, start_ms=1_000_000) as driver:
        await driver.send(src, 1, timestamp=5_000)
        await driver.send(src, 2)  # no timestamp: the driver's manual clock
        await driver.process()
        out = [(e.value, e.timestamp) for e in await driver.read(dst)]
        side_out = [(e.value, e.timestamp) for e in await driver.read(side)]
    assert out == [(1, 5_000), (2, 1_000_000)]
    assert side_out == [(1, 42), (2, 42)]


# -- back-pressure ---------------------------------------------------------------------------


async def test_a_full_inbox_pauses_its_partition_and_resumes_without_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = Inbox.__init__.__defaults__
    monkeypatch.setattr(Inbox.__init__, "__defaults__", (500,))  # a small inbox
    assert defaults == (20_000,)
    app = sk.App("pressure")
    src = app.topic("src", value_type=int)
    gate = asyncio.Event()
    seen: list[int] = []

    @app.agent(src)
    async def slow(stream: sk.Stream) -> None:
        async for v in stream:
            await gate.wait()
            seen.append(v)

    total = 30_000  # three fetches of FETCH_MAX_RECORDS
    async with AppDriver(app) as driver:
        producer = driver.client.producer()
        await producer.start()
        serde = src.value_serde
        for i in range(total):
            producer.send_nowait("src", 0, None, serde.dumps(i), 1_700_000_000_000)
        await producer.flush()
        tp = sk.TopicPartition("src", 0)
        inbox = driver.worker._inboxes[tp][0]
        await until(lambda: inbox.paused)
        fetched = driver.worker.stats.records_in
        assert fetched < total  # it stopped fetching with most records still in the log
        consumer = driver.worker._consumer
        assert consumer is not None and tp in consumer._paused  # type: ignore[attr-defined]
        gate.set()
        await driver.process()
        assert not inbox.paused
    assert seen == list(range(total))  # nothing lost, nothing twice, in order


# -- timers, tasks, sinks --------------------------------------------------------------------


async def test_a_failing_timer_runs_again_and_missed_ticks_are_skipped(caplog: pytest.LogCaptureFixture) -> None:
    app = sk.App("timers")
    ticks: list[int] = []
    clock_at: list[int] = []

    @app.timer(interval=10.0)
    async def tick() -> None:
        ticks.append(1)
        if len(ticks) == 1:
            raise RuntimeError("first tick fails")

    async with AppDriver(app) as driver:
        clock: ManualClock = driver.clock
        await driver.advance(10)  # due: runs and fails
        await driver.advance(10)  # runs again
        clock_at.append(clock.now_ms())
        await driver.advance(35)  # three intervals missed: one run, not three
        await driver.advance(4)  # the next is due 40 s after the last due time, not yet
        assert len(ticks) == 3
        await driver.advance(1)
        assert len(ticks) == 4
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == ["timer tick failed"]


async def test_a_failing_task_is_logged_and_the_worker_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    app = sk.App("tasks")
    src = app.topic("src", value_type=int)
    seen: list[int] = []

    @app.task
    async def broken_start() -> None:
        raise RuntimeError("cannot warm up")

    @app.agent(src)
    async def work(stream: sk.Stream) -> None:
        async for v in stream:
            seen.append(v)

    async with AppDriver(app) as driver:
        await driver.send(src, 1)
        await driver.process()
        assert driver.worker.state == "running"
    assert seen == [1]
    assert any(r.getMessage() == "task broken_start failed" and r.exc_info for r in caplog.records)


async def test_yielded_values_go_to_agents_and_callables_too() -> None:
    app = sk.App("sinks")
    src = app.topic("src", value_type=int)
    got_sync: list[int] = []
    got_async: list[int] = []
    got_agent: list[tuple[str, int]] = []

    @app.agent()
    async def downstream(stream: sk.Stream) -> None:
        async for key, value in stream.items():
            got_agent.append((key, value))

    async def remember(v: int) -> None:
        await asyncio.sleep(0)
        got_async.append(v)

    @app.agent(src, sink=[downstream, got_sync.append, remember])
    async def fan_out(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream:
            yield v + 1

    async with AppDriver(app) as driver:
        for i in range(3):
            await driver.send(src, i, key=f"k{i}".encode())
        await driver.process()
    assert got_sync == got_async == [1, 2, 3]
    assert sorted(got_agent) == [(b"k0", 1), (b"k1", 2), (b"k2", 3)]


async def test_concurrency_shares_a_partition_and_processes_each_record_once() -> None:
    app = sk.App("concurrent")
    src = app.topic("src", value_type=int)
    by_instance: Counter[int] = Counter()
    seen: list[int] = []
    running = [0, 0]

    @app.agent(src, concurrency=4)
    async def parallel(stream: sk.Stream) -> None:
        async for v in stream:
            running[0] += 1
            running[1] = max(running[1], running[0])
            await asyncio.sleep(0.001)
            running[0] -= 1
            seen.append(v)
            by_instance[id(asyncio.current_task())] += 1

    async with AppDriver(app) as driver:
        for i in range(200):
            await driver.send(src, i)
        await driver.process()
        committed = driver.worker.committed[sk.TopicPartition("src", 0)]
    assert sorted(seen) == list(range(200))
    assert running[1] > 1 and len(by_instance) == 4  # the instances did overlap
    assert committed == 200


async def test_a_worker_starts_and_stops_again_and_stop_is_idempotent(tmp_path: object) -> None:
    app = sk.App("again")
    src = app.topic("src", value_type=int)
    seen: list[int] = []

    @app.agent(src)
    async def work(stream: sk.Stream) -> None:
        async for v in stream:
            seen.append(v)

    data_dir = str(tmp_path)
    for round_ in range(3):
        driver = AppDriver(app, data_dir=data_dir)
        async with driver:
            await driver.send(src, round_)
            await driver.process()
        await driver.worker.stop()  # a second stop does nothing
        assert driver.worker.state == "stopped"
        assert app.sender is None
    assert seen == [0, 1, 2]
    # send_soon buffers from plain code: only a running worker flushes it (``await send``
    # from a script opens its own producer instead, tests/faust/test_faust_send.py).
    with pytest.raises(sk.StreamkitError, match="is not running in a worker"):
        src.send_soon(value=1)
