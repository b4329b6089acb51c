"""Record batches decoded column by column: Arrow arrays straight from the batch bytes.

The data source's read path for segment files. ``column_batches`` turns the batches
``log.reader.read_batches`` yields (CRC-checked, control batches left out) into Arrow record
batches of the Kafka schema (``arrow.py``) without a Python object per record:

1. the record bodies of a run of batches (decompressed with ``log.compression`` when
   compressed) are copied into one buffer;
2. one short Python loop per batch walks the records' length prefixes, which gives where
   each record starts and ends (a record's position depends on every record before it);
3. every other field is decoded with numpy for all records of the run at once: the varints
   (timestamp and offset deltas, key and value lengths, header counts) one field at a time,
   across all records, with one pass per varint byte;
4. keys and values become Arrow binary arrays without copying them one by one: a
   ``binary_view`` array whose views point into the buffer, cast (in Arrow's C++) to
   ``binary``.

The rows are those ``log.records.decode_records`` and ``arrow.record_batches`` give for the
same batches. A batch this path does not take goes through those two instead, within the same
output: one whose records carry headers (decoded one by one, as before), and one whose bytes
are not a well-formed batch (a record length, a varint or a field that runs past its record,
an offset or timestamp past 64 bits, data that does not decompress). ``decode_records`` then
raises exactly the error it always raised for such a batch; this module never judges a
malformed batch itself and never serves a row of one.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from streamkit.log import compression
from streamkit.log.errors import CorruptRecordError, InvalidRecordError
from streamkit.log.records import (
    ATTR_CODEC_MASK,
    BATCH_OVERHEAD,
    BatchHeader,
    Record,
    decode_records,
    read_varint,
)
from streamkit.spark.arrow import (
    ARROW_BATCH_RECORDS,
    ValueColumn,
    arrow_schema,
    kafka_batch,
    no_headers,
    record_batch,
)

Batch = tuple[BatchHeader, bytes | memoryview]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

# Zero bytes after the last body: the reads of a malformed last record (three varints of up
# to 10 bytes past its end, then an inline view of 12 bytes) stay inside the buffer.
_PAD = 64
# Arrow's views address their data buffer with int32 offsets.
_MAX_BUFFER = (1 << 31) - 1 - _PAD
# The smallest record: seven one-byte fields (as in log.records).
_MIN_RECORD_SIZE = 7
# A length that cannot be real (bigger than any buffer): clipped to this before it is added to a
# position, so a garbage length cannot overflow int64 on the way to being found bad.
_LENGTH_CLIP = 1 << 40
# Batches walked side by side below which the walk's numpy step costs more than a Python loop.
_LOCKSTEP_MIN = 64
# Output batches' worth of records whose lengths are walked together.
_WALK_GROUP = 4


def _pair_tables() -> tuple[I64, npt.NDArray[np.int8], I64]:
    """The zigzag varint that starts with the two bytes ``b0 | b1 << 8``, for every pair:
    (its value, its size in bytes or 0 when it is longer than two bytes, and the step over a
    record whose length prefix it is: size + length, or ``_NO_STEP`` when the size is 0 or the
    length negative). Nearly every varint of a record (lengths below 8 KiB, deltas below 8,192)
    is one or two bytes long, so one lookup per varint replaces the byte-by-byte decoding."""
    pair = np.arange(1 << 16, dtype=np.int64)
    b0, b1 = pair & 0xFF, pair >> 8
    one = b0 < 0x80
    raw = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
    values: I64 = (raw >> 1) ^ -(raw & 1)
    sizes = np.where(one, 1, np.where(b1 < 0x80, 2, 0)).astype(np.int8)
    steps: I64 = np.where((sizes > 0) & (values >= 0), sizes + values, _NO_STEP)
    return values, sizes, steps


# A step no record takes: the walk decodes such a prefix byte by byte.
_NO_STEP = -(1 << 20)
_PAIR_VALUE, _PAIR_SIZE, _PAIR_STEP = _pair_tables()


def column_batches(
    topic: str,
    partition: int,
    batches: Iterable[Batch],
    start: int,
    end: int,
    *,
    include_headers: bool,
    value_column: ValueColumn | None = None,
    batch_records: int = ARROW_BATCH_RECORDS,
) -> Iterator[pa.RecordBatch]:
    """The records of ``batches`` with offsets in ``[start, end)``, as Arrow batches of about
    ``batch_records`` rows. Only a batch that straddles a bound is filtered, as the record
    path (``logs.FileLog.read``) filters.

    The lengths are walked over ``_WALK_GROUP`` times as many records at once (more batches
    side by side); the other fields are decoded per output batch, whose arrays stay small
    enough for the CPU's caches.

    Each batch's bytes are copied into the group's buffer as it arrives and not kept: a batch
    may be a view that is valid only until the next one is asked for (``log.reader``'s)."""
    group = _Group()
    for header, data in batches:
        if group.records >= batch_records * _WALK_GROUP or group.size + len(data) > _MAX_BUFFER:
            yield from _group_batches(topic, partition, group, start, end, include_headers, value_column, batch_records)
            group = _Group()
        group.add(header, data)
    if group.batches:
        yield from _group_batches(topic, partition, group, start, end, include_headers, value_column, batch_records)


def batch_lists(batch: pa.RecordBatch) -> tuple[list[bytes | None], list[bytes | None], list[int], list[int]]:
    """A Kafka-schema batch's (keys, values, offsets, timestamps in ms) as Python lists."""
    ms = batch.column("timestamp").cast(pa.int64()).to_numpy() // 1000
    return (
        batch.column("key").to_numpy(zero_copy_only=False).tolist(),
        batch.column("value").to_numpy(zero_copy_only=False).tolist(),
        batch.column("offset").to_numpy().tolist(),
        ms.tolist(),
    )


def _group_batches(
    topic: str,
    partition: int,
    group: _Group,
    start: int,
    end: int,
    include_headers: bool,
    value_column: ValueColumn | None,
    batch_records: int,
) -> Iterator[pa.RecordBatch]:
    chunk = group.batches
    buf, where, sizes = group.finish()
    total = len(buf) - _PAD
    raw = _Raw.over(buf)
    walk, slow = _walk(buf, raw, chunk, where, sizes)
    first = np.concatenate((np.cumsum(walk.counts) - walk.counts, [len(walk.heads)]))
    begin = records = 0
    for i, (header, _data) in enumerate(chunk):
        records += max(header.records_count, 0)
        if records < batch_records and i + 1 < len(chunk):
            continue
        # The output batch of group[begin:i + 1]: the walked batches among them.
        lo, hi = np.searchsorted(walk.batch, [begin, i + 1]).tolist()
        part = _Walk(walk.heads[first[lo] : first[hi]], walk.batch[lo:hi], walk.counts[lo:hi], walk.ends[lo:hi])
        rows = range(begin, i + 1)
        out = _decode(topic, partition, group, rows, raw, total, buf, part, {j for j in slow if j in rows}, start, end, include_headers)
        begin, records = i + 1, 0
        if out is None or out.num_rows == 0:
            continue
        if value_column is not None:
            columns = out.columns
            columns[1] = value_column(out.column(1).to_pylist())
            out = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers, columns[1].type))
        yield out


