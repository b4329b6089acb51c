"""Serializers: how keys and values become bytes and back.

A ``Serde`` turns Python values into ``bytes`` (``dumps``) and back (``loads``); ``None``
passes through both ways untouched (null keys, tombstones). Codecs:

* ``raw``: bytes in, bytes out;
* ``str``: UTF-8 text both ways;
* ``json``: any JSON value (msgspec's JSON codec); given a type (a ``Record`` subclass or
  any type msgspec knows), JSON on the wire decoded into that type (records by the rules of
  ``streamkit._core.record``: a field off its annotation is kept, as Faust keeps it, unless
  the class says ``coerce`` or ``validation``). Untyped JSON naming a record class in Faust's
  ``"__faust"`` metadata decodes as that record;
* ``json`` for ``str`` values (``JsonStrSerde``): what Faust writes and reads for a ``str``
  value under its default ``value_serializer="json"``: a JSON string (``"hello"`` with the
  quotes). Reading also takes plain UTF-8 text (kcat, a console producer): data that is not
  one whole JSON string is read as text;
* ``msgpack``: MessagePack, typed or untyped as ``json``.

``serde_for(name, type_, default=...)`` picks one the way Faust's serializer registry does:
the topic's serializer name, else the record class's ``serializer`` option, else the app's
default (``key_serializer="raw"``, ``value_serializer="json"``), then typed by ``type_``:
``str`` with ``raw`` is UTF-8 text (Faust's ``want_str``), ``str`` with ``json`` is a JSON
string, ``bytes`` is raw. A ``Serde`` instance is used as is. (Called with a type in the
first place, ``serde_for(Order)``, it means that type with the defaults.)
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import msgspec

from streamkit._core.errors import StreamkitError
from streamkit._core.record import (
    METADATA_KEY,
    Record,
    RecordError,
    install_serde,
    reconstruct,
    reconstruct_all,
    tagged,
)


class SerdeError(StreamkitError, ValueError):
    """A value could not be serialized or deserialized."""


@runtime_checkable
class Serde(Protocol):
    name: str

    def dumps(self, value: Any) -> bytes | None: ...

    def loads(self, data: bytes | None) -> Any: ...


class RawSerde:
    name = "raw"

    def dumps(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, bytes):
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, str):
            return value.encode()
        raise SerdeError(f"raw serde needs bytes, got {type(value).__name__}")

    def loads(self, data: bytes | None) -> Any:
        return data


class StrSerde:
    name = "str"

    def dumps(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, bytes):
            return value
        return str(value).encode()

    def loads(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise SerdeError(f"value is not UTF-8: {exc}") from exc


class _MsgspecSerde:
    """A msgspec wire format; with ``type_`` (a ``Record`` subclass, int, ...) decoded into
    that type, else into plain values (and records named by Faust's metadata)."""

    format: str
    _module: Any  # msgspec.json or msgspec.msgpack: the same Encoder/Decoder API

    def __init__(self, type_: Any = Any) -> None:
        self.type = type_
        self.name = self.format if type_ is Any else f"{self.format}:{getattr(type_, '__name__', type_)}"
        record = type_ if isinstance(type_, type) and issubclass(type_, Record) else None
        self._record = record
        self._untyped = type_ is Any
        self._encoder = self._module.Encoder()
        # The fast path: msgspec decodes and checks in one pass; a record that fails it gets
        # Faust's field-by-field rules (Record.from_data) over the plain decoded data.
        self._decoder = self._module.Decoder(type_, strict=not (record is not None and record._options.coerce))
        self._plain = self._module.Decoder()
        # Records of a class without include_metadata are encoded as they are, unchecked (the
        # hot path); others are checked per value for a class that wants Faust's metadata.
        self._check_metadata = self._untyped or (
            record is not None and (record._options.include_metadata or bool(record.__subclasses__()))
        )

    def dumps(self, value: Any) -> bytes | None:
        if value is None:
            return None
        try:
            if self._check_metadata and isinstance(value, Record) and value._options.include_metadata:
                return self._encoder.encode(value.to_representation())  # type: ignore[no-any-return]
            return self._encoder.encode(value)  # type: ignore[no-any-return]
        except (TypeError, msgspec.EncodeError) as exc:
            raise SerdeError(f"cannot encode {type(value).__name__} as {self.name}: {exc}") from exc

    def loads(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            value = self._decoder.decode(data)
        except msgspec.ValidationError as exc:
            if self._record is None:
                raise SerdeError(f"does not decode as {self.name}: {exc}") from exc
            try:
                return self._record.from_data(self._plain.decode(data))
            except (RecordError, msgspec.DecodeError) as error:
                raise SerdeError(f"does not decode as {self.name}: {error}") from error
        except msgspec.DecodeError as exc:
            raise SerdeError(f"does not decode as {self.name}: {exc}") from exc
        if self._untyped and type(value) is dict and METADATA_KEY in value:
            try:
                return reconstruct(value)
            except RecordError as error:
                raise SerdeError(f"does not decode as {self.name}: {error}") from error
        return value


class JsonSerde(_MsgspecSerde):
    """JSON on the wire."""

    format = "json"
    _module = msgspec.json


class MsgpackSerde(_MsgspecSerde):
    """MessagePack on the wire: smaller and faster than JSON."""

    format = "msgpack"
    _module = msgspec.msgpack


class StateSerde:
    """Untyped JSON or MessagePack for state (a table without ``value_type``): a record, also
    inside a list or dict, is written with Faust's metadata and read back as that record, so a
    table's value is the same object type live, after its cache evicts it and after a restart
    (Faust keeps such values as Python objects in its memory store)."""

    def __init__(self, plain: _MsgspecSerde) -> None:
        self._plain = plain
        self.name = plain.name
        self._encoder = plain._encoder
        self._decode = plain._plain.decode

    def dumps(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, (Record, list, tuple, set, frozenset, dict)):
            try:
                return self._encoder.encode(tagged(value))  # type: ignore[no-any-return]
            except (TypeError, msgspec.EncodeError) as exc:
                raise SerdeError(f"cannot encode {type(value).__name__} as {self.name}: {exc}") from exc
        return self._plain.dumps(value)

    def loads(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            value = self._decode(data)
        except msgspec.DecodeError as exc:
            raise SerdeError(f"does not decode as {self.name}: {exc}") from exc
        if type(value) is dict or type(value) is list:
            try:
                return reconstruct_all(value)
            except RecordError as error:
                raise SerdeError(f"does not decode as {self.name}: {error}") from error
        return value


def state_serde(serde: Serde) -> Serde:
    """``serde``, made to keep records as records (``StateSerde``) when it is untyped JSON or
    MessagePack; any other serde unchanged."""
    if isinstance(serde, _MsgspecSerde) and serde._untyped:
        return StateSerde(serde)
    return serde


class JsonStrSerde:
    """``str`` values as Faust's default JSON serializer writes them: a JSON string; reads
    plain UTF-8 text too (see the module docstring)."""

    name = "json:str"

    def __init__(self) -> None:
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(str)

    def dumps(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)  # already on-the-wire bytes, as the raw and str serdes take them
        return self._encoder.encode(value if isinstance(value, str) else str(value))

    def loads(self, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) >= 2 and data[:1] == b'"' and data[-1:] == b'"':
            try:
                return self._decoder.decode(data)
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass  # quoted text that is not one JSON string: text, as from kcat
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise SerdeError(f"value is not UTF-8: {exc}") from exc


_NAMED: dict[str, Serde] = {
    "raw": RawSerde(),
    "str": StrSerde(),
    "json": JsonSerde(),
    "msgpack": MsgpackSerde(),
}
# Formats that decode into a declared type (``value_type=Order, value_serializer="msgpack"``).
_TYPED: dict[str, Any] = {"json": JsonSerde, "msgpack": MsgpackSerde}


def serde_for(spec: Any, type_: Any = None, *, default: str | Serde | None = None) -> Serde:
    """The serde for a serializer name (or ``Serde``) ``spec`` and a declared type ``type_``;
    ``spec=None`` means the record class's ``serializer`` option, else ``default``."""
    if spec is not None and not isinstance(spec, str):
        if isinstance(spec, Serde):
            return spec
        if not (isinstance(spec, type) or hasattr(spec, "__origin__")):
            raise SerdeError(f"cannot build a serializer from {spec!r}")
        type_, spec = spec, None  # serde_for(Order): a type, the defaults
    if spec is None and isinstance(type_, type) and issubclass(type_, Record):
        spec = type_._options.serializer
    explicit = spec is not None
    name = spec if explicit else default
    if name is not None and not isinstance(name, str):
        return name  # a Serde as the record's serializer option or the app's default
    if name is not None and name not in _NAMED:
        raise SerdeError(f"unknown serializer {name!r}: use raw, str, json, msgpack or a Serde")
    if type_ is None:
        return _NAMED[name or "raw"]
    if type_ is bytes:
        return _NAMED[name] if name is not None and explicit else _NAMED["raw"]  # bytes stay bytes unless asked
    if type_ is str:
        if name == "json":
            return _JSON_STR
        if name == "msgpack":
            return MsgpackSerde(str)
        return _NAMED["str"]  # raw (Faust decodes it with want_str) or str: UTF-8 text
    if name in _TYPED:
        return _TYPED[name](type_)  # type: ignore[no-any-return]
    if name == "str" or (explicit and name == "raw"):
        return _NAMED[str(name)]
    return JsonSerde(type_)  # the raw default for a typed key: JSON of that type, as before


_JSON_STR = JsonStrSerde()
install_serde(serde_for)  # Record.dumps and Record.loads (Faust's model API) use it
