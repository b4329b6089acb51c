"""One log segment: ``<base offset, 20 digits>.log`` with its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of record batches exactly as they were appended
(base offset stamped). Invariants:

* batches are whole and in offset order; ``size`` only ever covers whole appended batches,
  so a reader that snapshots ``size`` never sees a half-written batch;
* a segment is appended to only while it is its partition's active (last) segment; once
  rolled it is flushed and never changes again, except by the compactor's atomic swap;
* every batch served by ``read`` has passed its CRC check: a damaged byte on disk raises
  ``CorruptRecordError``, it is never returned.

A segment is opened in one of two ways: trusting its indexes (a clean shutdown, or a segment
older than the active one) or recovering it (scan every batch, check sizes, magic, CRC and
offset order, truncate a torn or corrupt tail, rebuild both indexes).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamkit.log.errors import CorruptRecordError, InvalidRecordError
from streamkit.log.index import OffsetIndex, TimeIndex
from streamkit.log.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    BatchHeader,
    batch_extent,
    check_batch,
    crc32c,
    parse_header,
)

_WALK_CHUNK = 64 * 1024
_RECOVER_CHUNK = 4 * 1024 * 1024
_MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery found wrong with a segment and what it did about it."""

    path: str
    truncated_bytes: int
    from_offset: int
    reason: str
    indexes_rebuilt: bool

    def __str__(self) -> str:
        if self.truncated_bytes:
            return (
                f"{self.path}: truncated {self.truncated_bytes} bytes from offset "
                f"{self.from_offset} ({self.reason})"
            )
        return f"{self.path}: rebuilt indexes ({self.reason})"