class _Group:
    """Batches gathered for one walk, their record bodies (decompressed) copied into one
    buffer as they arrive. An uncompressed batch is copied whole (its 61-byte header too), so
    ``decode_records`` can read it back from the buffer if its records do not decode here; a
    compressed one keeps its own bytes for that."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.batches: list[tuple[BatchHeader, bytes | None]] = []  # (header, bytes kept apart)
        self.where: list[int] = []  # where each body starts in buf; -1: not there (record path)
        self.sizes: list[int] = []
        self.records = 0

    @property
    def size(self) -> int:
        return len(self.buf)

    def add(self, header: BatchHeader, data: bytes | memoryview) -> None:
        self.records += max(header.records_count, 0)
        codec = header.attributes & ATTR_CODEC_MASK
        if codec == compression.NONE and BATCH_OVERHEAD <= len(data) <= _MAX_BUFFER - len(self.buf):
            self.where.append(len(self.buf) + BATCH_OVERHEAD)
            self.sizes.append(len(data) - BATCH_OVERHEAD)
            self.buf += data
            self.batches.append((header, None))
            return
        kept = bytes(data)
        self.batches.append((header, kept))
        body: bytes | None = None
        if codec != compression.NONE:
            try:
                body = compression.decompress(codec, memoryview(kept)[BATCH_OVERHEAD:])
            except InvalidRecordError:
                body = None  # decode_records will say why
        if body is None or len(body) > _MAX_BUFFER - len(self.buf):  # too big for int32 views
            self.where.append(-1)
            self.sizes.append(0)
            return
        self.where.append(len(self.buf))
        self.sizes.append(len(body))
        self.buf += body

    def finish(self) -> tuple[bytearray, list[int], list[int]]:
        """(the buffer, padded, where each body starts, each body's size)."""
        self.buf += bytes(_PAD)
        return self.buf, self.where, self.sizes

    def batch_bytes(self, i: int) -> bytes:
        """The bytes of batch ``i`` as they came (for ``decode_records``)."""
        header, kept = self.batches[i]
        if kept is not None:
            return kept
        at = self.where[i] - BATCH_OVERHEAD
        return bytes(self.buf[at : at + header.size])


@dataclass
class _Walk:
    """Where the records of the walked batches lie in the joined buffer."""

    heads: I64  # where each record's length prefix is, batch after batch
    batch: list[int]  # the chunk index of each walked batch (each holds records)
    counts: I64  # its record count
    ends: I64  # where its body ends


def _walk(
    buf: bytearray, raw: _Raw, chunk: Sequence[tuple[BatchHeader, object]], where: Sequence[int], sizes: Sequence[int]
) -> tuple[_Walk, set[int]]:
    """Find where every record begins from the length prefixes; (the walk, the batches to
    decode with decode_records).

    A record's place depends on the records before it in its batch, so the batches are walked
    side by side: step k reads the k-th length prefix of every batch that has a k-th record
    with numpy, while at least ``_LOCKSTEP_MIN`` batches do; the rest of the records of the
    longest batches are walked in Python. A malformed batch only yields wrong heads, which the
    field decoding finds (every head is kept inside the buffer)."""
    slow: set[int] = set()
    walked: list[int] = []
    for i, (header, _data) in enumerate(chunk):
        count = header.records_count
        if where[i] < 0 or count < 0 or count * _MIN_RECORD_SIZE > sizes[i] or (count == 0 and sizes[i]):
            slow.add(i)
        elif count:
            walked.append(i)
    counts = np.array([chunk[i][0].records_count for i in walked], np.int64)
    starts = np.array([where[i] for i in walked], np.int64)
    ends = starts + np.array([sizes[i] for i in walked], np.int64)
    total = len(buf) - _PAD
    heads = np.empty(int(counts.sum()), np.int64)
    order = np.argsort(-counts, kind="stable")
    left = counts[order]  # longest batch first: the batches still walking are a prefix
    pos = starts[order]
    first = (np.cumsum(counts) - counts)[order]  # where a batch's heads go
    m, k = len(order), 0
    while m >= _LOCKSTEP_MIN:
        while m and left[m - 1] <= k:
            m -= 1
        if m < _LOCKSTEP_MIN:
            break
        p = pos[:m]
        heads[first[:m] + k] = p
        step = _PAIR_STEP.take(raw.pairs[p])  # take: indexing with uint16 would convert them first
        if step.min() > _NO_STEP:  # every prefix one or two bytes, no length negative
            step += p
        else:
            length, size, _bad = _varints(raw, p)
            step = p + size + np.minimum(np.maximum(length, -total), _LENGTH_CLIP)
            np.maximum(step, 0, out=step)  # np.clip costs several times more per call
        np.minimum(step, total, out=pos[:m])
        k += 1
    tail = array("q")
    for j in range(m):
        if left[j] > k:
            del tail[:]
            pos[j] = _walk_records(buf, int(pos[j]), int(left[j]) - k, tail)
            got = first[j] + k + len(tail)
            heads[first[j] + k : got] = np.clip(np.frombuffer(tail, np.int64), 0, total)
            heads[got : first[j] + left[j]] = 0  # the walk broke off (pos is -1)
    done = np.empty(len(order), np.int64)
    done[order] = pos
    for j in np.flatnonzero(done != ends).tolist():
        slow.add(walked[j])
    return _Walk(heads, walked, counts, ends), slow


def _walk_records(buf: bytearray, pos: int, count: int, heads: array[int]) -> int:
    """Append where each of ``count`` records from ``pos`` begins; where the last one ends
    (-1 when the walk runs off the buffer)."""
    add = heads.append
    try:
        for _ in range(count):
            add(pos)
            b = buf[pos]
            if b < 0x80:
                pos += 1 + ((b >> 1) ^ -(b & 1))
            else:
                b2 = buf[pos + 1]
                if b2 < 0x80:
                    v = (b & 0x7F) | (b2 << 7)
                    pos += 2 + ((v >> 1) ^ -(v & 1))
                else:
                    length, pos = read_varint(buf, pos)
                    pos += length
    except (IndexError, CorruptRecordError):
        return -1
    return pos


@dataclass
class _Raw:
    """The joined bodies as bytes (``data``) and as the overlapping little-endian pairs of
    bytes starting at each position (``pairs``)."""

    data: npt.NDArray[np.uint8]
    pairs: npt.NDArray[np.uint16]

    @classmethod
    def over(cls, buf: bytearray) -> _Raw:
        return cls(np.frombuffer(buf, np.uint8), np.ndarray((len(buf) - 1,), "<u2", buffer=buf, strides=(1,)))


def _varints(raw: _Raw, pos: I64) -> tuple[I64, npt.NDArray[np.integer], Mask | None]:
    """The zigzag varints at ``pos``: (values, sizes in bytes, malformed or None when none
    is), the way ``log.records.read_varint`` reads them (at most 10 bytes, no overflow past 64
    bits). The buffer must hold 10 bytes past every position."""
    pair = raw.pairs[pos]
    size = _PAIR_SIZE.take(pair)  # take: indexing with uint16 would convert them first
    if size.all():  # one or two bytes each (-8192..8191): looked up
        return _PAIR_VALUE.take(pair), size, None
    data = raw.data
    b = data[pos]
    more = b >= 0x80
    bad = np.zeros(len(pos), np.bool_)
    wide = (b & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), np.int64)
    at = np.flatnonzero(more)
    shift = 7
    while at.size:
        b = data[pos[at] + size[at]]
        if shift == 63:
            bad[at[(b >= 0x80) | (b > 1)]] = True
        wide[at] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        size[at] += 1
        at = at[b >= 0x80]
        if shift == 63:
            break
        shift += 7
    values = ((wide >> np.uint64(1)) ^ (np.uint64(0) - (wide & np.uint64(1)))).view(np.int64)
    return values, size, bad


