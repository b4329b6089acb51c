"""Kafka RecordBatch v2 (magic 2): the format of every batch on disk and on the wire.

Plain code, no I/O. The broker and the log only ever read the 61-byte batch header
(``parse_header``), check the CRC and stamp the base offset; they never decode single
records. Clients and tools decode whole batches at once (``decode_batch``).

Batch layout, big-endian (byte offset: field)::

     0 BaseOffset INT64        set by the log on append; not covered by the CRC
     8 BatchLength INT32       bytes after this field (= total size - 12)
    12 PartitionLeaderEpoch INT32   not covered by the CRC
    16 Magic INT8              always 2
    17 CRC UINT32              CRC-32C (Castagnoli) of bytes [21, end)
    21 Attributes INT16        bits 0-2 codec, 3 timestamp type (1 = LogAppendTime),
                               4 transactional, 5 control, 6 has delete horizon
    23 LastOffsetDelta INT32
    27 BaseTimestamp INT64     ms (or the delete horizon when bit 6 is set)
    35 MaxTimestamp INT64
    43 ProducerId INT64       -1 when not idempotent
    51 ProducerEpoch INT16
    53 BaseSequence INT32
    57 RecordsCount INT32
    61 Records                 compressed as one blob when the codec is not none

Each record: Length VARINT, Attributes INT8, TimestampDelta VARLONG, OffsetDelta VARINT,
KeyLength VARINT (-1 null) + key, ValueLength VARINT (-1 null) + value, HeadersCount VARINT,
then per header KeyLength VARINT + UTF-8 key, ValueLength VARINT (-1 null) + value.
All VARINT/VARLONG are zigzag-encoded base-128 varints.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c as _crc32c
import msgspec

from streamkit.log import compression
from streamkit.log.errors import CorruptRecordError, InvalidRecordError

MAGIC = 2
BATCH_OVERHEAD = 61  # bytes of header before the records
LOG_OVERHEAD = 12  # BaseOffset + BatchLength: the part of a batch before BatchLength counts
CRC_START = 21

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_CRC_FIELD = struct.Struct(">I")

Header = tuple[str, bytes | None]
NO_HEADERS: tuple[Header, ...] = ()


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli), as Kafka computes it over a batch."""
    return int(_crc32c.crc32c(data))


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of one record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Read the batch header at ``pos``. The caller makes sure 61 bytes are there."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def batch_extent(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(base offset, total size) of the batch at ``pos``, from its first 12 bytes."""
    if len(buf) - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"batch at {pos} is cut short inside its first 12 bytes")
    base_offset, batch_length = _OFFSET_LENGTH.unpack_from(buf, pos)
    return base_offset, batch_length + LOG_OVERHEAD


def check_batch(data: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> BatchHeader:
    """Check that ``data`` is exactly one well-formed v2 batch and return its header.

    Raises ``InvalidRecordError`` (or its ``CorruptRecordError`` subclass) naming what is wrong.
    """
    size = len(data)
    if size < BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"batch of {size} bytes is shorter than its {BATCH_OVERHEAD}-byte header"
        )
    header = parse_header(data)
    if header.magic != MAGIC:
        raise InvalidRecordError(f"batch magic is {header.magic}, only magic 2 is supported")
    if header.size != size:
        raise CorruptRecordError(f"batch length field says {header.size} bytes, got {size}")
    if verify_crc:
        actual = crc32c(memoryview(data)[CRC_START:])
        if actual != header.crc:
            raise CorruptRecordError(
                f"batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}"
            )
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError("batch has a negative record count or offset delta")
    if header.records_count > 0 and header.last_offset_delta < header.records_count - 1:
        raise CorruptRecordError("batch last offset delta is smaller than its record count")
    return header


