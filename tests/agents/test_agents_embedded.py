"""The engine end to end on the embedded log, through the public test kit (dead letters by a
worker on every backend, ``log_url``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

import streamkit as sk
from streamkit.runtime import Worker
from streamkit.testing import AppDriver
from tests.runtime.test_alignment import _settled
from tests.support.workers import read_topic, until_assigned


class Order(sk.Record):
    order_id: str
    user: str
    amount: float


def make_app(**options: object) -> sk.App:
    return sk.App("shop", **options)  # type: ignore[arg-type]


async def test_map_filter_yield_to_sink() -> None:
    app = make_app()
    orders = app.topic("orders", value_type=Order, partitions=3)
    big = app.topic("big-orders", value_type=Order, partitions=2)

    @app.agent(orders, sink=[big])
    async def only_big(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for order in stream.filter(lambda o: o.amount >= 10).map(lambda o: Order(o.order_id, o.user.upper(), o.amount)):
            yield order

    async with AppDriver(app) as driver:
        for i in range(30):
            await driver.send(orders, Order(f"o{i}", f"u{i % 4}", float(i)), key=f"o{i}")
        await driver.process()
        out = await driver.read(big)
    assert sorted(e.value.order_id for e in out) == sorted(f"o{i}" for i in range(10, 30))
    assert all(e.value.user.startswith("U") for e in out)
    # the output keeps the input's key and event time
    assert {e.key for e in out} == {f"o{i}".encode() for i in range(10, 30)}


async def test_per_partition_order_is_kept() -> None:
    app = make_app()
    numbers = app.topic("numbers", key_type=str, value_type=int, partitions=4)
    seen: dict[str, list[int]] = {}

    @app.agent(numbers)
    async def collect(stream: sk.Stream) -> None:
        async for key, value in stream.items():
            seen.setdefault(key, []).append(value)

    async with AppDriver(app) as driver:
        for i in range(200):
            await driver.send(numbers, i, key=f"k{i % 7}")
        await driver.process()
    assert set(seen) == {f"k{j}" for j in range(7)}
    for key, values in seen.items():
        assert values == sorted(values), key
        assert len(values) == len([i for i in range(200) if f"k{i % 7}" == key])


async def test_group_by_repartitions_so_each_key_meets_in_one_partition() -> None:
    app = make_app()
    orders = app.topic("orders", value_type=Order, partitions=4)
    where: dict[str, set[int]] = {}
    totals: dict[str, float] = {}

    @app.agent(orders)
    async def by_user(stream: sk.Stream) -> None:
        async for event in stream.group_by(Order.user).events():
            where.setdefault(event.key, set()).add(event.partition)
            totals[event.key] = totals.get(event.key, 0.0) + event.value.amount

    async with AppDriver(app) as driver:
        for i in range(100):
            # keyed by order id: each user's orders start out spread over partitions
            await driver.send(orders, Order(f"o{i}", f"user{i % 5}", 1.0), key=f"o{i}")
        await driver.process()
        assert "shop-by_user-user-repartition" in app.topics
    assert totals == {f"user{j}": 20.0 for j in range(5)}
    assert all(len(parts) == 1 for parts in where.values())


async def test_bad_records_and_failing_handler_go_to_the_dead_letter_topic(log_url: str, tmp_path: Path, unique: str) -> None:
    """On each backend, run by a worker: a record the handler raised on and one that does not
    decode go to the dead-letter topic with why and where from; the others are handled."""
    app = sk.App(unique, broker=log_url, commit_interval=0.2)
    orders = app.topic(f"{unique}-orders", value_type=Order)
    done: list[str] = []

    @app.agent(orders)
    async def handle(stream: sk.Stream) -> None:
        async for order in stream:
            if order.amount < 0:
                raise ValueError(f"negative amount in {order.order_id}")
            done.append(order.order_id)

    raw = app.topic(f"{unique}-orders", value_type=Order)
    async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
        await until_assigned(worker, 1)
        await (await raw.send(value=Order("a", "u", 1.0)))
        await (await raw.send(value=Order("b", "u", -1.0)))
        await (await app.topic(f"{unique}-orders-raw-view", value_serializer="raw").send(value=b"x"))  # unrelated topic
        # an undecodable value, written with a raw serializer straight into the orders
        await (await orders.send(value=Order("c", "u", 2.0)))
        await (await sk.Topic(app, f"{unique}-orders", value_serializer="raw").send(value=b"{not json"))
        await (await orders.send(value=Order("d", "u", 3.0)))
        await _settled(worker)
    dead = await read_topic(log_url, app.dlq_topic.name)
    assert done == ["a", "c", "d"]
    assert len(dead) == 2
    errors = [dict(e.headers)["streamkit.error"].decode() for e in dead]
    assert "negative amount in b" in errors[0]
    assert "does not decode" in errors[1] and f"{unique}-orders-0 offset 3" in errors[1]
    assert dict(dead[1].headers)["streamkit.source.offset"] == b"3"
    assert dead[1].value == b"{not json"


async def test_on_error_stop_stops_the_worker() -> None:
    app = make_app(on_error="stop")
    orders = app.topic("orders", value_type=int)

    @app.agent(orders)
    async def fragile(stream: sk.Stream) -> None:
        async for value in stream:
            if value == 3:
                raise RuntimeError("boom")

    async with AppDriver(app) as driver:
        for i in range(5):
            await driver.send(orders, i)
        with pytest.raises(RuntimeError, match="boom"):
            await asyncio.wait_for(driver.worker.wait(), 5)


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait, turning the event loop, until ``condition()`` holds (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def test_take_batches_and_enumerate_and_echo() -> None:
    """``take`` cuts a batch at ``max_`` values, or ``within`` seconds after its first value
    on the driver's clock (not before); ``echo`` copies every value; ``enumerate`` numbers."""
    app = make_app()
    src = app.topic("src", value_type=int)
    copy = app.topic("copy", value_type=int)
    batches: list[list[int]] = []
    numbered: list[tuple[int, int]] = []

    @app.agent(src)
    async def batcher(stream: sk.Stream) -> None:
        async for batch in stream.echo(copy).take(10, within=60.0):
            batches.append(batch)

    @app.agent(copy)
    async def counter(stream: sk.Stream) -> None:
        async for i, v in stream.enumerate(100):
            numbered.append((i, v))

    async with AppDriver(app) as driver:
        for i in range(25):
            await driver.send(src, i)
        await until(lambda: len(batches) == 2 and len(numbered) == 25)
        assert batches == [list(range(10)), list(range(10, 20))]
        # 59 s of the 60 pass: the open batch [20..24] stays open and takes one more value.
        driver.clock.advance(59_000)
        driver.worker.clock_advanced()
        await driver.send(src, 25)
        await until(lambda: len(numbered) == 26)
        assert len(batches) == 2
        await driver.advance(1.0)  # now 60 s since its first value: cut
        copied = [e.value for e in await driver.read(copy)]
    assert batches == [list(range(10)), list(range(10, 20)), list(range(20, 26))]
    assert copied == list(range(26))
    assert numbered == [(100 + i, i) for i in range(26)]