class Segment:
    """A segment of one partition. Not thread-safe for writers; readers may run alongside."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        name = segment_name(base_offset)
        self.log_path = directory / f"{name}.log"
        self.index_path = directory / f"{name}.index"
        self.timeindex_path = directory / f"{name}.timeindex"
        self.index_interval_bytes = index_interval_bytes
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset - 1
        self.first_batch_timestamp = -1
        self.index = OffsetIndex(self.index_path, base_offset)
        self.time_index = TimeIndex(self.timeindex_path, base_offset)
        self._bytes_since_index = 0
        self._fd = -1
        self._dirty = False

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int) -> Segment:
        seg = cls(directory, base_offset, index_interval_bytes)
        seg._open_fd()
        os.ftruncate(seg._fd, 0)
        for path in (seg.index_path, seg.timeindex_path):
            path.write_bytes(b"")
        return seg

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, *, recover: bool
    ) -> tuple[Segment, RecoveryReport | None]:
        seg = cls(directory, base_offset, index_interval_bytes)
        seg._open_fd()
        seg.size = os.fstat(seg._fd).st_size
        if recover:
            return seg, seg._recover("unclean shutdown")
        index = OffsetIndex.load(seg.index_path, base_offset, seg.size)
        if index is None:
            return seg, seg._recover("offset index missing or inconsistent")
        seg.index = index
        start = 0
        last = index.last_entry()
        if last is not None:
            seg.next_offset = last[0] + 1
            start = last[1]
        # Walk the batches after the last index entry to learn where the segment ends.
        end = start
        for pos, header in seg._walk(start, seg.size):
            expected_last = last[0] if last is not None and pos == start else None
            if (expected_last is not None and header.last_offset != expected_last) or (
                expected_last is None and header.base_offset < seg.next_offset
            ):
                return seg, seg._recover("index disagrees with the log")
            seg.next_offset = header.next_offset
            seg._note_timestamp(header)
            end = pos + header.size
        if end != seg.size or (seg.size and last is None):
            return seg, seg._recover("log does not end on a batch boundary")
        time_index = TimeIndex.load(seg.timeindex_path, base_offset, seg.next_offset - base_offset)
        if time_index is None:
            return seg, seg._recover("time index missing or inconsistent")
        seg.time_index = time_index
        if time_index.max_timestamp > seg.max_timestamp:
            seg.max_timestamp = time_index.max_timestamp
        seg._bytes_since_index = seg.size - (last[1] if last else 0)
        if seg.size:
            seg.first_batch_timestamp = parse_header(os.pread(seg._fd, BATCH_OVERHEAD, 0)).max_timestamp
        return seg, None

    def _open_fd(self) -> None:
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        # Readers may hold this segment after retention removed it; the descriptor closes
        # when the last of them lets go (POSIX keeps an unlinked file readable).
        weakref.finalize(self, _close_quietly, self._fd)

    def _recover(self, reason: str) -> RecoveryReport | None:
        """Scan every batch, keep the valid prefix, rebuild indexes."""
        self.index = OffsetIndex(self.index_path, self.base_offset)
        self.time_index = TimeIndex(self.timeindex_path, self.base_offset)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset - 1
        self.first_batch_timestamp = -1
        self._bytes_since_index = 0
        file_size = self.size
        valid_end = 0
        problem = ""
        pos = 0
        for pos, header, view in self._walk_bodies(0, file_size):
            try:
                check_batch(view)
            except InvalidRecordError as exc:
                problem = str(exc)
                break
            if header.base_offset < self.next_offset:
                problem = f"batch at position {pos} goes back to offset {header.base_offset}"
                break
            self._index_batch(header, pos)
            valid_end = pos + header.size
        else:
            pos = valid_end
        if valid_end < file_size and not problem:
            problem = "torn batch at the end of the log"
        truncated = file_size - valid_end
        if truncated:
            os.ftruncate(self._fd, valid_end)
            os.fsync(self._fd)
        self.size = valid_end
        self.index.rewrite()
        self.time_index.rewrite()
        if not truncated and reason == "unclean shutdown":
            return None
        return RecoveryReport(
            path=str(self.log_path),
            truncated_bytes=truncated,
            from_offset=self.next_offset,
            reason=problem or reason,
            indexes_rebuilt=True,
        )

    # -- walking batches -------------------------------------------------------------------

    def _walk(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch in [start, end), reading headers only."""
        pos = start
        buf = b""
        buf_start = start
        while pos + BATCH_OVERHEAD <= end:
            rel = pos - buf_start
            if rel < 0 or rel + BATCH_OVERHEAD > len(buf):
                buf = os.pread(self._fd, min(_WALK_CHUNK, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < BATCH_OVERHEAD:
                    return
            header = parse_header(buf, rel)
            if header.batch_length < _MIN_BATCH_LENGTH or pos + header.size > end:
                return
            yield pos, header
            pos += header.size

    def _walk_bodies(
        self, start: int, end: int
    ) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Like ``_walk`` but with each batch's bytes, read in large chunks."""
        pos = start
        buf = b""
        buf_start = start
        while pos + BATCH_OVERHEAD <= end:
            rel = pos - buf_start
            if rel + BATCH_OVERHEAD > len(buf):
                buf = os.pread(self._fd, min(_RECOVER_CHUNK, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < BATCH_OVERHEAD:
                    return
            header = parse_header(buf, rel)
            size = header.size
            if header.batch_length < _MIN_BATCH_LENGTH or pos + size > end:
                return
            if rel + size > len(buf):
                buf = os.pread(self._fd, max(min(_RECOVER_CHUNK, end - pos), size), pos)
                buf_start, rel = pos, 0
                if len(buf) < size:
                    return
            yield pos, header, memoryview(buf)[rel : rel + size]
            pos += size

    def batches(self, start_position: int = 0) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """Every batch from ``start_position`` with its bytes (for dump, verify, compaction)."""
        return self._walk_bodies(start_position, self.size)

    # -- appending -------------------------------------------------------------------------

    def append(self, header: BatchHeader, data: bytes | memoryview, base_offset: int) -> int:
        """Append one checked batch, writing ``base_offset`` into its first 8 bytes.

        ``header`` is the batch's header as parsed before stamping. Returns the position.
        """
        position = self.size
        stamp = base_offset.to_bytes(8, "big", signed=True)
        rest = memoryview(data)[8:]
        parts: list[bytes | memoryview] = [stamp, rest]
        total = len(data)
        written = os.writev(self._fd, parts)
        if written < total:  # a short write (full disk, signal): finish it or fail loudly
            full = stamp + bytes(rest)
            while written < total:
                written += os.write(self._fd, full[written:])
        stamped_last = base_offset + header.last_offset_delta
        self._dirty = True
        self.size = position + total
        self.next_offset = stamped_last + 1
        if self.first_batch_timestamp < 0:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = stamped_last
        self._bytes_since_index += total
        if self._bytes_since_index >= self.index_interval_bytes or position == 0:
            self.index.append(stamped_last, position)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        return position

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        self.next_offset = header.next_offset
        if self.first_batch_timestamp < 0:
            self.first_batch_timestamp = header.max_timestamp
        self._note_timestamp(header)
        self._bytes_since_index += header.size
        if self._bytes_since_index >= self.index_interval_bytes or position == 0:
            self.index.append(header.last_offset, position)
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0

    def _note_timestamp(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset

    # -- reading ---------------------------------------------------------------------------

    def find_position(self, offset: int, end: int | None = None) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``."""
        limit = self.size if end is None else end
        _, start = self.index.lookup(offset)
        for pos, header in self._walk(start, limit):
            if header.last_offset >= offset:
                return pos, header
        return None

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> bytes:
        """Whole batches starting with the one that holds ``offset``, up to ``max_bytes``.

        With ``min_one`` the first batch is returned whole even when it is larger than
        ``max_bytes`` (KIP-74), so a consumer always makes progress. Each batch's CRC is
        checked before it is returned.
        """
        end = self.size
        found = self.find_position(offset, end)
        if found is None:
            return b""
        start, first = found
        want = min(max_bytes, end - start)
        if want < first.size:
            if not min_one:
                return b""
            want = first.size
        data = os.pread(self._fd, want, start)
        view = memoryview(data)
        pos = 0
        n = len(data)
        while pos + LOG_OVERHEAD <= n:
            _, size = batch_extent(data, pos)
            if pos + size > n:
                break
            if size < BATCH_OVERHEAD or view[pos + 16] != 2:
                raise self._corrupt(start + pos, "bad batch length or magic")
            stored = int.from_bytes(view[pos + 17 : pos + 21], "big")
            if crc32c(view[pos + 21 : pos + size]) != stored:
                raise self._corrupt(start + pos, "CRC mismatch")
            pos += size
        if pos == 0:
            raise self._corrupt(start, "batch shorter than its length field")
        return data if pos == n else data[:pos]

    def _corrupt(self, position: int, what: str) -> CorruptRecordError:
        return CorruptRecordError(f"{self.log_path} at position {position}: {what}")

    def read_batch_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    # -- upkeep ----------------------------------------------------------------------------

    def flush(self, *, fsync: bool = True) -> None:
        if fsync and self._dirty:
            os.fsync(self._fd)
        self._dirty = False
        self.index.flush(fsync=fsync)
        self.time_index.flush(fsync=fsync)

    def seal(self) -> None:
        """The segment stops being active: index its final max timestamp and flush it all."""
        if self.max_timestamp >= 0:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
        self._dirty = True
        self.flush(fsync=True)

    def truncate_to(self, offset: int) -> None:
        """Remove batches at and after ``offset`` (which must be a batch boundary)."""
        found = self.find_position(offset)
        if found is None:
            return
        position = found[0]
        os.ftruncate(self._fd, position)
        os.fsync(self._fd)
        self.size = position
        self._recover("truncation")

    def close(self) -> None:
        self.flush(fsync=True)

    def delete(self) -> None:
        for path in (self.log_path, self.index_path, self.timeindex_path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    @property
    def is_empty(self) -> bool:
        return self.size == 0


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