def iter_batches(
    buf: bytes | bytearray | memoryview, start: int = 0
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each whole batch in ``buf``; stop at a partial tail."""
    pos = start
    end = len(buf)
    while pos + BATCH_OVERHEAD <= end:
        header = parse_header(buf, pos)
        if header.batch_length < BATCH_OVERHEAD - LOG_OVERHEAD or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def with_base_offset(data: bytes, base_offset: int) -> bytes:
    """The batch with its BaseOffset field set (the CRC does not cover it)."""
    return _INT64.pack(base_offset) + data[8:]


# ---------------------------------------------------------------------------------------------
# Zigzag varints


_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def write_varint(out: bytearray, value: int) -> None:
    """Append a zigzag varint (VARINT and VARLONG share the encoding).

    Raises ``InvalidRecordError`` for a value outside the int64 range.
    """
    if -64 <= value < 64:  # the common case: one byte
        out.append(_zigzag(value))
        return
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidRecordError(f"{value} does not fit a 64-bit varint")
    v = _zigzag(value)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Read a zigzag varint at ``pos``; return (value, next position).

    Raises ``IndexError`` when ``buf`` ends inside the varint and ``CorruptRecordError`` when
    it is longer than 10 bytes or overflows 64 bits.
    """
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    b = buf[pos + 1]
    if b < 0x80:  # two bytes: lengths of 64 B to 8 KiB, offset deltas of 64 to 8191
        result |= b << 7
        return (result >> 1) ^ -(result & 1), pos + 2
    result |= (b & 0x7F) << 7
    shift = 14
    pos += 1
    while True:
        pos += 1
        b = buf[pos]
        if b < 0x80:
            break
        result |= (b & 0x7F) << shift
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")
    if shift == 63 and b > 1:
        raise CorruptRecordError("varint overflows 64 bits")
    result |= b << shift
    return (result >> 1) ^ -(result & 1), pos + 1


def varint_size(value: int) -> int:
    """Bytes that ``write_varint`` takes for ``value``."""
    v = _zigzag(value) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size


# ---------------------------------------------------------------------------------------------
# Records


class Record(msgspec.Struct, gc=False):
    """One decoded record with its absolute offset and timestamp (ms).

    Not tracked by the garbage collector (``gc=False``): it holds bytes, ints and headers,
    never a reference cycle, and a consumer allocates millions of them. Tracked objects
    that many make the collector's full passes the main cost of reading (about half of an
    embedded consumer's time in ``broker_bench.py``)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()

    def __eq__(self, other: object) -> bool:
        # Headers compare as sequences: decoding shares one empty tuple, callers pass lists.
        if not isinstance(other, Record):
            return NotImplemented
        return (self.offset, self.timestamp, self.key, self.value, list(self.headers)) == (
            other.offset,
            other.timestamp,
            other.key,
            other.value,
            list(other.headers),
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass default


# The smallest record: Length, Attributes, TimestampDelta, OffsetDelta, KeyLength, ValueLength
# and HeadersCount of one byte each.
_MIN_RECORD_SIZE = 7


def decode_records(header: BatchHeader, data: bytes | bytearray | memoryview) -> list[Record]:
    """Decode the records of the batch whose bytes are ``data`` (header included).

    Raises ``InvalidRecordError`` (mostly its ``CorruptRecordError`` subclass) for any
    malformed input, never another exception type.
    """
    codec = header.attributes & ATTR_CODEC_MASK
    if codec == compression.NONE:
        # Read the records in place. A memoryview is copied once: records own their bytes.
        body = data if type(data) is bytes else bytes(data)
        pos = BATCH_OVERHEAD
    else:
        body = compression.decompress(codec, memoryview(data)[BATCH_OVERHEAD:])
        pos = 0
    end = len(body)
    count = header.records_count
    if count * _MIN_RECORD_SIZE > end - pos:
        raise CorruptRecordError(f"{end - pos} bytes of records cannot hold {count} records")
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    # Under LogAppendTime every record takes the batch's max timestamp.
    log_append_time = bool(header.attributes & ATTR_LOG_APPEND_TIME)
    max_ts = header.max_timestamp
    records: list[Record] = []
    append = records.append
    try:
        # The consumer's hot path. Every varint is read inline when it takes one or two bytes
        # (lengths up to 8 KiB, offset deltas up to 8191) and by read_varint otherwise.
        for _ in range(count):
            b = body[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (b2 := body[pos + 1]) < 0x80:
                v = (b & 0x7F) | (b2 << 7)
                length = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                length, pos = read_varint(body, pos)
            record_end = pos + length
            if length < 0 or record_end > end:
                raise CorruptRecordError("record length runs past the end of its batch")
            pos += 1  # record attributes, unused
            b = body[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (b2 := body[pos + 1]) < 0x80:
                v = (b & 0x7F) | (b2 << 7)
                ts_delta = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                ts_delta, pos = read_varint(body, pos)
            b = body[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (b2 := body[pos + 1]) < 0x80:
                v = (b & 0x7F) | (b2 << 7)
                offset_delta = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                offset_delta, pos = read_varint(body, pos)
            b = body[pos]
            if b < 0x80:
                key_len = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (b2 := body[pos + 1]) < 0x80:
                v = (b & 0x7F) | (b2 << 7)
                key_len = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                key_len, pos = read_varint(body, pos)
            if key_len < 0:
                key = None
            else:
                key = body[pos : pos + key_len]
                pos += key_len
            b = body[pos]
            if b < 0x80:
                value_len = (b >> 1) ^ -(b & 1)
                pos += 1
            elif (b2 := body[pos + 1]) < 0x80:
                v = (b & 0x7F) | (b2 << 7)
                value_len = (v >> 1) ^ -(v & 1)
                pos += 2
            else:
                value_len, pos = read_varint(body, pos)
            if value_len < 0:
                value = None
            else:
                value = body[pos : pos + value_len]
                pos += value_len
            b = body[pos]
            if b == 0:
                # Most records carry none: share one empty tuple instead of a list apiece (a
                # GC-tracked allocation per record on the consumer's hot path).
                headers: Sequence[Header] = NO_HEADERS
                pos += 1
            else:
                n_headers, pos = read_varint(body, pos)
                if n_headers < 0:
                    raise CorruptRecordError(f"record has {n_headers} headers")
                decoded: list[Header] = []
                pos = _decode_headers(body, pos, n_headers, decoded)
                headers = decoded
            if pos != record_end:
                raise CorruptRecordError("record length does not match its fields")
            append(
                Record(
                    base_offset + offset_delta,
                    max_ts if log_append_time else base_ts + ts_delta,
                    key,
                    value,
                    headers,
                )
            )
    except IndexError as exc:
        raise CorruptRecordError("record runs past the end of its batch") from exc
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"record header key is not UTF-8: {exc}") from exc
    if pos != end:
        raise CorruptRecordError("bytes left over after the last record of a batch")
    return records


def _decode_headers(body: bytes, pos: int, count: int, out: list[Header]) -> int:
    """Append ``count`` record headers read at ``pos`` to ``out``; return the next position."""
    for _ in range(count):
        b = body[pos]
        if b < 0x80:
            key_len = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            key_len, pos = read_varint(body, pos)
        if key_len < 0:
            raise CorruptRecordError("record header key is null")
        key = body[pos : pos + key_len].decode("utf-8")
        pos += key_len
        b = body[pos]
        if b < 0x80:
            value_len = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            value_len, pos = read_varint(body, pos)
        if value_len < 0:
            out.append((key, None))
        else:
            out.append((key, body[pos : pos + value_len]))
            pos += value_len
    return pos


def decode_batch(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> tuple[BatchHeader, list[Record]]:
    """Check one batch and decode its records.

    Raises ``InvalidRecordError`` (or a subclass) for any malformed input, never another
    exception type.
    """
    header = check_batch(data, verify_crc=verify_crc)
    return header, decode_records(header, data)


def decode_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True, skip_control: bool = True
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Decode every whole batch in ``buf`` (as a read or a fetch returns them)."""
    view = memoryview(buf)
    for pos, header in iter_batches(buf):
        if skip_control and header.is_control:
            continue
        chunk = view[pos : pos + header.size]
        yield decode_batch(chunk, verify_crc=verify_crc)


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> None:
    body = bytearray(b"\x00")  # record attributes, unused
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    if key is None:
        body.append(1)  # zigzag(-1)
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        write_varint(body, len(value))
        body += value
    write_varint(body, len(headers))
    for hkey, hval in headers:
        encoded = hkey.encode("utf-8")
        write_varint(body, len(encoded))
        body += encoded
        if hval is None:
            body.append(1)
        else:
            write_varint(body, len(hval))
            body += hval
    write_varint(out, len(body))
    out += body


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to be written: what a producer supplies (the log assigns the offset)."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Sequence[Header] = ()


_BATCH_TAIL = struct.Struct(">hiqqqhii")  # Attributes .. RecordsCount: the CRC's first 40 bytes
_BATCH_HEAD = struct.Struct(">qiibI")  # BaseOffset .. CRC


def build_batch(
    records: Sequence[NewRecord | Record],
    *,
    base_offset: int = 0,
    compression_codec: int = compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode one batch.

    ``NewRecord``s get consecutive offset deltas 0..n-1. ``Record``s keep their own offsets
    relative to ``base_offset`` (the compactor writes batches with gaps this way); their
    offsets must increase. ``last_offset_delta`` overrides the delta stored in the header, so a
    cleaned batch can keep the offset range of the batch it replaces even when its last records
    were removed. Raises ``InvalidRecordError`` for what cannot be encoded.
    """
    if not records and last_offset_delta is None:
        raise InvalidRecordError("a batch needs at least one record")
    if records:
        base_ts = records[0].timestamp
        max_ts = max(r.timestamp for r in records)
    else:
        base_ts = max_ts = -1
    body = bytearray()
    max_delta = -1
    for i, rec in enumerate(records):
        delta = rec.offset - base_offset if isinstance(rec, Record) else i
        if delta <= max_delta:
            raise InvalidRecordError(
                "record offsets must increase and not lie before the batch's base offset"
            )
        max_delta = delta
        _encode_record(body, delta, rec.timestamp - base_ts, rec.key, rec.value, rec.headers)
    lod = max(max_delta, 0) if last_offset_delta is None else last_offset_delta
    if lod < max(max_delta, 0):
        raise InvalidRecordError(
            f"last offset delta {lod} is below the last record's offset delta {max_delta}"
        )
    return _finish_batch(
        body, len(records), lod, base_ts, max_ts, base_offset, compression_codec, producer_id,
        producer_epoch, base_sequence, transactional, control, partition_leader_epoch,
    )


def _finish_batch(
    body: bytearray,
    count: int,
    lod: int,
    base_ts: int,
    max_ts: int,
    base_offset: int,
    compression_codec: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
    control: bool,
    partition_leader_epoch: int,
) -> bytes:
    """Header, CRC and (compressed) records: the encoded batch."""
    if lod > _INT32_MAX:
        raise InvalidRecordError(f"offset delta {lod} does not fit a batch (at most 2^31-1)")
    payload = compression.compress(compression_codec, bytes(body))
    attributes = compression_codec & ATTR_CODEC_MASK
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    try:
        tail = _BATCH_TAIL.pack(
            attributes,
            lod,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        crc = crc32c(tail + payload)
        batch_length = BATCH_OVERHEAD - LOG_OVERHEAD + len(payload)
        head = _BATCH_HEAD.pack(base_offset, batch_length, partition_leader_epoch, MAGIC, crc)
    except struct.error as exc:
        raise InvalidRecordError(f"a batch header field is out of range: {exc}") from exc
    return head + tail + payload


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


# Encoded varints of -8192..8191 (one or two bytes): record lengths, timestamp and offset
# deltas and key/value lengths of a producer's typical record are looked up, not computed.
_SMALL = 8192
_VARINTS = [_varint_bytes(v) for v in range(-_SMALL, _SMALL)]
_NULL = _VARINTS[_SMALL - 1]  # -1: a null key or value


class BatchBuilder:
    """A batch encoded as its records arrive (a producer's side): no object per record and
    no second pass over them. Offsets deltas are 0..n-1 and timestamps are relative to the
    first record's; ``build`` adds the header and the CRC."""

    __slots__ = ("_base_ts", "_body", "_count", "_max_ts")

    def __init__(self) -> None:
        self._body = bytearray()
        self._count = 0
        self._base_ts = 0
        self._max_ts = -1

    def __len__(self) -> int:
        return self._count

    @property
    def size(self) -> int:
        """Bytes of records encoded so far (the batch adds a 61-byte header)."""
        return len(self._body)

    def append(
        self, key: bytes | None, value: bytes | None, timestamp: int, headers: Sequence[Header] = ()
    ) -> int:
        """Encode one record; returns its offset delta in the batch."""
        n = self._count
        if n == 0:
            self._base_ts = timestamp
        ts_delta = timestamp - self._base_ts
        if headers or n >= _SMALL or not -_SMALL <= ts_delta < _SMALL:
            _encode_record(self._body, n, ts_delta, key, value, headers)  # raises before writing
        else:
            varints = _VARINTS
            if key is None:
                key_len, key_size, key = _NULL, 0, b""
            else:
                key_size = len(key)
                key_len = varints[key_size + _SMALL] if key_size < _SMALL else _varint_bytes(key_size)
            if value is None:
                value_len, value_size, value = _NULL, 0, b""
            else:
                value_size = len(value)
                value_len = varints[value_size + _SMALL] if value_size < _SMALL else _varint_bytes(value_size)
            ts_part = varints[ts_delta + _SMALL]
            offset_part = varints[n + _SMALL]
            # Attributes, the deltas, key, value and a zero header count.
            length = 2 + len(ts_part) + len(offset_part) + len(key_len) + key_size + len(value_len) + value_size
            self._body += b"".join(
                (
                    varints[length + _SMALL] if length < _SMALL else _varint_bytes(length),
                    b"\x00",
                    ts_part,
                    offset_part,
                    key_len,
                    key,
                    value_len,
                    value,
                    b"\x00",
                )
            )
        if n == 0 or timestamp > self._max_ts:
            self._max_ts = timestamp
        self._count = n + 1
        return n

    def build(
        self,
        *,
        base_offset: int = 0,
        compression_codec: int = compression.NONE,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        transactional: bool = False,
    ) -> bytes:
        """The encoded batch. Raises ``InvalidRecordError`` when it holds no record."""
        if not self._count:
            raise InvalidRecordError("a batch needs at least one record")
        return _finish_batch(
            self._body, self._count, self._count - 1, self._base_ts, self._max_ts, base_offset,
            compression_codec, producer_id, producer_epoch, base_sequence, transactional, False, -1,
        )


def control_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
) -> bytes:
    """A transaction marker (COMMIT or ABORT) batch of one control record."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [NewRecord(key, value, timestamp)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )
