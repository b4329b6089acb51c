"""Faust's top-level type names and ``faust.uuid()``."""

from __future__ import annotations

import typing
import uuid as std_uuid

import streamkit as faust


def test_type_names_are_streamkits_classes_and_subscriptable() -> None:
    assert faust.StreamT is faust.Stream and faust.TopicT is faust.Topic and faust.ChannelT is faust.Topic
    assert faust.AgentT is faust.Agent and faust.EventT is faust.Event
    for generic in (faust.StreamT, faust.TopicT, faust.ChannelT, faust.AgentT, faust.EventT, faust.Stream):
        alias = generic[int]
        assert alias.__origin__ is generic and alias.__args__ == (int,)
    assert faust.TableT[str, int].__args__ == (str, int)


def test_annotations_in_faust_style_evaluate() -> None:
    app = faust.App("names")
    words = app.topic("words", value_type=str)

    @app.agent(words)
    async def count(stream: faust.StreamT[str]) -> None:
        async for _ in stream:
            pass

    table: faust.TableT[str, int] = {}
    table["a"] = 1
    assert isinstance(count, faust.AgentT) and isinstance(words, faust.TopicT)
    assert typing.get_type_hints(count.fn)["stream"] == faust.Stream[str]


def test_uuid_is_a_fresh_uuid_text() -> None:
    first, second = faust.uuid(), faust.uuid()
    assert first != second
    assert str(std_uuid.UUID(first)) == first
