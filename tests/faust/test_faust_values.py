"""Keys and values on the wire as Faust writes them (its defaults: raw keys, JSON values)."""

from __future__ import annotations

import pytest

import streamkit as faust
from streamkit.testing import AppDriver


def test_a_str_value_is_a_json_string_and_reads_back_from_faust_or_plain_text() -> None:
    app = faust.App("values-str")
    words = app.topic("words", key_type=str, value_type=str)
    assert words.value_serde.dumps("héllo") == '"héllo"'.encode()  # what Faust writes
    assert words.value_serde.loads(b'"h\\u00e9llo \\"quoted\\""') == 'héllo "quoted"'  # what Faust writes
    assert words.value_serde.loads(b"plain text") == "plain text"  # kcat, a console producer
    assert words.value_serde.loads(b'"half') == '"half'  # not one JSON string: text
    assert words.value_serde.loads(b'"a" and "b"') == '"a" and "b"'
    with pytest.raises(faust.SerdeError, match="not UTF-8"):
        words.value_serde.loads(b"\xff")
    # keys: Faust's default key serializer is raw, a str key is its UTF-8 bytes
    assert words.key_serde.dumps("k1") == b"k1"
    assert words.key_serde.loads(b"k1") == "k1"


def test_serializers_named_like_faust() -> None:
    app = faust.App("values-named")
    assert app.topic("a", value_type=str, value_serializer="raw").value_serde.dumps("x") == b"x"
    assert app.topic("a2", value_type=str, value_serializer="raw").value_serde.loads(b"x") == "x"  # Faust's want_str
    assert app.topic("b", key_type=str, key_serializer="json").key_serde.dumps("k") == b'"k"'
    assert app.topic("c", value_type=bytes).value_serde.loads(b'"x"') == b'"x"'
    untyped = app.topic("d")
    assert untyped.value_serde.loads(b'"x"') == "x" and untyped.key_serde.loads(b"k") == b"k"
    plain = faust.App("values-raw", value_serializer="raw")
    assert plain.topic("e", value_type=str).value_serde.dumps("x") == b"x"
    assert plain.topic("f").value_serde.loads(b"x") == b"x"
    with pytest.raises(faust.SerdeError, match="unknown serializer 'yaml'"):
        app.topic("g", value_serializer="yaml")


async def test_str_values_through_an_agent() -> None:
    app = faust.App("values-agent")
    words = app.topic("words", key_type=str, value_type=str)
    shouted = app.topic("shouted", key_type=str, value_type=str)

    @app.agent(words, sink=[shouted])
    async def shout(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for word in stream:
            yield word.upper()

    raw_words = faust.Topic(app, "words", value_serializer="raw")
    raw_shouted = faust.Topic(app, "shouted", value_serializer="raw")
    async with AppDriver(app) as driver:
        await driver.send(words, "from streamkit")
        await (await raw_words.send(value=b'"from faust"'))
        await (await raw_words.send(value=b"from kcat"))
        await driver.process()
        out = await driver.read(raw_shouted)
    assert [e.value for e in out] == [b'"FROM STREAMKIT"', b'"FROM FAUST"', b'"FROM KCAT"']
