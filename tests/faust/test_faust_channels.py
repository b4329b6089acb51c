"""Faust's in-memory channels: ``app.channel()``, agents over them, ``sink=[channel]``,
``channel.send``/``put``, iterating a channel outside an agent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import streamkit as faust
from streamkit.testing import AppDriver


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


class Order(faust.Record):
    id: str
    amount: float


async def test_agent_over_a_channel_and_a_channel_as_sink() -> None:
    app = faust.App("chan")
    orders = app.topic("orders", key_type=str, value_type=Order, partitions=2)
    big = app.channel(value_type=Order)
    totals = app.topic("totals", value_type=float)
    seen: list[tuple[str, str, float, int]] = []

    @app.agent(orders, sink=[big])
    async def filter_big(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for order in stream:
            if order.amount >= 100:
                yield order

    @app.agent(big, sink=[totals])
    async def on_big(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            seen.append((event.topic, event.value.id, event.value.amount, event.offset))
            yield event.value.amount * 2

    async with AppDriver(app) as driver:
        for i, amount in enumerate([5.0, 150.0, 99.0, 100.0]):
            await driver.send(orders, Order(f"o{i}", amount), key=f"u{i}")
        await driver.process()
        await wait_for(lambda: len(seen) == 2)
        await driver.process()
        assert sorted(e.value for e in await driver.read(totals)) == [200.0, 300.0]
    assert sorted(seen) == [("<anon>", "o1", 150.0, -1), ("<anon>", "o3", 100.0, -1)]


async def test_channel_send_put_and_iteration_outside_an_agent() -> None:
    app = faust.App("chan-iter")
    numbers = app.channel(key_type=str, value_type=int, maxsize=2)
    events = numbers.__aiter__()  # a subscriber from now on, as in Faust
    other = numbers.stream()
    fut = await numbers.send(key="a", value=1, headers={"h": "x"})
    assert fut.done() and (await fut).offset == -1
    assert numbers.subscriber_count == 2

    first = await events.__anext__()
    assert (first.key, first.value, first.headers) == ("a", 1, [("h", b"x")])
    await numbers.put(first)  # an event as it is, to every subscriber
    again = await events.__anext__()
    assert again is first
    assert [await other.__anext__(), await other.__anext__()] == [1, 1]

    with pytest.raises(faust.SerdeError, match="takes values of type int"):
        await numbers.send(value="not a number")

    # A full subscriber makes the sender wait until it reads (maxsize=2).
    pending = asyncio.ensure_future(asyncio.gather(*(numbers.send(value=i) for i in range(3))))
    for _ in range(5):
        await asyncio.sleep(0)  # let the sends run until the queues are full
    assert not pending.done()  # the third send waits for a reader
    got = [(await events.__anext__()).value for _ in range(3)]
    assert got == [0, 1, 2]
    assert [await other.__anext__() for _ in range(3)] == [0, 1, 2]
    await asyncio.wait_for(pending, 10)


async def test_channel_agent_with_concurrency_and_a_failing_event() -> None:
    app = faust.App("chan-errors")
    work = app.channel(value_type=int)
    done: list[int] = []

    @app.agent(work, concurrency=3)
    async def worker(stream: faust.Stream) -> None:
        async for n in stream:
            if n == 13:
                raise ValueError("unlucky")
            done.append(n)

    async with AppDriver(app) as driver:
        for n in range(20):
            await work.send(value=n)
        await wait_for(lambda: len(done) == 19)
        assert driver.worker.channel_tasks[0].dropped == 1  # the failing event is logged, dropped
    assert sorted(done) == [n for n in range(20) if n != 13]


async def test_a_channel_agent_cannot_group_by() -> None:
    app = faust.App("chan-group")
    ch = app.channel()

    @app.agent(ch)
    async def regroup(stream: faust.Stream) -> None:
        async for _ in stream.group_by(lambda v: v, name="v"):
            pass

    with pytest.raises(faust.ConfigError, match="reads a channel: it cannot group_by"):
        async with AppDriver(app):
            pass
