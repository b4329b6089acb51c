from __future__ import annotations

import pytest

import streamkit as sk
from streamkit._core.serde import JsonSerde, RawSerde, SerdeError, StrSerde, serde_for


class Point(sk.Record):
    x: int
    y: int


def test_serde_for_picks_by_type_name_or_instance() -> None:
    assert isinstance(serde_for(None), RawSerde)
    assert isinstance(serde_for(bytes), RawSerde)
    assert isinstance(serde_for(str), StrSerde)
    assert serde_for("json").name == "json"
    assert serde_for(Point).name == "msgspec:Point"
    custom = StrSerde()
    assert serde_for(custom) is custom
    with pytest.raises(SerdeError, match="unknown serializer"):
        serde_for("yaml")


@pytest.mark.parametrize("serde", [RawSerde(), StrSerde(), JsonSerde(), JsonSerde(Point)])
def test_none_passes_through_both_ways(serde: sk.Serde) -> None:
    assert serde.dumps(None) is None
    assert serde.loads(None) is None


def test_typed_json_round_trip_and_validation() -> None:
    serde = serde_for(Point)
    assert serde.loads(serde.dumps(Point(1, 2))) == Point(1, 2)
    with pytest.raises(SerdeError, match="does not decode as msgspec:Point"):
        serde.loads(b'{"x": "one", "y": 2}')
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
        from streamkit.streams import _key_function

        _key_function(lambda v: v, None)