def _overflows(a: I64, b: I64, total: I64) -> Mask:
    """Where ``a + b`` (computed as ``total``, wrapping) left the int64 range."""
    result: Mask = ((a ^ total) & (b ^ total)) < 0
    return result


def _decode(
    topic: str,
    partition: int,
    group: _Group,
    rows: range,
    raw: _Raw,
    total: int,
    buf: bytearray,
    walk: _Walk,
    slow: set[int],
    start: int,
    end: int,
    include_headers: bool,
) -> pa.RecordBatch | None:
    """The rows of ``group.batches[rows]``: ``walk`` holds the walked batches among them,
    ``slow`` those for ``decode_records``."""
    chunk = group.batches
    schema = arrow_schema(include_headers)
    heads, counts = walk.heads, walk.counts
    batch_of = np.repeat(np.arange(len(walk.batch)), counts)  # index into walk.batch per record
    n = len(heads)

    length, prefix, wrong = _varints(raw, heads)
    bad = np.zeros(n, np.bool_) if wrong is None else wrong
    bad |= np.repeat(np.array([i in slow for i in walk.batch], np.bool_), counts)  # did not walk
    bad |= length < 0
    rec_start = heads + prefix
    rec_end = rec_start + np.clip(length, 0, _LENGTH_CLIP)
    # Each record ends where the next begins, the last where its batch's body ends.
    follows = np.empty(n, np.int64)
    follows[:-1] = heads[1:]
    follows[np.cumsum(counts) - 1] = walk.ends
    bad |= rec_end != follows
    rec_end = np.minimum(rec_end, total)
    pos = rec_start + 1  # record attributes, unused
    # A field that runs past its record's end is found at the end: positions only grow, so
    # the last one then lies past the end. Only the skips over a key and a value are capped
    # (at the record's end), which keeps every read within the buffer's padding.

    def varint(p: I64) -> tuple[I64, I64]:
        values, size, wrong = _varints(raw, p)
        if wrong is not None:
            bad[wrong] = True
        return values, p + size

    ts_delta, pos = varint(pos)
    offset_delta, pos = varint(pos)
    key_len, pos = varint(pos)
    key_start = pos
    pos = np.minimum(pos + np.clip(key_len, 0, _LENGTH_CLIP), rec_end)
    value_len, pos = varint(pos)
    value_start = pos
    pos = np.minimum(pos + np.clip(value_len, 0, _LENGTH_CLIP), rec_end)
    header_count, pos = varint(pos)
    bad |= (header_count != 0) | (pos != rec_end)  # records with headers: the record path

    headers = [chunk[i][0] for i in walk.batch]
    base_offset = np.array([h.base_offset for h in headers], np.int64)[batch_of]
    offsets = base_offset + offset_delta
    bad |= _overflows(base_offset, offset_delta, offsets)
    log_append_time = np.array([h.log_append_time for h in headers], np.bool_)[batch_of]
    base_ts = np.array([h.base_timestamp for h in headers], np.int64)[batch_of]
    timestamps = base_ts + ts_delta
    bad |= _overflows(base_ts, ts_delta, timestamps) & ~log_append_time
    max_ts = np.array([h.max_timestamp for h in headers], np.int64)[batch_of]
    timestamps = np.where(log_append_time, max_ts, timestamps)

    slow_batches = np.unique(batch_of[bad])
    slow.update(walk.batch[j] for j in slow_batches.tolist())
    fast = np.ones(n, np.bool_)
    if slow_batches.size:
        fast[np.isin(batch_of, slow_batches)] = False
    straddles = np.array([h.base_offset < start or h.last_offset >= end for h in headers], np.bool_)[batch_of]
    keep = fast & (~straddles | ((offsets >= start) & (offsets < end)))

    arrays: list[pa.Array] | None = None
    if fast.any():
        data_buffer = pa.py_buffer(buf)
        words = np.ndarray((len(buf) - 3,), np.uint32, buffer=buf, strides=(1,))
        arrays = [
            _binary(words, data_buffer, key_start, np.where(fast, key_len, -1)),
            _binary(words, data_buffer, value_start, np.where(fast, value_len, -1)),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.int64()),
            pa.array(log_append_time.astype(np.int32), pa.int32()),
        ]
    if not slow:
        assert arrays is not None or n == 0
        if arrays is None:
            return None
        mask = None if keep.all() else pa.array(keep)
        return _assemble(schema, topic, partition, arrays, mask, include_headers)
    return _mixed(schema, topic, partition, group, rows, slow, walk, counts, arrays, keep, start, end, include_headers)


