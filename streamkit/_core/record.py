"""``Record``: the base class of typed message values, serialized with msgspec.

    >>> class Order(Record):
    ...     order_id: str
    ...     amount: float
    >>> Order(order_id="o-1", amount=9.5)
    Order(order_id='o-1', amount=9.5)

A field of a record class (``Order.amount``) is a descriptor that reads the field from an
instance; ``Stream.group_by(Order.user)`` uses that to key records by a field.

This module owns how data becomes a record, with Faust's class options
(``class Order(Record, serializer="json", coerce=True, ...)``, kept in ``Order._options``):

* a value that matches its field's annotation is converted as msgspec does (nested records,
  ``datetime`` from ISO 8601 text, ``Decimal`` and ``UUID`` from text);
* a value that does not is kept as it came, as Faust keeps it, unless ``coerce=True``
  (converted to the annotation, or the record is rejected) or ``validation=True`` (the
  record is rejected unless the value could be converted; the value itself is kept, as in
  Faust); a ``str`` field accepts any value under both, as Faust's ``str()`` does;
* a missing field without a default rejects the record; an optional field that came as
  ``null`` takes its default, as in Faust;
* Faust's metadata, the key ``"__faust": {"ns": "<namespace>"}``, is ignored when the
  record's type is known, names the class for untyped data (``reconstruct``), and is written
  by ``to_representation`` (so by the serializers) when ``include_metadata=True``; untyped
  state (a table without ``value_type``) always writes it, nested records included
  (``tagged``), so a record stored there reads back as that record (``reconstruct_all``).

The rejection is a ``RecordError``; the serializers turn it into a ``SerdeError``, which
sends the message to the dead-letter topic.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

import msgspec

from streamkit._core.errors import ConfigError, StreamkitError

#: The key under which Faust writes a record's metadata (its "blessed key").
METADATA_KEY = "__faust"

#: Faust's class options streamkit honours; anything else a record class states is msgspec's.
OPTION_NAMES = ("serializer", "namespace", "include_metadata", "isodates", "coerce", "validation")


class RecordError(StreamkitError, ValueError):
    """Data does not make a record of the class asked for."""


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """A record class's Faust options (``Order._options``).

    ``isodates`` is accepted for Faust's spelling and has no switch here: ISO 8601 text in a
    ``datetime`` field is always parsed (Faust parses it only with ``isodates=True``).
    """

    namespace: str
    serializer: Any = None
    include_metadata: bool = False
    isodates: bool = False
    coerce: bool = False
    validation: bool = False


#: Record classes by namespace: how untyped data naming a class becomes that class.
registry: dict[str, type[Record]] = {}


class RecordMeta(msgspec.StructMeta):
    """Takes Faust's class options off the class statement; the rest goes to msgspec."""

    def __new__(mcls, name: str, bases: tuple[type, ...], attrs: dict[str, Any], **kwargs: Any) -> Any:
        options = {key: kwargs.pop(key) for key in OPTION_NAMES if key in kwargs}
        try:
            cls: Any = super().__new__(mcls, name, bases, attrs, **kwargs)
        except TypeError as exc:
            raise ConfigError(
                f"record class {name!r}: {exc}; Faust's class options here are {', '.join(OPTION_NAMES)}"
            ) from exc
        inherited: RecordOptions | None = getattr(cls, "_options", None)
        namespace = options.pop("namespace", None) or f"{cls.__module__}.{cls.__qualname__}"
        if not isinstance(namespace, str):
            raise ConfigError(f"record class {name!r}: namespace must be a str, not {namespace!r}")
        for flag in ("include_metadata", "isodates", "coerce", "validation"):
            if flag in options and not isinstance(options[flag], bool):
                raise ConfigError(f"record class {name!r}: {flag} must be True or False, not {options[flag]!r}")
        if inherited is None:
            cls._options = RecordOptions(namespace=namespace, **options)
        else:
            cls._options = replace(inherited, namespace=namespace, **options)
        cls._field_table = None
        if inherited is not None:  # the base class itself is never data
            registry[namespace] = cls
        return cls


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    type: Any
    required: bool
    text: bool  # the annotation is str (or Optional[str]): anything passes Faust's str()


