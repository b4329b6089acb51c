"""Hand-written codecs for the two APIs that carry record bytes: Fetch responses, Produce requests.

Everything else goes through kio (``codec.py``). These two are written by hand so record
bytes never pass through a Python copy: a Fetch response is a list of *parts*, the encoded
fields as ``bytes`` and each partition's records either as ``bytes`` (read and checked now)
or as a ``FileRange`` of a segment file that the connection sends with ``sendfile``; a
Produce request's records are ``memoryview`` slices of the request frame.

Both follow the non-flexible versions the server implements (Fetch v4-v11, Produce v3-v8);
``tests/log/server/test_codec.py`` checks them byte for byte against kio.

Fetch response (response header v0), big-endian::

    INT32 correlation_id
    INT32 throttle_time_ms
    INT16 error_code                                  v7+
    INT32 session_id                                  v7+
    ARRAY responses: STRING topic, ARRAY partitions:
        INT32 partition_index, INT16 error_code, INT64 high_watermark,
        INT64 last_stable_offset,
        INT64 log_start_offset                        v5+
        NULLABLE ARRAY aborted_transactions: INT64 producer_id, INT64 first_offset
        INT32 preferred_read_replica                  v11+
        NULLABLE_BYTES records (INT32 length)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from streamkit.log.segment import FileRange
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.errors import MalformedRequestError
from streamkit.log.server.messages import FetchResponse

Part = bytes | bytearray | FileRange
Records = bytes | FileRange

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD_V7 = struct.Struct(">iihi")  # size placeholder excluded: correlation, throttle, error, session
_HEAD_V4 = struct.Struct(">ii")
_PART_V5 = struct.Struct(">ihqqq")
_PART_V4 = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")
_SMALL_PART = 64 * 1024  # records smaller than this are copied into the frame's bytes


@dataclass(slots=True)
class FetchAnswer:
    """A Fetch response with each partition's records kept aside, in response order.

    ``response``'s own ``records`` fields are ignored: ``records[i]`` is what the i-th
    partition (topics in order, then their partitions) sends.
    """

    response: FetchResponse
    records: list[Records] = field(default_factory=list)


def records_size(records: Records | None) -> int:
    return 0 if records is None else len(records)


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def encode_fetch_response(header: RequestHeader, answer: FetchAnswer) -> list[Part]:
    """The response frame (INT32 size first) as parts to send in order."""
    version = header.api_version
    response = answer.response
    out = bytearray(b"\x00\x00\x00\x00")
    if version >= 7:
        out += _HEAD_V7.pack(header.correlation_id, response.throttle_time_ms, response.error_code,
                             response.session_id)
    else:
        out += _HEAD_V4.pack(header.correlation_id, response.throttle_time_ms)
    parts: list[Part] = []
    total = 0
    records = iter(answer.records)
    out += _I32.pack(len(response.responses))
    for topic in response.responses:
        out += _string(topic.topic)
        out += _I32.pack(len(topic.partitions))
        for p in topic.partitions:
            if version >= 5:
                out += _PART_V5.pack(p.partition_index, p.error_code, p.high_watermark,
                                     p.last_stable_offset, p.log_start_offset)
            else:
                out += _PART_V4.pack(p.partition_index, p.error_code, p.high_watermark,
                                     p.last_stable_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += b"\xff\xff\xff\xff"
            else:
                out += _I32.pack(len(aborted))
                for a in aborted:
                    out += _ABORTED.pack(a.producer_id, a.first_offset)
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            data = next(records)
            out += _I32.pack(len(data))
            if isinstance(data, FileRange) or len(data) >= _SMALL_PART:
                total += len(out) + len(data)
                parts.append(out)
                parts.append(data)
                out = bytearray()
            else:
                out += data
    total += len(out)
    if out or not parts:
        parts.append(out)
    first = parts[0]
    assert isinstance(first, bytearray)
    _I32.pack_into(first, 0, total - 4)
    return parts


# ---------------------------------------------------------------------------------------------
# Produce requests, v3-v8 (request header v1, non-flexible body)::
#
#     NULLABLE_STRING transactional_id, INT16 acks, INT32 timeout_ms,
#     ARRAY topic_data: STRING name, ARRAY partition_data: INT32 index, NULLABLE_BYTES records
#
# Same field names as messages.ProduceRequest; records are views into the frame.


@dataclass(slots=True)
class ProducePartitionView:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopicView:
    name: str
    partition_data: list[ProducePartitionView]


@dataclass(slots=True)
class ProduceRequestView:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopicView]


_PRODUCE_FIXED = struct.Struct(">hi")


class _Cursor:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise MalformedRequestError(f"produce request cut short at byte {self.pos} (wanted {n})")
        view = self.buf[self.pos : self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        return fmt.unpack(self.take(fmt.size))

    def string(self, *, nullable: bool) -> str | None:
        (n,) = self.unpack(_I16)
        if n < 0:
            if n == -1 and nullable:
                return None
            raise MalformedRequestError(f"bad string length {n} in a produce request")
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequestError(f"a produce request string is not UTF-8: {exc}") from exc

    def count(self) -> int:
        (n,) = self.unpack(_I32)
        if n < 0 or n * 4 > len(self.buf) - self.pos:  # every element takes at least 4 bytes
            raise MalformedRequestError(f"bad array length {n} in a produce request")
        return int(n)


def decode_produce_request(frame: bytes | bytearray, header: RequestHeader) -> ProduceRequestView:
    """A Produce v3-v8 request whose records are ``memoryview`` slices of ``frame``."""
    cursor = _Cursor(memoryview(frame), header.size_v1)
    transactional_id = cursor.string(nullable=True)
    acks, timeout_ms = cursor.unpack(_PRODUCE_FIXED)
    topics = []
    for _ in range(cursor.count()):
        name = cursor.string(nullable=False)
        assert name is not None
        partitions = []
        for _ in range(cursor.count()):
            (index,) = cursor.unpack(_I32)
            (size,) = cursor.unpack(_I32)
            if size < -1:
                raise MalformedRequestError(f"bad records length {size} in a produce request")
            partitions.append(ProducePartitionView(index, None if size == -1 else cursor.take(size)))
        topics.append(ProduceTopicView(name, partitions))
    return ProduceRequestView(transactional_id, acks, timeout_ms, topics)
