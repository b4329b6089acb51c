"""Read-only reading of a topic's segment files, for readers outside the owning process.

The public reader ``spark/`` (and any other batch reader) uses: it looks at the files of a data
directory that another process may own and be appending to, so it never goes through
``LogManager``/``Partition``/``Segment`` (which lock, recover, truncate and rewrite). It takes
no lock, opens every file read-only and never writes. What it guarantees:

* every batch it yields has passed its CRC check and lies whole inside its file;
* damage is never skipped: a batch whose CRC, length or magic is wrong raises
  ``CorruptSegmentError`` naming the file and the byte position, before any record of it is
  returned. The one exception is the end of the partition's *last* segment: bytes there that
  do not yet form a whole batch are an append in progress (the owner writes a batch with more
  than one ``write``), so a read ends before them, as the owner's high watermark would;
* offsets come from the files alone: the log start offset is the first segment's base offset
  (retention deletes whole segments) or, when larger, the offset DeleteRecords moved it to
  (``log-start-offset``, see ``partition.py``); the records below it are never yielded; the
  end offset is the offset after the last whole batch.

The ``.index`` file only speeds up finding where to start; an entry that does not name the
batch it points at is ignored and the segment is walked from its start.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamkit._core.errors import ConfigError
from streamkit.log.errors import CorruptRecordError, UnknownTopicError
from streamkit.log.index import OFFSET_ENTRY
from streamkit.log.partition import read_log_start_offset
from streamkit.log.records import (
    BATCH_OVERHEAD,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    crc32c,
    decode_records,
    parse_header,
)

_LOG_FILE = re.compile(r"^(\d{20})\.log$")


class CorruptSegmentError(CorruptRecordError):
    """A segment file holds damaged bytes where a batch should be."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path} at position {position}: {reason}")
        self.path = path
        self.position = position


@dataclass(frozen=True, slots=True)
class SegmentFile:
    base_offset: int
    path: Path


def topic_partition_count(data_dir: str | os.PathLike[str], topic: str) -> int:
    """How many partitions ``topic`` has, from the directory's topic metadata.

    Raises ``ConfigError`` when ``data_dir`` is not a data directory and
    ``UnknownTopicError`` when it holds no topic of that name.
    """
    root = Path(data_dir)
    if not root.is_dir():
        raise ConfigError(f"no data directory at {root}")
    path = root / ".meta" / "topics" / f"{topic}.json"
    try:
        meta = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise UnknownTopicError(f"no topic {topic!r} in data directory {root}") from None
    except ValueError as exc:
        raise ConfigError(f"unreadable topic metadata {path}: {exc}") from exc
    partitions = meta.get("partitions") if isinstance(meta, dict) else None
    if not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(f"unreadable topic metadata {path}: no partition count")
    return partitions


def list_segments(data_dir: str | os.PathLike[str], topic: str, partition: int) -> list[SegmentFile]:
    """The ``.log`` files of one partition, in offset order."""
    directory = Path(data_dir) / f"{topic}-{partition}"
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        raise UnknownTopicError(f"no partition directory {directory}") from None
    found = [(int(m.group(1)), directory / name) for name in names if (m := _LOG_FILE.match(name))]
    return [SegmentFile(base, path) for base, path in sorted(found)]


def partition_bounds(data_dir: str | os.PathLike[str], topic: str, partition: int) -> tuple[int, int]:
    """(log start offset, end offset) of one partition as its files hold it now.

    The end offset is the offset after the last whole batch (Kafka's log end offset); batches
    are CRC-checked only when read, not here.
    """
    segments = list_segments(data_dir, topic, partition)
    if not segments:
        return 0, 0
    start = max(segments[0].base_offset, _deleted_below(data_dir, topic, partition))
    # A segment is created at the log end offset: an empty last one's base offset is the end.
    newest = segments[-1].base_offset
    for seg in reversed(segments):
        end = _segment_end(seg, last=seg is segments[-1])
        if end is not None:
            end = max(newest, end)
            return min(start, end), end
    return min(start, newest), newest


def _deleted_below(data_dir: str | os.PathLike[str], topic: str, partition: int) -> int:
    return read_log_start_offset(Path(data_dir) / f"{topic}-{partition}")


def _segment_end(seg: SegmentFile, *, last: bool) -> int | None:
    """The offset after the segment's last batch; None when the segment holds no batch."""
    end: int | None = None
    # Start at the last indexed batch: only the batches after it are walked.
    for _pos, header in _walk(seg, _start_position(seg, 2**63 - 1), last=last, verify_crc=False):
        end = header.next_offset
    return end


