from __future__ import annotations

import pytest

import streamkit as sk
from streamkit._core.serde import JsonSerde, MsgpackSerde, RawSerde, SerdeError, StrSerde, serde_for


class Point(sk.Record):
    x: int
    y: int


class CheckedPoint(sk.Record, validation=True):
    x: int
    y: int


def test_serde_for_picks_by_type_name_or_instance() -> None:
    assert isinstance(serde_for(None), RawSerde)
    assert isinstance(serde_for(bytes), RawSerde)
    assert isinstance(serde_for(str), StrSerde)
    assert serde_for("json").name == "json"
    assert serde_for(Point).name == "json:Point"
    custom = StrSerde()
    assert serde_for(custom) is custom
    with pytest.raises(SerdeError, match="unknown serializer"):
        serde_for("yaml")


@pytest.mark.parametrize(
    "serde", [RawSerde(), StrSerde(), JsonSerde(), JsonSerde(Point), MsgpackSerde(), MsgpackSerde(Point)]
)
def test_none_passes_through_both_ways(serde: sk.Serde) -> None:
    assert serde.dumps(None) is None
    assert serde.loads(None) is None


def test_typed_json_round_trip_and_validation() -> None:
    serde = serde_for(Point)
    assert serde.loads(serde.dumps(Point(1, 2))) == Point(1, 2)
    # as Faust: a value off its annotation is kept, unless the class asks for validation
    assert serde.loads(b'{"x": "one", "y": 2}') == Point("one", 2)  # type: ignore[arg-type]
    with pytest.raises(SerdeError, match="does not decode as json:CheckedPoint: CheckedPoint: field 'x' is not int"):
        serde_for(CheckedPoint).loads(b'{"x": "one", "y": 2}')
    with pytest.raises(SerdeError, match="missing required field 'y'"):
        serde.loads(b'{"x": 1}')
    with pytest.raises(SerdeError):
        serde.loads(b"not json")
    with pytest.raises(SerdeError, match="cannot encode"):
        serde.dumps(object())


def test_str_and_raw() -> None:
    assert StrSerde().loads("é".encode()) == "é"
    with pytest.raises(SerdeError, match="not UTF-8"):
        StrSerde().loads(b"\xff")
    assert RawSerde().dumps("a") == b"a"
    with pytest.raises(SerdeError, match="needs bytes"):
        RawSerde().dumps(3)


def test_topic_and_app_declarations_validate() -> None:
    app = sk.App("decl")
    topic = app.topic("t", value_type=Point, partitions=2, retention=60, compacted=True)
    assert topic.config == {"retention.ms": "60000", "cleanup.policy": "compact"}
    assert app.topic("t") is topic
    with pytest.raises(sk.ConfigError):
        app.topic("t", value_type=int)
    with pytest.raises(sk.ConfigError):
        sk.App("bad id!")
    with pytest.raises(sk.ConfigError):
        sk.App("ok", on_error="ignore")
    with pytest.raises(sk.ConfigError, match="async"):
        app.agent(topic)(lambda stream: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(sk.ConfigError, match="lambda needs name"):
        from streamkit.agents.stream import _key_function

        _key_function(lambda v: v, None)


def test_msgpack_typed_and_untyped() -> None:
    typed = serde_for("msgpack", Point)
    assert typed.name == "msgpack:Point"
    data = typed.dumps(Point(1, 2))
    assert data is not None and len(data) < len(b'{"x":1,"y":2}')
    assert typed.loads(data) == Point(1, 2)
    assert typed.loads(MsgpackSerde().dumps({"x": "one", "y": 2})) == Point("one", 2)  # type: ignore[arg-type]
    with pytest.raises(SerdeError, match="does not decode as msgpack:CheckedPoint"):
        serde_for("msgpack", CheckedPoint).loads(MsgpackSerde().dumps({"x": "one", "y": 2}))
    with pytest.raises(SerdeError, match="does not decode"):
        typed.loads(b"\xc1")  # a byte MessagePack never uses
    plain = serde_for("msgpack")
    assert plain.loads(plain.dumps({"a": [1, 2.5, None]})) == {"a": [1, 2.5, None]}
    with pytest.raises(SerdeError, match="cannot encode"):
        plain.dumps(object())


def test_a_serializer_name_with_a_type_decodes_into_the_type() -> None:
    app = sk.App("typed")
    as_json = app.topic("j", value_type=Point, value_serializer="json")
    as_msgpack = app.topic("m", key_type=int, key_serializer="msgpack", value_type=Point, value_serializer="msgpack")
    assert as_json.value_serde.loads(b'{"x": 1, "y": 2}') == Point(1, 2)
    assert as_msgpack.value_serde.name == "msgpack:Point"
    assert as_msgpack.key_serde.loads(as_msgpack.key_serde.dumps(7)) == 7
    with pytest.raises(SerdeError):
        as_msgpack.key_serde.loads(MsgpackSerde().dumps("seven"))
    # raw and str ignore the type: they carry bytes and text as they are
    assert app.topic("r", value_type=Point, value_serializer="raw").value_serde.loads(b"x") == b"x"


def test_a_second_declaration_may_not_contradict_the_first() -> None:
    app = sk.App("redeclare")
    first = app.topic("t", key_type=str, value_type=Point, value_serializer="msgpack", partitions=2)
    assert app.topic("t") is first
    assert app.topic("t", value_type=Point, value_serializer="msgpack", partitions=2) is first
    with pytest.raises(sk.ConfigError, match="value serializer msgpack:Point vs json:Point"):
        app.topic("t", value_type=Point)  # JSON would read MessagePack records
    with pytest.raises(sk.ConfigError, match="key serializer str vs raw"):
        app.topic("t", key_serializer="raw")
    with pytest.raises(sk.ConfigError, match="partitions 2 vs 3"):
        app.topic("t", partitions=3)
    with pytest.raises(sk.ConfigError, match="config"):
        app.topic("t", compacted=True)