class Record(msgspec.Struct, metaclass=RecordMeta):
    """Base class of typed records: declare fields as class annotations.

    Faust's class options go on the class statement::

        class Order(Record, include_metadata=True, coerce=True):
            amount: float
    """

    _options: ClassVar[RecordOptions]
    _field_table: ClassVar[tuple[_Field, ...] | None]

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | Self) -> Self:
        """A record from a mapping of field values (Faust's ``Model.from_data``), following
        the class options (see the module docstring); ``RecordError`` if it cannot be one."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            raise RecordError(f"{cls.__name__} needs an object of fields, got {type(data).__name__}")
        options = cls._options
        try:
            return msgspec.convert(data, cls, strict=not options.coerce)
        except msgspec.ValidationError:
            pass  # a value off its annotation: Faust's rules, field by field
        values: dict[str, Any] = {}
        problems: list[str] = []
        for field in cls._fields():
            if field.name not in data or (data[field.name] is None and not field.required):
                if field.required:
                    problems.append(f"missing required field {field.name!r}")
                continue
            values[field.name] = _field_value(cls, field, data[field.name], problems)
        if problems:
            raise RecordError(f"{cls.__name__}: " + "; ".join(problems))
        return cls(**values)

    @classmethod
    def _fields(cls) -> tuple[_Field, ...]:
        table = cls._field_table
        if table is None:  # resolved on first use: annotations may name classes declared later
            table = tuple(
                _Field(f.name, f.type, f.required, _is_text(f.type))
                for f in msgspec.structs.fields(cls)
            )
            cls._field_table = table
        return table

    def asdict(self) -> dict[str, Any]:
        """The fields as a dict (nested records stay records), as Faust's ``asdict``."""
        return {name: getattr(self, name) for name in self.__struct_fields__}

    def to_representation(self) -> dict[str, Any]:
        """The fields as plain data (nested records as dicts), with Faust's metadata key when
        the class has ``include_metadata=True``: what the serializers write."""
        payload = {name: _represent(getattr(self, name)) for name in self.__struct_fields__}
        if self._options.include_metadata:
            payload[METADATA_KEY] = {"ns": self._options.namespace}
        return payload

    def dumps(self, *, serializer: Any = None) -> bytes:
        """Serialize with ``serializer``, else the class's ``serializer`` option, else JSON."""
        data: bytes | None = _serde_for()(serializer or self._options.serializer or "json", type(self)).dumps(self)
        assert data is not None  # a record is never None
        return data

    @classmethod
    def loads(cls, data: bytes, *, serializer: Any = None) -> Self:
        """Deserialize with ``serializer``, else the class's ``serializer`` option, else JSON."""
        value: Self = _serde_for()(serializer or cls._options.serializer or "json", cls).loads(data)
        return value


# ``serde.serde_for``: serde builds on this module, and installs it here when imported (with
# ``sk.Record``, ``sk.Serde`` and every part of streamkit that reads or writes records).
_serde_factory: Callable[..., Any] | None = None


def install_serde(factory: Callable[..., Any]) -> None:
    global _serde_factory
    _serde_factory = factory


def _serde_for() -> Callable[..., Any]:
    if _serde_factory is None:
        raise RecordError("records serialize through streamkit's serializers: import streamkit first")
    return _serde_factory


def reconstruct(value: Any) -> Any:
    """Untyped data naming a known record class in Faust's metadata, as that record (as
    Faust's ``Model._maybe_reconstruct``); anything else unchanged. An unknown namespace
    leaves the data a dict (Faust raises)."""
    if type(value) is dict:
        meta = value.get(METADATA_KEY)
        if type(meta) is dict:
            cls = registry.get(meta.get("ns"))  # type: ignore[arg-type]
            if cls is not None:
                return cls.from_data(value)
    return value


def _field_value(cls: type[Record], field: _Field, value: Any, problems: list[str]) -> Any:
    options = cls._options
    if options.coerce:
        if field.text and not isinstance(value, str):
            return str(value)
        try:
            return msgspec.convert(value, field.type, strict=False)
        except msgspec.ValidationError as exc:
            problems.append(f"field {field.name!r} cannot be coerced to {_type_name(field.type)}: {exc}")
            return value
    try:
        return msgspec.convert(value, field.type)
    except msgspec.ValidationError:
        pass
    if options.validation and not field.text:
        try:
            msgspec.convert(value, field.type, strict=False)
        except msgspec.ValidationError as exc:
            problems.append(f"field {field.name!r} is not {_type_name(field.type)}: {exc}")
            return value
    try:
        return _nested(field.type, value)
    except RecordError as exc:
        problems.append(f"field {field.name!r}: {exc}")
    return value


def _nested(tp: Any, value: Any) -> Any:
    """Records inside a value off its annotation, built by their own rules (Faust builds
    related models, also in lists and dicts, when they are read)."""
    record = _record_class(tp)
    if record is not None:
        return record.from_data(value) if isinstance(value, Mapping) else value
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, tuple, set, frozenset) and args and isinstance(value, list):
        return [_nested(args[0], v) for v in value]
    if origin is dict and len(args) == 2 and isinstance(value, dict):
        return {k: _nested(args[1], v) for k, v in value.items()}
    return value


def tagged(value: Any) -> Any:
    """Plain data for ``value`` with every record in it (nested in lists and dicts too) named
    by Faust's metadata, whatever its class's ``include_metadata``: what untyped state writes,
    so that ``reconstruct_all`` gives the same records back."""
    if isinstance(value, Record):
        payload = {name: tagged(getattr(value, name)) for name in value.__struct_fields__}
        payload[METADATA_KEY] = {"ns": value._options.namespace}
        return payload
    if isinstance(value, (list, tuple, set, frozenset)):
        return [tagged(v) for v in value]
    if isinstance(value, dict):
        return {k: tagged(v) for k, v in value.items()}
    return value


def reconstruct_all(value: Any) -> Any:
    """``reconstruct`` through lists and dicts: the records ``tagged`` wrote, as records."""
    if type(value) is list:
        return [reconstruct_all(v) for v in value]
    if type(value) is dict:
        if METADATA_KEY in value:
            return reconstruct(value)
        return {k: reconstruct_all(v) for k, v in value.items()}
    return value


def _represent(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_representation()
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_represent(v) for v in value]
    if isinstance(value, dict):
        return {k: _represent(v) for k, v in value.items()}
    return value


def _optional_inner(tp: Any) -> Any:
    """``X`` for ``X | None`` / ``Optional[X]``, else ``tp``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _record_class(tp: Any) -> type[Record] | None:
    inner = _optional_inner(tp)
    return inner if isinstance(inner, type) and issubclass(inner, Record) else None


def _is_text(tp: Any) -> bool:
    return _optional_inner(tp) is str


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp)
