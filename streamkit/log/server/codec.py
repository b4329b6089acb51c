"""The wire codec: frames, request and response headers, and message bodies via kio.

This is the only module that imports ``kio`` (an import-linter contract holds it). Handlers
see the plain dataclasses of ``messages.py``; this module converts them to and from kio's
generated per-version classes, so swapping kio for hand-written codecs touches this file only.

Framing (Kafka's, big-endian)::

    request  = INT32 size, request header, body
    header   = v1: INT16 api_key, INT16 api_version, INT32 correlation_id,
                   NULLABLE_STRING client_id (INT16 length, even in v2)
               v2 (flexible versions): v1 followed by a tagged-field section
    response = INT32 size, response header, body
    header   = v0: INT32 correlation_id; v1 (flexible versions): v0 + tagged fields

Rules kept here:

* ApiVersions responses always use response header v0, whatever their version (KIP-511);
* an ApiVersions request of a version above ours is answered with a *v0* body carrying
  ``UNSUPPORTED_VERSION`` and our version table, without reading its body (clients decode
  an error reply as v0 and retry with a version we listed);
* every failure to read untrusted bytes surfaces as ``MalformedRequestError``, never as a
  kio exception, including a null where the schema forbids one (kio reads a -1 array
  length as None even for non-nullable arrays; we refuse it here).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import typing
from collections.abc import Callable, Iterable
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as _KioHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as _KioHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from streamkit.log.server.errors import MalformedRequestError
from streamkit.log.server.messages import IMPLEMENTED, MESSAGES

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hhi")
_UTC = datetime.UTC
_MS_TYPES = frozenset({"timedelta_i32", "timedelta_i64", "datetime_i64"})


@dataclasses.dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str = ""  # the peer's address
    size_v1: int = 0  # bytes of the header read as v1 (v2 adds tagged fields after them)
    listener: str = ""  # the name of the listener the request came in on
    principal: str = "User:ANONYMOUS"  # the connection's (``session.Session.principal``)


_read_header_v1 = entity_reader(_KioHeaderV1)
_read_header_v2 = entity_reader(_KioHeaderV2)


def peek_header(
    frame: bytes, client_host: str = "", listener: str = "", principal: str = "User:ANONYMOUS"
) -> RequestHeader:
    """Read the header of a request of any API and version (header v1 is a prefix of v2)."""
    if len(frame) < _KEY_VERSION.size:
        raise MalformedRequestError(f"request of {len(frame)} bytes is shorter than a header")
    try:
        kio_header, size = _read_header_v1(frame, 0)
    except Exception as exc:  # untrusted bytes: any decoding failure is the client's fault
        raise MalformedRequestError(f"unreadable request header: {exc}") from exc
    return RequestHeader(
        kio_header.request_api_key,
        kio_header.request_api_version,
        kio_header.correlation_id,
        kio_header.client_id,
        client_host,
        size,
        listener,
        principal,
    )


def is_implemented(api_key: int, api_version: int) -> bool:
    versions = IMPLEMENTED.get(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


def decode_request(frame: bytes, header: RequestHeader) -> Any:
    """Decode the body of an implemented request into its ``messages`` dataclass."""
    key = (header.api_key, header.api_version)
    plan = _request_plans.get(key)
    if plan is None:
        kio_cls = load_request_schema(*key)
        plan = _request_plans[key] = (
            kio_cls.__flexible__,
            entity_reader(kio_cls),
            _decoder(kio_cls, MESSAGES[header.api_key][0]),
        )
    flexible, read_body, convert = plan
    try:
        header_size = _read_header_v2(frame, 0)[1] if flexible else header.size_v1
        kio_body, _ = read_body(frame, header_size)
    except Exception as exc:  # untrusted bytes: any decoding failure is the client's fault
        raise MalformedRequestError(
            f"unreadable request body (api key {header.api_key} v{header.api_version}): {exc}"
        ) from exc
    return convert(kio_body)


# (api key, version) -> (flexible, kio body reader, kio entity -> messages dataclass)
_request_plans: dict[tuple[int, int], tuple[bool, Callable[..., Any], Callable[[Any], Any]]] = {}
# (api key, version, messages class) -> (flexible header, messages dataclass -> kio entity, writer)
_response_plans: dict[tuple[int, int, type], tuple[bool, Callable[[Any], Any], Callable[..., None]]] = {}


def encode_response(header: RequestHeader, message: object) -> bytes:
    """The whole response frame (size, header, body) for ``message``."""
    key = (header.api_key, header.api_version, type(message))
    plan = _response_plans.get(key)
    if plan is None:
        kio_cls = load_response_schema(header.api_key, header.api_version)
        plan = _response_plans[key] = (
            kio_cls.__flexible__ and header.api_key != API_VERSIONS_KEY,
            _encoder(type(message), kio_cls),
            entity_writer(kio_cls),
        )
    tagged_header, convert, write = plan
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(_SIZE.pack(header.correlation_id))
    if tagged_header:
        buf.write(b"\x00")  # response header v1: no tagged fields
    write(buf, convert(message))
    data = buf.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()


def encode_api_versions_error(
    correlation_id: int, table: Iterable[tuple[int, int, int]]
) -> bytes:
    """ApiVersions v0 body with UNSUPPORTED_VERSION and our table, under header v0."""
    entries = list(table)
    body = bytearray()
    body += struct.pack(">ihi", correlation_id, UNSUPPORTED_VERSION, len(entries))
    for api_key, lo, hi in entries:
        body += struct.pack(">hhh", api_key, lo, hi)
    return _SIZE.pack(len(body)) + bytes(body)


# ---------------------------------------------------------------------------------------------
# Converting between messages.py dataclasses and kio entities. Plans are built once per pair
# of classes: a list of (kio field name, our field name, value converter).

Convert = Callable[[Any], Any]
_decoders: dict[type, Convert] = {}
_encoders: dict[tuple[type, type], Convert] = {}


def _our_name(field: dataclasses.Field[Any]) -> str:
    timed = "kafka_type" in field.metadata and field.metadata["kafka_type"] in _MS_TYPES
    return field.name + "_ms" if timed and not field.name.endswith("_ms") else field.name


def _nested_type(ours: type, name: str) -> type:
    hint = typing.get_type_hints(ours)[name]
    for arg in (hint, *typing.get_args(hint)):
        for inner in (arg, *typing.get_args(arg)):
            if dataclasses.is_dataclass(inner):
                return typing.cast(type, inner)
    raise TypeError(f"{ours.__name__}.{name} is not a nested message")


def _identity(value: Any) -> Any:
    return value


def _ms_from_timedelta(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)


def _ms_from_datetime(value: datetime.datetime | None) -> int:
    return -1 if value is None else round(value.timestamp() * 1000)


def _decoder(kio_cls: type, ours: type) -> Convert:
    cached = _decoders.get(kio_cls)
    if cached is not None:
        return cached
    plan: list[tuple[str, str, Convert]] = []
    for field in dataclasses.fields(kio_cls):
        name = _our_name(field)
        kind = classify_field(field)
        conv: Convert
        if isinstance(kind, EntityTupleField):
            conv = _list_of(_decoder(kind.type_, _nested_type(ours, name)), nullable=is_optional(field))
        elif isinstance(kind, EntityField):
            conv = _optional(_decoder(kind.type_, _nested_type(ours, name)))
        elif isinstance(kind, PrimitiveTupleField):
            conv = _list_of(_identity, nullable=is_optional(field))
        else:
            kafka_type = get_schema_field_type(field)
            if kafka_type in ("timedelta_i32", "timedelta_i64"):
                conv = _ms_from_timedelta
            elif kafka_type == "datetime_i64":
                conv = _ms_from_datetime
            elif kafka_type == "error_code":
                conv = int
            else:
                conv = _identity
        plan.append((field.name, name, conv))

    def decode(entity: Any) -> Any:
        return ours(**{name: conv(getattr(entity, kio_name)) for kio_name, name, conv in plan})

    _decoders[kio_cls] = decode
    return decode


def _list_of(conv: Convert, *, nullable: bool) -> Convert:
    def convert(values: Any) -> Any:
        if values is None:
            if nullable:
                return None
            # kio reads a -1 length as None even where the schema forbids null.
            raise MalformedRequestError("a non-nullable array is null")
        return [conv(v) for v in values]

    return convert


def _tuple_of(conv: Convert) -> Convert:
    def convert(values: Any) -> Any:
        return None if values is None else tuple(conv(v) for v in values)

    return convert


def _optional(conv: Convert) -> Convert:
    def convert(value: Any) -> Any:
        return None if value is None else conv(value)

    return convert


def _timedelta_from_ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _datetime_from_ms(value: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)


def _nullable_datetime_from_ms(value: int) -> datetime.datetime | None:
    return None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)


def _encoder(ours: type, kio_cls: type) -> Convert:
    key = (ours, kio_cls)
    cached = _encoders.get(key)
    if cached is not None:
        return cached
    plan: list[tuple[str, str, Convert]] = []
    for field in dataclasses.fields(kio_cls):
        name = _our_name(field)
        kind = classify_field(field)
        conv: Convert
        if isinstance(kind, EntityTupleField):
            conv = _tuple_of(_encoder(_nested_type(ours, name), kind.type_))
        elif isinstance(kind, EntityField):
            conv = _optional(_encoder(_nested_type(ours, name), kind.type_))
        elif isinstance(kind, PrimitiveTupleField):
            conv = _tuple_of(_identity)
        else:
            kafka_type = get_schema_field_type(field)
            if kafka_type in ("timedelta_i32", "timedelta_i64"):
                conv = _timedelta_from_ms
            elif kafka_type == "datetime_i64":
                conv = _nullable_datetime_from_ms if is_optional(field) else _datetime_from_ms
            elif kafka_type == "error_code":
                conv = ErrorCode
            else:
                conv = _identity
        plan.append((field.name, name, conv))

    def encode(message: Any) -> Any:
        return kio_cls(**{kio_name: conv(getattr(message, name)) for kio_name, name, conv in plan})

    _encoders[key] = encode
    return encode
