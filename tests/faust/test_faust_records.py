"""Records in Faust's spelling: class options, Faust's decoding rules, the ``__faust`` metadata.

Each test is written as a Faust user writes it (``import streamkit as faust``), so a Faust
app's model module reads unchanged.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

import streamkit as faust
from streamkit._core.record import registry
from streamkit._core.serde import serde_for
from streamkit.testing import AppDriver


class Point(faust.Record):
    x: int
    y: int = 0


class Coerced(faust.Record, coerce=True):
    count: int
    name: str
    ratio: float = 1.0


class Validated(faust.Record, validation=True):
    count: int
    name: str


class Tagged(faust.Record, include_metadata=True, namespace="shop.Tagged", serializer="json", isodates=True):
    amount: float
    at: datetime


class Line(faust.Record):
    sku: str
    qty: int


class Order(faust.Record, namespace="shop.Order"):
    order_id: str
    lines: list[Line]
    total: Decimal = Decimal(0)


def test_class_options_are_read_and_inherited() -> None:
    assert Tagged._options.include_metadata is True
    assert Tagged._options.namespace == "shop.Tagged"
    assert Tagged._options.serializer == "json"
    assert Tagged._options.isodates is True
    assert Point._options.namespace == f"{__name__}.Point"  # Faust's default: module.qualname
    assert Point._options.include_metadata is False  # streamkit's default (Faust's is True)

    class Child(Coerced):
        extra: str = ""

    assert Child._options.coerce is True  # inherited, as Faust's options are
    assert Child._options.namespace == f"{__name__}.{Child.__qualname__}"  # not inherited
    assert registry["shop.Tagged"] is Tagged


def test_an_unknown_class_option_is_a_clear_error() -> None:
    with pytest.raises(faust.ConfigError, match=r"'polymorphic' is an invalid keyword.*class options here are serializer"):

        class Bad(faust.Record, polymorphic=True):  # type: ignore[call-arg]
            x: int

    with pytest.raises(faust.ConfigError, match="coerce must be True or False"):

        class Bad2(faust.Record, coerce="yes"):
            x: int


def test_a_value_off_its_annotation_passes_through_as_in_faust() -> None:
    serde = serde_for(Point)
    assert serde.loads(b'{"x": "7", "y": 1.5}') == Point("7", 1.5)  # type: ignore[arg-type]
    assert serde.loads(b'{"x": 1, "y": null}') == Point(1, 0)  # an optional null takes its default
    with pytest.raises(faust.SerdeError, match="missing required field 'x'"):
        serde.loads(b'{"y": 2}')


def test_coerce_converts_or_rejects() -> None:
    serde = serde_for(Coerced)
    assert serde.loads(b'{"count": "5", "name": 42, "ratio": "0.5"}') == Coerced(5, "42", 0.5)
    with pytest.raises(faust.SerdeError, match="field 'count' cannot be coerced to int"):
        serde.loads(b'{"count": "five", "name": "n"}')
    assert Coerced.from_data({"count": 3.0, "name": "n"}) == Coerced(3, "n")


def test_validation_rejects_what_cannot_be_converted_and_keeps_what_can() -> None:
    serde = serde_for(Validated)
    # Faust's validation checks the value could be converted; it does not convert it
    assert serde.loads(b'{"count": "5", "name": 1}') == Validated("5", 1)  # type: ignore[arg-type]
    with pytest.raises(faust.SerdeError, match="field 'count' is not int"):
        serde.loads(b'{"count": "five", "name": "n"}')


def test_nested_records_and_lists_decode_with_the_same_rules() -> None:
    serde = serde_for(Order)
    data = b'{"order_id": "o1", "lines": [{"sku": "a", "qty": 2}], "total": "9.50"}'
    assert serde.loads(data) == Order("o1", [Line("a", 2)], Decimal("9.50"))
    # a bad nested value does not lose the record: the nested record keeps it, as Faust's
    odd = serde.loads(b'{"order_id": "o2", "lines": [{"sku": "a", "qty": "two"}, 3]}')
    assert odd == Order("o2", [Line("a", "two"), 3])  # type: ignore[arg-type,list-item]


def test_faust_metadata_is_read_and_written() -> None:
    at = datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=UTC)
    wire = Tagged(9.5, at).dumps()
    assert json.loads(wire) == {"amount": 9.5, "at": "2024-05-01T12:30:00.123456Z", "__faust": {"ns": "shop.Tagged"}}
    assert Tagged.loads(wire) == Tagged(9.5, at)
    # What a Faust app writes for a Point (include_metadata is on by default in Faust):
    faust_wire = b'{"x": 1, "y": 2, "__faust": {"ns": "examples.Point"}}'
    assert serde_for(Point).loads(faust_wire) == Point(1, 2)
    # Untyped JSON naming a known class becomes that class, as Faust's value_type=None does
    untyped = serde_for("json")
    assert untyped.loads(wire) == Tagged(9.5, at)
    assert untyped.loads(b'{"a": 1, "__faust": {"ns": "nowhere.Unknown"}}') == {
        "a": 1, "__faust": {"ns": "nowhere.Unknown"}
    }


def test_faust_datetime_text_reads_as_datetime() -> None:
    # Faust's JSON encoder writes naive datetimes without an offset and UTC ones with "Z"
    got = serde_for(Tagged).loads(b'{"amount": 1, "at": "2024-05-01T12:30:00.500000"}')
    assert got.at == datetime(2024, 5, 1, 12, 30, 0, 500000)


def test_asdict_to_representation_and_serializer_option() -> None:
    order = Order("o1", [Line("a", 2)])
    assert order.asdict() == {"order_id": "o1", "lines": [Line("a", 2)], "total": Decimal(0)}
    assert order.to_representation() == {"order_id": "o1", "lines": [{"sku": "a", "qty": 2}], "total": Decimal(0)}

    class Packed(faust.Record, serializer="msgpack"):
        x: int

    app = faust.App("records-opts")
    topic = app.topic("packed", value_type=Packed)
    assert topic.value_serde.name == "msgpack:Packed"  # the class's serializer, as Faust
    assert app.topic("packed-json", value_type=Packed, value_serializer="json").value_serde.name == "json:Packed"
    assert Packed.loads(Packed(3).dumps()) == Packed(3)


async def test_a_record_faust_would_accept_reaches_the_agent_not_the_dead_letter_topic() -> None:
    app = faust.App("records-agent")
    points = app.topic("points", value_type=Point)
    seen: list[Point] = []

    @app.agent(points)
    async def collect(stream: faust.Stream) -> None:
        async for point in stream:
            seen.append(point)

    raw = faust.Topic(app, "points", value_serializer="raw")
    async with AppDriver(app) as driver:
        await (await raw.send(value=b'{"x": "3", "y": 4, "__faust": {"ns": "x.Point"}}'))
        await (await raw.send(value=b'{"y": 4}'))  # no x: Faust rejects it too
        await driver.process()
        dead = await driver.dead_letters()
    assert seen == [Point("3", 4)]  # type: ignore[arg-type]
    assert [d.value for d in dead] == [b'{"y": 4}']
