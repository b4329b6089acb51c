"""Faust's rebalance signals: ``app.on_partitions_assigned`` / ``_revoked`` /
``on_rebalance_complete`` with ``.connect``, and ``app.rebalancing``."""

from __future__ import annotations

import doctest

import streamkit as faust
import streamkit.app.signals
from streamkit.testing import AppDriver


async def test_signals_follow_the_workers_assignment() -> None:
    app = faust.App("signals")
    words = app.topic("words", value_type=str, partitions=2)
    heard: list[tuple[str, object]] = []

    @app.agent(words)
    async def read(stream: faust.Stream) -> None:
        async for _word in stream:
            pass

    @app.on_partitions_assigned.connect
    async def assigned(app: faust.App, assigned: set[faust.TopicPartition], **kwargs: object) -> None:
        heard.append(("assigned", sorted(str(tp) for tp in assigned)))
        heard.append(("rebalancing", app.rebalancing))

    @app.on_partitions_revoked.connect
    def revoked(app: faust.App, revoked: set[faust.TopicPartition], **kwargs: object) -> None:
        heard.append(("revoked", sorted(str(tp) for tp in revoked)))

    @app.on_rebalance_complete.connect
    async def complete(app: faust.App, **kwargs: object) -> None:
        heard.append(("complete", None))

    @app.on_rebalance_complete.connect
    async def broken(app: faust.App, **kwargs: object) -> None:
        raise RuntimeError("a receiver that fails does not stop the worker")

    async with AppDriver(app) as driver:
        await driver.send(words, "hi")
        await driver.process()
    assert heard == [
        ("assigned", ["words-0", "words-1"]),
        ("rebalancing", False),
        ("complete", None),
        ("revoked", ["words-0", "words-1"]),
    ]


def test_the_signals_module_examples_run() -> None:
    result = doctest.testmod(streamkit.app.signals)
    assert result.attempted > 0 and result.failed == 0
