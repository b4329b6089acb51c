"""Faust's topic calls: ``send_soon`` from plain code, ``maybe_declare``."""

from __future__ import annotations

import streamkit as faust
from streamkit.testing import AppDriver


async def test_send_soon_from_plain_code_is_stored_and_committed_with_the_record() -> None:
    app = faust.App("soon")
    words = app.topic("words", value_type=str)
    lengths = app.topic("lengths", value_type=int)

    def record_length(word: str) -> None:  # plain code, called from the agent
        lengths.send_soon(value=len(word))

    @app.agent(words)
    async def measure(stream: faust.Stream) -> None:
        async for word in stream:
            record_length(word)

    async with AppDriver(app) as driver:
        for word in ["a", "abc", "abcdef"]:
            await driver.send(words, word)
        await driver.process()
        assert [e.value for e in await driver.read(lengths)] == [1, 3, 6]
        late = app.topic("declared-late", value_type=int)
        await late.maybe_declare()
        assert await driver.client.partition_count("declared-late") == 1


async def test_stream_current_event_and_event_message() -> None:
    app = faust.App("events")
    words = app.topic("words", value_type=str, partitions=2)
    seen: list[tuple[str, int, int, str]] = []

    @app.agent(words)
    async def look(stream: faust.Stream) -> None:
        async for word in stream:
            event = stream.current_event
            assert event is not None
            message = event.message
            assert message.tp == faust.TopicPartition(message.topic, message.partition)
            seen.append((message.topic, message.partition, message.offset, word))

    async with AppDriver(app) as driver:
        await driver.send(words, "hi", partition=1)
        await driver.send(words, "there", partition=1)
        await driver.process()
    assert seen == [("words", 1, 0, "hi"), ("words", 1, 1, "there")]
