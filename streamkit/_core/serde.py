"""Serializers: how keys and values become bytes and back.

A ``Serde`` turns Python values into ``bytes`` (``dumps``) and back (``loads``); ``None``
passes through both ways untouched (null keys, tombstones). Codecs:

* ``raw``: bytes in, bytes out;
* ``str``: UTF-8 text;
* ``json``: any JSON value (msgspec's JSON codec); given a type (a ``Record`` subclass or
  any type msgspec knows), JSON on the wire decoded and validated into that type.

``serde_for(type_or_name)`` picks one: a ``Serde`` instance is used as is, a name
(``"raw"``, ``"str"``, ``"json"``) picks that codec, ``bytes``/``str``/``int``/``float`` and
``Record`` subclasses get a typed codec, and ``None`` means raw bytes.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import msgspec

from streamkit._core.errors import StreamkitError


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
    """A msgspec wire format; with ``type_`` (a ``Record`` subclass, int, ...) decoded and
    validated into that type, else into plain values."""

    format: str
    _module: Any  # msgspec.json or msgspec.msgpack: the same Encoder/Decoder API

    def __init__(self, type_: Any = Any) -> None:
        self.type = type_
        self.name = self.format if type_ is Any else f"{self.format}:{getattr(type_, '__name__', type_)}"
        self._encoder = self._module.Encoder()
        self._decoder = self._module.Decoder(type_)

    def dumps(self, value: Any) -> bytes | None:
        if value is None:
            return None
        try:
            return self._encoder.encode(value)  # type: ignore[no-any-return]
        except (TypeError, msgspec.EncodeError) as exc:
            raise SerdeError(f"cannot encode {type(value).__name__} as {self.name}: {exc}") from exc

    def loads(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return self._decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise SerdeError(f"does not decode as {self.name}: {exc}") from exc


class JsonSerde(_MsgspecSerde):
    """JSON on the wire."""

    format = "json"
    _module = msgspec.json


class MsgpackSerde(_MsgspecSerde):
    """MessagePack on the wire: smaller and faster than JSON."""

    format = "msgpack"
    _module = msgspec.msgpack


_NAMED: dict[str, Serde] = {
    "raw": RawSerde(),
    "str": StrSerde(),
    "json": JsonSerde(),
    "msgpack": MsgpackSerde(),
}
# Formats that decode into a declared type (``value_type=Order, value_serializer="msgpack"``).
_TYPED: dict[str, Any] = {"json": JsonSerde, "msgpack": MsgpackSerde}


def serde_for(spec: Any, type_: Any = None) -> Serde:
    """The serde for a type, a codec name (typed by ``type_`` for json and msgpack), or a
    ``Serde``."""
    if isinstance(spec, str) and type_ is not None and type_ not in (bytes, str):
        typed = _TYPED.get(spec)
        if typed is not None:
            return typed(type_)  # type: ignore[no-any-return]
    if spec is None or spec is bytes:
        return _NAMED["raw"]
    if spec is str:
        return _NAMED["str"]
    if isinstance(spec, str):
        try:
            return _NAMED[spec]
        except KeyError:
            raise SerdeError(f"unknown serializer {spec!r}: use raw, str, json, msgpack or a type") from None
    if isinstance(spec, Serde):
        return spec
    if isinstance(spec, type) or hasattr(spec, "__origin__"):
        return JsonSerde(spec)
    raise SerdeError(f"cannot build a serializer from {spec!r}")