def _binary(words: npt.NDArray[np.uint32], buffer: pa.Buffer, start: I64, length: I64) -> pa.Array:
    """A binary array of ``buffer[start:start + length]`` per row, null where ``length`` < 0.

    ``words[i]`` is the 4 bytes at byte ``i`` of ``buffer`` (overlapping, native order): a
    view (16 bytes) holds the length, then up to 12 bytes inline (zero-padded), or for a longer
    value its first 4 bytes, its buffer (0) and its offset."""
    n = len(start)
    valid = length >= 0
    size = np.where(valid, length, 0)
    views = np.empty((n, 4), np.uint32)
    views[:, 0] = size
    if n and size.min() > 12:  # all out of line (values of 13 bytes or more)
        views[:, 1] = words[start]
        views[:, 2] = 0
        views[:, 3] = start
        return _view_array(views, buffer, valid)
    for w in range(3):
        kept = np.clip(size - 4 * w, 0, 4).astype(np.uint64) * np.uint64(8)
        mask = ((np.uint64(1) << kept) - np.uint64(1)).astype(np.uint32)
        views[:, w + 1] = words[start + 4 * w] & mask
    long = size > 12
    views[long, 2] = 0
    views[long, 3] = start[long]
    return _view_array(views, buffer, valid)


def _view_array(views: npt.NDArray[np.uint32], buffer: pa.Buffer, valid: Mask) -> pa.Array:
    n = len(views)
    null_count = n - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    array = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), buffer], null_count=null_count
    )
    return array.cast(pa.binary())