def read_batches(
    data_dir: str | os.PathLike[str],
    topic: str,
    partition: int,
    start_offset: int,
    end_offset: int | None = None,
    *,
    include_control: bool = False,
    views: bool = False,
) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
    """The CRC-checked batches holding offsets in ``[start_offset, end_offset)``, in order.

    A batch that straddles a bound is yielded whole: the caller drops the records outside.
    ``end_offset`` None reads to the end of the files as they are when the read gets there.
    With ``views`` each batch is a view into the segment's mapping instead of a copy, valid
    until the next batch is asked for (then released): for a caller that copies what it keeps.
    A view it still holds (or a slice of one) when the segment is done makes the read fail.
    """
    segments = list_segments(data_dir, topic, partition)
    start_offset = max(start_offset, _deleted_below(data_dir, topic, partition))
    for i, seg in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if nxt is not None and nxt <= start_offset:
            continue  # every offset of this segment lies before the start
        if end_offset is not None and seg.base_offset >= end_offset:
            return
        position = _start_position(seg, start_offset)
        for _pos, header, data in _walk_data(seg, position, last=nxt is None, views=views):
            if header.next_offset <= start_offset:
                continue
            if end_offset is not None and header.base_offset >= end_offset:
                return
            if header.is_control and not include_control:
                continue
            yield header, data


def offset_for_timestamp(
    data_dir: str | os.PathLike[str], topic: str, partition: int, timestamp: int
) -> int | None:
    """The first offset whose record's timestamp is >= ``timestamp`` (Kafka's ListOffsets
    lookup), or None when no record is that late. Records below the log start offset count
    as deleted."""
    segments = list_segments(data_dir, topic, partition)
    start = _deleted_below(data_dir, topic, partition)
    for seg in segments:
        for _pos, header, data in _walk_data(seg, 0, last=seg is segments[-1]):
            if header.max_timestamp < timestamp or header.is_control or header.next_offset <= start:
                continue
            for record in decode_records(header, data):
                if record.timestamp >= timestamp and record.offset >= start:
                    return record.offset
    return None


def _start_position(seg: SegmentFile, start_offset: int) -> int:
    """A batch start at or before the batch holding ``start_offset``, from the ``.index``."""
    if start_offset <= seg.base_offset:
        return 0
    index_path = seg.path.with_suffix(".index")
    try:
        raw = index_path.read_bytes()
    except FileNotFoundError:
        return 0
    best = 0
    whole = len(raw) - len(raw) % OFFSET_ENTRY.size
    for rel, pos in OFFSET_ENTRY.iter_unpack(raw[:whole]):
        if seg.base_offset + rel >= start_offset:
            break
        best = pos
    if best and not _names_a_batch(seg.path, best):
        return 0
    return best


def _names_a_batch(path: Path, position: int) -> bool:
    with open(path, "rb") as f:
        f.seek(position)
        head = f.read(BATCH_OVERHEAD)
    if len(head) < BATCH_OVERHEAD:
        return False
    header = parse_header(head)
    return header.magic == MAGIC and header.batch_length >= BATCH_OVERHEAD - LOG_OVERHEAD


def _walk(
    seg: SegmentFile, position: int, *, last: bool, verify_crc: bool
) -> Iterator[tuple[int, BatchHeader]]:
    for pos, header, _data in _walk_data(seg, position, last=last, verify_crc=verify_crc):
        yield pos, header


def _walk_data(
    seg: SegmentFile, position: int, *, last: bool, verify_crc: bool = True, views: bool = False
) -> Iterator[tuple[int, BatchHeader, bytes | memoryview]]:
    """Every batch of a segment from ``position``; raises ``CorruptSegmentError`` on damage."""
    try:
        f = open(seg.path, "rb")  # noqa: SIM115  (closed by the with below)
    except FileNotFoundError:
        # Retention or compaction removed it since the listing: its offsets are gone.
        raise CorruptSegmentError(seg.path, position, "segment was deleted while being read") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size <= position:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            pos = position
            while pos < size:
                left = size - pos
                if left < BATCH_OVERHEAD:
                    if last:
                        return  # an append in progress
                    raise CorruptSegmentError(seg.path, pos, f"{left} bytes are too few for a batch")
                header = parse_header(memoryview(mm), pos)
                if header.batch_length < BATCH_OVERHEAD - LOG_OVERHEAD:
                    raise CorruptSegmentError(
                        seg.path, pos, f"batch length field {header.batch_length} is too small"
                    )
                if header.magic != MAGIC:
                    raise CorruptSegmentError(seg.path, pos, f"batch magic is {header.magic}, not {MAGIC}")
                if header.size > left:
                    if last:
                        return  # an append in progress
                    raise CorruptSegmentError(
                        seg.path, pos, f"batch of {header.size} bytes runs past the end of the file"
                    )
                data: bytes | memoryview
                if verify_crc:
                    data = memoryview(mm)[pos : pos + header.size] if views else mm[pos : pos + header.size]
                    actual = crc32c(memoryview(data)[CRC_START:])
                    if actual != header.crc:
                        if isinstance(data, memoryview):
                            data.release()  # else the mapping cannot close under the error
                        raise CorruptSegmentError(
                            seg.path,
                            pos,
                            f"batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}",
                        )
                else:
                    data = b""
                try:
                    yield pos, header, data
                finally:
                    if isinstance(data, memoryview):
                        data.release()  # lets the mapping close
                pos += header.size