async def test_agent_send_cast_timer_and_task() -> None:
    app = make_app()
    ticks: list[int] = []
    got: list[str] = []

    @app.agent()
    async def greeter(stream: sk.Stream) -> None:
        async for name in stream:
            got.append(name)

    @app.timer(interval=10.0)
    async def tick() -> None:
        ticks.append(1)
        await greeter.cast(value="from-timer")

    @app.task
    async def on_start() -> None:
        await greeter.send(value="from-task")

    async with AppDriver(app) as driver:
        await driver.process()
        assert got == ["from-task"]
        await driver.advance(5)
        assert ticks == []
        await driver.advance(5)
        await driver.advance(10)
        assert len(ticks) == 2
    assert got == ["from-task", "from-timer", "from-timer"]


async def test_merge_of_several_topics_and_concurrency() -> None:
    app = make_app()
    a = app.topic("a", value_type=int)
    b = app.topic("b", value_type=int)
    seen: list[int] = []

    @app.agent([a, b], concurrency=3)
    async def both(stream: sk.Stream) -> None:
        async for value in stream:
            await asyncio.sleep(0)
            seen.append(value)

    async with AppDriver(app) as driver:
        for i in range(20):
            await driver.send(a, i)
            await driver.send(b, 100 + i)
        await driver.process()
    assert sorted(seen) == sorted([*range(20), *range(100, 120)])