def _assemble(
    schema: pa.Schema,
    topic: str,
    partition: int,
    arrays: list[pa.Array],
    mask: pa.Array | None,
    include_headers: bool,
) -> pa.RecordBatch:
    """The Kafka-schema batch of (key, value, offset, timestamp ms, timestamp type) arrays."""
    if mask is not None:
        arrays = [a.filter(mask) for a in arrays]
    key, value, offset, timestamp, kind = arrays
    headers = no_headers(len(offset)) if include_headers else None
    return kafka_batch(schema, topic, partition, key, value, offset, timestamp, kind, headers)


def _mixed(
    schema: pa.Schema,
    topic: str,
    partition: int,
    group: _Group,
    rows: range,
    slow: set[int],
    walk: _Walk,
    counts: npt.NDArray[np.int64],
    arrays: list[pa.Array] | None,
    keep: Mask,
    start: int,
    end: int,
    include_headers: bool,
) -> pa.RecordBatch | None:
    """The rows of ``group.batches[rows]`` in order when some of those batches go through
    ``decode_records``."""
    first = dict(zip(walk.batch, (np.cumsum(counts) - counts).tolist(), strict=True))
    pieces: list[pa.RecordBatch] = []
    for i in rows:
        header = group.batches[i][0]
        if i in slow:
            records: list[Record] = decode_records(header, group.batch_bytes(i))
            if header.base_offset < start or header.last_offset >= end:
                records = [r for r in records if start <= r.offset < end]
            if records:
                pieces.append(record_batch(schema, topic, partition, records, header.log_append_time, include_headers))
        elif i in first:
            assert arrays is not None
            lo, n = first[i], header.records_count
            sliced = [a.slice(lo, n) for a in arrays]
            pieces.append(_assemble(schema, topic, partition, sliced, pa.array(keep[lo : lo + n]), include_headers))
    pieces = [p for p in pieces if p.num_rows]
    if not pieces:
        return None
    if len(pieces) == 1:
        return pieces[0]
    return pa.Table.from_batches(pieces, schema=schema).combine_chunks().to_batches()[0]
