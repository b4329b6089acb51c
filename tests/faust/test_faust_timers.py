"""Faust's timers and tasks: ``on_leader``, callables that take the app, ``functools.partial``."""

from __future__ import annotations

import functools

import streamkit as faust
from streamkit.testing import AppDriver


async def test_timers_and_tasks_in_fausts_shapes() -> None:
    app = faust.App("ticks")
    words = app.topic("words", value_type=str, partitions=2)
    ticks: list[str] = []

    @app.agent(words)
    async def read(stream: faust.Stream) -> None:
        async for _ in stream:
            pass

    @app.timer(1.0, on_leader=True)
    async def leader_tick(app: faust.App) -> None:
        ticks.append(f"leader:{app.id}")

    async def tick(name: str) -> None:
        ticks.append(name)

    app.timer(2.0)(functools.partial(tick, "partial"))

    @app.task
    async def startup(app: faust.App) -> None:
        ticks.append(f"task:{app.id}")

    async with AppDriver(app) as driver:
        await driver.process()
        assert driver.worker.is_leader()  # the only worker holds words-0
        await driver.advance(2.0)
    assert sorted(ticks) == ["leader:ticks", "partial", "task:ticks"]
