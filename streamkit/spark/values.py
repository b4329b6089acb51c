"""Typed value columns: record values decoded with a declared topic's serializer.

Two options pick the decoder (plain code over the app's declarations, Arrow for the column):

* ``valueApp`` = ``module:app`` (as ``-A`` on the command line): the topic the source reads
  must be declared by that app; its value serializer and ``value_type`` decode the values;
* ``valueType`` = ``module:Type``: a ``Record`` subclass (or another type msgspec knows),
  JSON on the wire, as a topic declared with ``value_type=Type`` has it.

The ``value`` column is then the decoded value: a struct of the record's fields (Arrow
types from the field annotations: str, int, float, bool, bytes, datetime, lists, nested
records, optional fields), or a scalar for a scalar type. A null value (a tombstone) is a null
struct. A value that does not decode is an error naming the topic's serializer, never a
silently dropped row.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import msgspec
import pyarrow as pa

from streamkit._core.errors import ConfigError
from streamkit._core.refs import import_ref
from streamkit._core.serde import Serde, SerdeError, serde_for


@dataclass(frozen=True)
class ValueDecoder:
    serde: Serde
    arrow_type: pa.DataType

    def column(self, values: list[bytes | None]) -> pa.Array:
        decoded: list[Any] = []
        for data in values:
            try:
                value = self.serde.loads(data)
            except SerdeError as exc:
                raise ConfigError(f"a value {exc}") from exc
            decoded.append(
                None if value is None else msgspec.to_builtins(value, builtin_types=(bytes, datetime.datetime))
            )
        return pa.array(decoded, self.arrow_type)


def _load(ref: str, option: str) -> Any:
    try:
        return import_ref(ref)
    except ConfigError as exc:
        raise ConfigError(f"option {option}: {exc}") from exc

def value_decoder(app_ref: str | None, type_ref: str | None, topic: str) -> ValueDecoder | None:
    """The decoder the options name, or None (values stay bytes)."""
    if app_ref:
        from streamkit.app.application import App

        app = _load(app_ref, "valueApp")
        if not isinstance(app, App):
            raise ConfigError(f"option valueApp: {app_ref!r} is {type(app).__name__}, not a streamkit App")
        declared = app.topics.get(topic)
        if declared is None:
            raise ConfigError(f"option valueApp: the app {app.id!r} declares no topic {topic!r}")
        if declared.value_type is None:
            raise ConfigError(f"option valueApp: topic {topic!r} declares no value_type to decode into")
        return ValueDecoder(declared.value_serde, arrow_type_of(declared.value_type))
    if type_ref:
        value_type = _load(type_ref, "valueType")
        return ValueDecoder(serde_for(value_type, value_type), arrow_type_of(value_type))
    return None


def arrow_type_of(type_: Any) -> pa.DataType:
    """The Arrow type of values of ``type_`` (a Record subclass or a type msgspec knows)."""
    try:
        info = msgspec.inspect.type_info(type_)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"cannot make a column of {type_!r}: {exc}") from exc
    return _arrow(info, type_)


def _arrow(info: Any, origin: Any) -> pa.DataType:
    mi = msgspec.inspect
    if isinstance(info, mi.UnionType):
        rest = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if len(rest) == 1:
            return _arrow(rest[0], origin)
    simple: list[tuple[type, pa.DataType]] = [
        (mi.StrType, pa.string()),
        (mi.BoolType, pa.bool_()),
        (mi.IntType, pa.int64()),
        (mi.FloatType, pa.float64()),
        (mi.BytesType, pa.binary()),
        (mi.DateTimeType, pa.timestamp("us", tz="UTC")),
    ]
    for kind, arrow_type in simple:
        if isinstance(info, kind):
            return arrow_type
    if isinstance(info, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return pa.list_(_arrow(info.item_type, origin))
    if isinstance(info, mi.StructType):
        return pa.struct([pa.field(f.encode_name, _arrow(f.type, origin)) for f in info.fields])
    raise ConfigError(f"cannot make a Spark column of {origin!r}: {type(info).__name__} has no column type")