async def test_event_time_flows_to_outputs() -> None:
    app = make_app()
    src = app.topic("src", value_type=int)
    dst = app.topic("dst", value_type=int)

    @app.agent(src, sink=[dst])
    async def double(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream:
            yield v * 2

    async with AppDriver(app) as driver:
        await driver.send(src, 21, timestamp=1_600_000_000_123)
        await driver.process()
        out = await driver.read(dst)
    assert [(e.value, e.timestamp) for e in out] == [(42, 1_600_000_000_123)]


async def test_restart_resumes_after_the_last_commit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    def build(seen: list[int]) -> tuple[sk.App, sk.Topic]:
        app = make_app()
        src = app.topic("src", value_type=int, partitions=2)

        @app.agent(src)
        async def record(stream: sk.Stream) -> None:
            async for v in stream:
                seen.append(v)

        return app, src

    first: list[int] = []
    app, src = build(first)
    async with AppDriver(app, data_dir=str(tmp_path)) as driver:
        for i in range(50):
            await driver.send(src, i)
        await driver.process()
    second: list[int] = []
    app, src = build(second)
    async with AppDriver(app, data_dir=str(tmp_path)) as driver:
        for i in range(50, 60):
            await driver.send(src, i)
        await driver.process()
    assert sorted(first) == list(range(50))
    assert sorted(second) == list(range(50, 60))


async def test_filtered_out_records_do_not_hold_back_commits() -> None:
    app = make_app()
    src = app.topic("src", value_type=int)
    kept: list[int] = []

    @app.agent(src)
    async def evens(stream: sk.Stream) -> None:
        async for v in stream.filter(lambda v: v % 2 == 0):
            kept.append(v)

    async with AppDriver(app) as driver:
        for i in range(12):  # the last record is filtered out
            await driver.send(src, i)
        await driver.process()
        committed = await driver.client.consumer(app.id).committed(sk.TopicPartition("src", 0))
    assert kept == [0, 2, 4, 6, 8, 10]
    assert committed == 12


async def test_an_output_the_log_refuses_stops_the_worker_without_committing_past_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = make_app()
    src = app.topic("src", value_type=int)
    dst = app.topic("dst", value_serializer="raw")

    @app.agent(src, sink=[dst])
    async def blow_up(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream:
            yield b"x" * (2 * 1024 * 1024 if v == 2 else 10)  # above max.message.bytes

    async with AppDriver(app, data_dir=str(tmp_path)) as driver:
        for i in range(4):
            await driver.send(src, i)
        with pytest.raises(sk.StreamkitError, match=r"exceeds max\.message\.bytes"):
            for _ in range(50):
                await driver.worker.commit()
                await asyncio.sleep(0.02)
        assert driver.worker.state == "failed"
    from streamkit.log.manager import LogManager

    with LogManager(tmp_path, background=False) as log:  # stopping committed nothing either
        committed = log.offsets.fetch(app.id).get(sk.TopicPartition("src", 0))
    assert committed is None or committed[0] <= 2


async def test_large_outputs_are_appended_in_batches_the_log_accepts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """3,000 records of 2 KiB sent in one go (6 MB, no turn of the event loop) are split
    into batches under the log's max.message.bytes (1 MiB), not refused as one batch."""
    from streamkit.transport.embedded.client import EmbeddedLogClient

    client = EmbeddedLogClient(str(tmp_path / "log"))
    await client.start()
    try:
        await client.ensure_topic("padded", 1)
        producer = client.producer()
        await producer.start()
        for i in range(3000):
            wait = producer.send_nowait("padded", 0, None, b"%06d" % i + b"." * 2042, 1_700_000_000_000)
            assert wait is None
        await producer.flush()
        part = client.log.partition("padded", 0)
        assert part.high_watermark == 3000
    finally:
        await client.aclose()


async def test_msgpack_typed_topics_and_a_bad_record_to_the_dead_letter_topic() -> None:
    app = make_app()
    orders = app.topic("orders-mp", key_type=str, value_type=Order, value_serializer="msgpack")
    totals = app.topic("totals-mp", key_type=str, value_type=float, value_serializer="msgpack")
    raw = sk.Topic(app, "orders-mp", key_type=str, value_serializer="raw")  # the same topic, as bytes

    @app.agent(orders, sink=[totals])
    async def amounts(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for order in stream:
            yield order.amount * 2

    async with AppDriver(app) as driver:
        await driver.send(orders, Order("o1", "ann", 1.5), key="o1")
        await driver.send(raw, b"{not msgpack", key="bad")
        await driver.send(orders, Order("o2", "bob", 2.0), key="o2")
        await driver.process()
        out = await driver.read(totals)
        dead = await driver.read(app.dlq_topic)
    assert [(e.key, e.value) for e in out] == [("o1", 3.0), ("o2", 4.0)]
    assert [e.value for e in dead] == [b"{not msgpack"]
    assert b"msgpack:Order" in dict(dead[0].headers)["streamkit.error"]


async def test_group_by_keeps_headers_and_event_time() -> None:
    app = make_app()
    src = app.topic("clicks", value_type=Order, partitions=2)
    seen: list[tuple[object, list[tuple[str, bytes | None]], int]] = []

    @app.agent(src)
    async def by_user(stream: sk.Stream) -> None:
        async for event in stream.group_by(Order.user).events():
            seen.append((event.key, list(event.headers), event.timestamp))

    async with AppDriver(app) as driver:
        await driver.send(src, Order("o1", "ann", 1.0), key="o1", headers={"trace": "t1"}, timestamp=1_700_000_000_123)
        await driver.send(src, Order("o2", "bob", 2.0), key="o2", timestamp=1_700_000_000_456)
        await driver.process()
    assert sorted(seen, key=lambda s: s[2]) == [
        ("ann", [("trace", b"t1")], 1_700_000_000_123),
        ("bob", [], 1_700_000_000_456),
    ]
