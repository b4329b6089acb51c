"""One log segment: ``<base offset, 20 digits>.log`` with its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of record batches exactly as they were appended
(base offset stamped). Invariants:

* batches are whole and in offset order; ``size`` only ever covers whole appended batches,
  so a reader that snapshots ``size`` never sees a half-written batch;
* a segment is appended to only while it is its partition's active (last) segment; once
  rolled it is flushed and never changes again, except by the compactor's atomic swap;
* every batch served by ``read`` has passed its CRC check: a damaged byte on disk raises
  ``CorruptRecordError``, it is never returned;
* ``read_range`` may instead name a file range to be sent as it is (``FileRange``, for
  ``sendfile``), but only inside the segment's *verified ranges*: bytes this process has
  CRC-checked already, because it appended them after checking them, recovery scanned them,
  or an earlier ``read`` checked them. Anything else goes through ``read`` and, once checked,
  joins the verified ranges. A byte that is never checked in this process is never sent;
  what is not rechecked is a verified byte that changes under the page cache afterwards,
  which is what Kafka (that never checks on fetch) accepts for every byte;
* a read never silently skips data: a break in the batch structure (length, magic, base
  offsets out of order) raises ``CorruptRecordError`` too; an index entry that does not name
  the batch it points at is distrusted (lookups scan from the start; the next open rebuilds).

A segment is opened in one of two ways: trusting its indexes (a clean shutdown, or a segment
older than the active one) or recovering it (scan every batch, check sizes, magic, CRC and
offset order, truncate a torn or corrupt tail, rebuild both indexes). The active segment
recovers strictly: its batches must follow each other exactly, the first bad one ends it. A
closed segment whose indexes must be rebuilt was fsynced whole when it was sealed and may
have compaction gaps: a batch failing its CRC there is kept (reads of it raise) instead of
cutting off the acknowledged batches behind it.

Not checked on a trusting open: bytes no CRC covers (base offset, partition leader epoch) of
batches the open does not walk. As in Kafka, a clean shutdown is trusted.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamkit.log.errors import CorruptRecordError, InvalidRecordError, LogClosedError
from streamkit.log.index import OffsetIndex, TimeIndex
from streamkit.log.records import (
    BATCH_OVERHEAD,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    batch_extent,
    check_batch,
    crc32c,
    parse_header,
)

_WALK_CHUNK = 64 * 1024
_FIRST_WALK_CHUNK = 8 * 1024  # an index entry is ~index.interval.bytes before its target
_RECOVER_CHUNK = 4 * 1024 * 1024
_MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD
_MAX_RELATIVE_OFFSET = 2**31 - 1  # index entries hold offsets relative to the base as INT32


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What recovery found wrong with a segment and what it did about it.

    ``truncated_bytes`` from offset ``from_offset`` on were cut off (``repaired``), or, in a
    read-only open, cannot be read and were left as they are. ``lost_to_offset`` is the last
    offset those bytes held when an intact (CRC-checked) batch in them names it, else None.
    ``damaged`` says the segment holds bytes no reader gets: cut, unreadable, or batches
    kept although they fail their CRC; a report that is not ``damaged`` only rebuilt indexes.
    """

    path: str
    truncated_bytes: int
    from_offset: int
    reason: str
    indexes_rebuilt: bool
    lost_to_offset: int | None = None
    repaired: bool = True
    damaged: bool = False

    @property
    def data_loss(self) -> bool:
        """Recovery cut acknowledged-looking bytes off the log for good."""
        return self.repaired and self.truncated_bytes > 0

    def lost_offsets(self) -> str:
        if self.lost_to_offset is not None and self.lost_to_offset >= self.from_offset:
            return f"offsets {self.from_offset}..{self.lost_to_offset}"
        return f"offsets from {self.from_offset} on"

    def __str__(self) -> str:
        if self.data_loss:
            return (
                f"{self.path}: DATA LOSS: truncated {self.truncated_bytes} bytes, "
                f"{self.lost_offsets()} lost ({self.reason})"
            )
        if not self.repaired and self.damaged:
            unreadable = (
                f"{self.truncated_bytes} bytes ({self.lost_offsets()}) cannot be read; "
                if self.truncated_bytes
                else ""
            )
            return (
                f"{self.path}: damaged: {unreadable}{self.reason}; left as it is (opened "
                "read-only: only a process that opens the directory for writing repairs it)"
            )
        if not self.repaired:
            return f"{self.path}: indexes rebuilt in memory only ({self.reason})"
        return f"{self.path}: rebuilt indexes ({self.reason})"


class VerifiedRanges:
    """Disjoint, sorted byte ranges [start, end) of a segment whose batches passed a CRC check.

    Adjacent ranges merge, so a partition appended to and read in order keeps one range. The
    ranges are replaced, never mutated, under a lock: readers look them up without one.
    """

    def __init__(self) -> None:
        self._ranges: tuple[list[int], list[int]] = ([], [])  # (starts, ends), swapped whole
        self._lock = threading.Lock()

    def covers(self, start: int, end: int) -> bool:
        starts, ends = self._ranges
        i = bisect.bisect_right(starts, start) - 1
        return i >= 0 and ends[i] >= end

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        with self._lock:
            starts, ends = (list(r) for r in self._ranges)
            i = bisect.bisect_left(ends, start)  # first range that ends at or after ``start``
            j = bisect.bisect_right(starts, end)  # ranges before j start at or before ``end``
            if i < j:
                start = min(start, starts[i])
                end = max(end, ends[j - 1])
            starts[i:j] = [start]
            ends[i:j] = [end]
            self._ranges = (starts, ends)

    def clear(self) -> None:
        with self._lock:
            self._ranges = ([], [])

    def as_list(self) -> list[tuple[int, int]]:
        return list(zip(*self._ranges, strict=True))


@dataclass(frozen=True, slots=True)
class FileRange:
    """Whole batches at [position, position + size) of a segment's ``.log``, already verified.

    Holding it keeps the segment (and so its open descriptor) alive: the bytes stay readable
    even if retention or the compactor removes the file meanwhile.
    """

    segment: Segment
    position: int
    size: int

    def __len__(self) -> int:
        return self.size

    def fileno(self) -> int:
        return self.segment.fileno()

    def read(self) -> bytes:
        """The bytes themselves (for a transport that cannot send from a file)."""
        return self.segment.read_batch_at(self.position, self.size)

    def headers(self) -> Iterator[tuple[int, BatchHeader]]:
        """(position within the range, header) of each batch, reading headers only."""
        for pos, header in self.segment._walk(self.position, self.position + self.size):
            yield pos - self.position, header


class Segment:
    """A segment of one partition. Not thread-safe for writers; readers may run alongside."""

    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, *, read_only: bool = False
    ) -> None:
        self.directory = directory
        self.read_only = read_only
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
        self._file = _FileHandle()
        weakref.finalize(self, self._file.close)
        self._dirty = False
        self._index_suspect = False
        self.verified = VerifiedRanges()

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int) -> Segment:
        seg = cls(directory, base_offset, index_interval_bytes)
        os.ftruncate(seg._fd, 0)
        for path in (seg.index_path, seg.timeindex_path):
            path.write_bytes(b"")
        seg._file.close()  # opened again on first use: an idle partition holds no descriptor
        return seg

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        *,
        recover: bool,
        closed: bool = False,
        read_only: bool = False,
    ) -> tuple[Segment, RecoveryReport | None]:
        """Open an existing segment.

        ``recover`` scans and checks every batch (the active segment after an unclean
        shutdown). Otherwise the indexes are trusted when they agree with the log, and
        rebuilt when they do not. ``closed`` says the segment is not the active one: its
        bytes were fsynced when it was sealed and compaction may have left offset gaps in
        it, so a rebuild accepts gaps and keeps a batch whose CRC fails (reads of it raise
        ``CorruptRecordError``) rather than dropping the acknowledged batches behind it; only
        a break in the batch structure truncates. The active segment must be contiguous.

        ``read_only`` never writes: the file is opened read-only, a rebuild happens in memory
        (as for a closed segment: damaged batches are kept, and reads of them raise) and a
        broken tail is left in place, only no longer read. The report says what is damaged.

        The file is closed again before this returns; the first read or append reopens it,
        so a data directory of many idle partitions holds few descriptors.
        """
        seg = cls(directory, base_offset, index_interval_bytes, read_only=read_only)
        try:
            seg.size = os.fstat(seg._fd).st_size
            if recover:
                return seg, seg._recover("unclean shutdown", closed=closed or read_only)
            problem = seg._open_trusting_indexes()
            if problem is None:
                return seg, None
            return seg, seg._recover(problem, closed=closed or read_only)
        finally:
            seg._file.close()

    def _open_trusting_indexes(self) -> str | None:
        """Load the indexes and learn the segment's end; the reason to rebuild, or None."""
        base_offset = self.base_offset
        index = OffsetIndex.load(self.index_path, base_offset, self.size)
        if index is None:
            return "offset index missing or inconsistent"
        self.index = index
        start = 0
        last = index.last_entry()
        if last is not None:
            self.next_offset = last[0] + 1
            start = last[1]
        # Walk the batches after the last index entry to learn where the segment ends.
        end = start
        for pos, header in self._walk(start, self.size):
            expected_last = last[0] if last is not None and pos == start else None
            if (expected_last is not None and header.last_offset != expected_last) or (
                expected_last is None and header.base_offset < self.next_offset
            ):
                return "index disagrees with the log"
            self.next_offset = header.next_offset
            self._note_timestamp(header)
            end = pos + header.size
        if end != self.size or (self.size and last is None):
            return "log does not end on a batch boundary"
        time_index = TimeIndex.load(
            self.timeindex_path, base_offset, self.next_offset - 1 - base_offset
        )
        if time_index is None:
            return "time index missing or inconsistent"
        last_time = time_index.last_entry()
        if last_time is not None:
            # The newest entry gives the segment's max timestamp (retention, time lookups):
            # it must name a real batch that carries that timestamp.
            try:
                found = self.find_position(last_time[1])
            except CorruptRecordError:
                found = None
            if found is None or (found[1].last_offset, found[1].max_timestamp) != (
                last_time[1],
                last_time[0],
            ):
                return "time index disagrees with the log"
            if last_time[0] > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = last_time
        self.time_index = time_index
        self._bytes_since_index = self.size - (last[1] if last else 0)
        if self.size:
            self.first_batch_timestamp = parse_header(os.pread(self._fd, BATCH_OVERHEAD, 0)).max_timestamp
        return None

    @classmethod
    def load_replacement(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, source: Path
    ) -> Segment:
        """A closed segment read from ``source`` (the compactor's ``.cleaned`` file), with
        its indexes built in memory only, ready to take the place of ``<base>.log``.

        The scan runs before any lock is taken. The caller renames ``source`` over the
        segment's ``.log`` (the open descriptor follows the file) and then calls
        ``write_indexes``.
        """
        seg = cls(directory, base_offset, index_interval_bytes)
        seg._file.open(source, read_only=False)
        seg.size = os.fstat(seg._fd).st_size
        seg._recover("compacted", closed=True, write_indexes=False)
        return seg

    def write_indexes(self) -> None:
        """Write both index files whole, with the final max-timestamp entry, and fsync them."""
        if self.max_timestamp >= 0:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
        self.index.rewrite()
        self.time_index.rewrite()

    @property
    def _fd(self) -> int:
        """The ``.log`` file's descriptor, opened on first use.

        Once open it stays open for the segment's life: readers may hold this segment after
        retention or the compactor removed its file, and the descriptor closes when the last
        of them lets go (POSIX keeps an unlinked file readable). ``delete`` and the
        compactor's swap open it first for that reason.
        """
        fd = self._file.fd
        if fd < 0:
            fd = self._file.open(self.log_path, read_only=self.read_only)
        return fd

    def _recover(
        self, reason: str, *, closed: bool = False, write_indexes: bool = True
    ) -> RecoveryReport | None:
        """Scan every batch, keep the valid prefix, rebuild indexes.

        The active segment (``closed`` false) was written by appends alone, so its batches
        are contiguous: a batch that does not start exactly where the previous one ended, or
        fails its CRC, ends the valid prefix. A closed segment may have gaps (compaction), and
        a batch in it that is whole and in order but fails its CRC is kept and indexed (reads
        of it raise) rather than dropping the acknowledged batches behind it.
        """
        self.index = OffsetIndex(self.index_path, self.base_offset)
        self.time_index = TimeIndex(self.timeindex_path, self.base_offset)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset - 1
        self.first_batch_timestamp = -1
        self._bytes_since_index = 0
        self._index_suspect = False
        self.verified.clear()
        verified_from = 0  # where the current run of CRC-checked batches began
        file_size = self.size
        valid_end = 0
        problem = ""
        kept_corrupt: list[int] = []
        for pos, header, view in self._walk_bodies(0, file_size):
            crc_ok = crc32c(view[CRC_START:]) == header.crc
            if closed and not crc_ok and header.magic == MAGIC:
                # Damaged, but its length and magic still frame it: keep it and the batches
                # behind it. Nothing the CRC covers (its offset delta) can be believed, so it
                # gets no index entry; readers bound it by the next batch's base offset.
                if header.base_offset < self.next_offset:
                    problem = (
                        f"batch at position {pos} starts at offset {header.base_offset}, "
                        f"expected at least {self.next_offset}"
                    )
                    break
                kept_corrupt.append(header.base_offset)
                self.verified.add(verified_from, pos)
                verified_from = pos + header.size
                self.next_offset = header.base_offset + 1
                self._bytes_since_index += header.size
                valid_end = pos + header.size
                continue
            try:
                check_batch(view, verify_crc=False)
            except InvalidRecordError as exc:
                problem = f"batch at position {pos}: {exc}"
                break
            if header.base_offset < self.next_offset or (
                not closed and header.base_offset != self.next_offset
            ):
                problem = (
                    f"batch at position {pos} starts at offset {header.base_offset}, "
                    f"expected {self.next_offset}"
                )
                break
            if header.last_offset - self.base_offset > _MAX_RELATIVE_OFFSET:
                problem = f"batch at position {pos} ends at offset {header.last_offset}, out of the segment's range"
                break
            if not crc_ok:
                problem = f"batch at position {pos}: CRC mismatch"
                break
            self._index_batch(header, pos)
            valid_end = pos + header.size
        self.verified.add(verified_from, valid_end)
        if valid_end < file_size and not problem:
            problem = "torn batch at the end of the log"
        if kept_corrupt:
            problem = "; ".join(
                [p for p in (problem,) if p]
                + [f"batches failing their CRC kept at offsets {kept_corrupt} (reads of them fail)"]
            )
        truncated = file_size - valid_end
        lost_to = self._last_intact_offset(valid_end, file_size) if truncated else None
        if truncated and not self.read_only:
            os.ftruncate(self._fd, valid_end)
            os.fsync(self._fd)
        self.size = valid_end
        if write_indexes and not self.read_only:
            self.index.rewrite()
            self.time_index.rewrite()
        if not truncated and not kept_corrupt and reason == "unclean shutdown":
            return None
        return RecoveryReport(
            path=str(self.log_path),
            truncated_bytes=truncated,
            from_offset=self.next_offset,
            reason=problem or reason,
            indexes_rebuilt=True,
            lost_to_offset=lost_to,
            repaired=not self.read_only,
            damaged=bool(truncated or kept_corrupt),
        )

    def _last_intact_offset(self, start: int, end: int) -> int | None:
        """The last offset of the last batch in [start, end) that passes its CRC, if any.

        Recovery cuts at ``start``; this says how far the loss goes. Only CRC-checked headers
        are believed (a damaged one can claim any offset); the walk follows length fields
        and stops where they no longer frame a batch.
        """
        last: int | None = None
        for _pos, header, view in self._walk_bodies(start, end):
            if header.magic == MAGIC and crc32c(view[CRC_START:]) == header.crc:
                last = header.last_offset
        return last

    # -- walking batches -------------------------------------------------------------------

    def _walk(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch in [start, end), reading headers only.

        Small batches are read many to a chunk; past a batch larger than a chunk only the next
        header (61 bytes) is read, so walking big batches does not read their bodies.
        """
        pos = start
        buf = b""
        buf_start = start
        chunk = _FIRST_WALK_CHUNK
        while pos + BATCH_OVERHEAD <= end:
            rel = pos - buf_start
            if rel < 0 or rel + BATCH_OVERHEAD > len(buf):
                buf = os.pread(self._fd, min(chunk, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < BATCH_OVERHEAD:
                    return
            header = parse_header(buf, rel)
            if header.batch_length < _MIN_BATCH_LENGTH or pos + header.size > end:
                return
            yield pos, header
            pos += header.size
            chunk = BATCH_OVERHEAD if header.size > _WALK_CHUNK else _WALK_CHUNK

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

    def append(
        self, header: BatchHeader, data: bytes | memoryview, base_offset: int, *, crc_checked: bool = False
    ) -> int:
        """Append one checked batch, writing ``base_offset`` into its first 8 bytes.

        ``header`` is the batch's header as parsed before stamping. ``crc_checked`` says the
        caller verified the batch's CRC on exactly these bytes: they join the verified ranges.
        Returns the position.
        """
        if self.read_only:
            raise LogClosedError(f"{self.log_path} is open read-only")
        position = self.size
        stamp = base_offset.to_bytes(8, "big", signed=True)
        rest = memoryview(data)[8:]
        parts: list[bytes | memoryview] = [stamp, rest]
        total = len(data)
        try:
            written = os.writev(self._fd, parts)
            if written < total:  # a short write (full disk, signal): finish it or fail loudly
                full = stamp + bytes(rest)
                while written < total:
                    written += os.write(self._fd, full[written:])
        except BaseException:
            # The file is opened O_APPEND: whatever part of the batch got written must go, or
            # every later batch would land after it, away from the positions we index.
            os.ftruncate(self._fd, position)
            raise
        stamped_last = base_offset + header.last_offset_delta
        self._dirty = True
        if crc_checked:
            self.verified.add(position, position + total)
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
        """Position and header of the first batch whose last offset is >= ``offset``.

        The walk from the index entry reads headers only; it raises ``CorruptRecordError``
        when the batch structure breaks before ``end`` (a damaged length, magic or base
        offset), so damage is reported instead of silently ending the segment early. An index
        entry that does not name the batch it points at is not trusted again: lookups scan
        from the start of the segment, and the index is rebuilt on the next open.
        """
        limit = self.size if end is None else end
        start = 0
        indexed_last = self.base_offset - 1
        if not self._index_suspect:
            indexed_last, start = self.index.lookup(offset)
            if start >= limit:  # an entry for a batch appended after ``end`` was taken
                indexed_last, start = self.base_offset - 1, 0
        if start:
            first = self._header_at(start, limit)
            if first is None or first.last_offset != indexed_last:
                self._index_suspect = True
                start = 0
        # A batch covers offsets up to its last offset, but never into the next batch: a
        # damaged offset delta (kept in a closed segment, failing its CRC) must not hide the
        # batches behind it.
        previous: tuple[int, BatchHeader] | None = None
        for pos, header in self._scan(start, limit):
            if previous is not None and _covers(previous[1], offset, header.base_offset):
                return previous
            previous = pos, header
        if previous is not None and _covers(previous[1], offset, None):
            return previous
        return None

    def _header_at(self, position: int, limit: int) -> BatchHeader | None:
        if position + BATCH_OVERHEAD > limit:
            return None
        raw = os.pread(self._fd, BATCH_OVERHEAD, position)
        if len(raw) < BATCH_OVERHEAD:
            return None
        return parse_header(raw)

    def _scan(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """``_walk`` for readers: every batch up to ``end``, or ``CorruptRecordError``.

        Base offsets must strictly increase (a batch's offset delta is checked by its CRC
        when it is read, not here).
        """
        previous_base = self.base_offset - 1
        pos = start
        for pos, header in self._walk(start, end):
            if header.magic != MAGIC:
                raise self._corrupt(pos, f"batch magic is {header.magic}")
            if header.base_offset <= previous_base:
                raise self._corrupt(pos, f"batch base offset {header.base_offset} is out of order")
            previous_base = header.base_offset
            yield pos, header
            pos += header.size
        if pos < end:
            raise self._corrupt(pos, "batch length does not fit the segment")

    def _plan_read(self, offset: int, max_bytes: int, min_one: bool) -> tuple[int, int, BatchHeader, bool] | None:
        """(start, length, first header, ends on a batch boundary) of a read, or None.

        ``length`` is 0 when the first batch is over ``max_bytes`` and ``min_one`` is off.
        """
        end = self.size
        found = self.find_position(offset, end)
        if found is None:
            return None
        start, first = found
        want = min(max_bytes, end - start)
        on_boundary = start + want == end
        if want < first.size:
            if not min_one:
                return start, 0, first, True
            want = first.size
            on_boundary = True
        elif start + want < end and not self._index_suspect:
            # End the read on an indexed batch start: no partial last batch to trim and copy.
            boundary = self.index.boundary_before(start + want)
            if boundary >= start + first.size:
                want = boundary - start
                on_boundary = True
        return start, want, first, on_boundary

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> bytes:
        """Whole batches starting with the one that holds ``offset``, up to ``max_bytes``.

        With ``min_one`` the first batch is returned whole even when it is larger than
        ``max_bytes`` (KIP-74), so a consumer always makes progress. Each batch's CRC is
        checked before it is returned: a damaged first batch raises ``CorruptRecordError``;
        a damaged later one ends the data returned, so the next read starting there raises.
        """
        plan = self._plan_read(offset, max_bytes, min_one)
        if plan is None or not plan[1]:
            return b""
        return self._checked_read(plan[0], plan[1], plan[2])

    def read_range(self, offset: int, max_bytes: int) -> bytes | FileRange:
        """What ``read`` returns, as a ``FileRange`` when every byte of it is verified already.

        Otherwise the bytes are read and checked as by ``read`` (and become verified).
        """
        plan = self._plan_read(offset, max_bytes, True)
        if plan is None:
            return b""
        start, want, first, on_boundary = plan
        if on_boundary and not self._index_suspect and self.verified.covers(start, start + want):
            return FileRange(self, start, want)
        return self._checked_read(start, want, first)

    def _checked_read(self, start: int, want: int, first: BatchHeader) -> bytes:
        data = os.pread(self._fd, want, start)
        view = memoryview(data)
        pos = 0
        n = len(data)
        next_offset = first.base_offset
        while pos + BATCH_OVERHEAD <= n:
            base, size = batch_extent(data, pos)
            if pos + size > n and pos:
                break
            problem = ""
            if size < BATCH_OVERHEAD or pos + size > n or view[pos + 16] != MAGIC:
                problem = "bad batch length or magic"
            elif base < next_offset:
                problem = f"batch base offset {base} is out of order"
            elif crc32c(view[pos + CRC_START : pos + size]) != int.from_bytes(
                view[pos + 17 : pos + CRC_START], "big"
            ):
                problem = "CRC mismatch"
            if problem:
                if pos == 0:
                    raise self._corrupt(start, problem)
                break
            next_offset = base + int.from_bytes(view[pos + 23 : pos + 27], "big", signed=True) + 1
            pos += size
        if pos == 0:
            raise self._corrupt(start, "batch shorter than its length field")
        self.verified.add(start, start + pos)
        return data if pos == n else data[:pos]

    def _corrupt(self, position: int, what: str) -> CorruptRecordError:
        return CorruptRecordError(f"{self.log_path} at position {position}: {what}")

    def read_batch_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def fileno(self) -> int:
        return self._fd

    # -- upkeep ----------------------------------------------------------------------------

    def flush(self, *, fsync: bool = True, fsync_indexes: bool = False) -> None:
        """Write out what was appended; ``fsync`` makes the log's bytes durable.

        The indexes are written but fsynced only with ``fsync_indexes`` (sealing, closing):
        after an unclean shutdown the active segment's indexes are rebuilt from the log
        anyway, so an fsync of them per append would buy nothing.
        """
        if self.read_only:
            return
        if fsync and self._dirty:
            self._fsync_log()
        self._dirty = False
        self.index.flush(fsync=fsync and fsync_indexes)
        self.time_index.flush(fsync=fsync and fsync_indexes)

    def _fsync_log(self) -> None:
        if self._file.fd >= 0:
            os.fsync(self._file.fd)
            return
        # Not opened since recovery read it (``mark_dirty``): fsync without keeping it open.
        fd = os.open(self.log_path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def mark_dirty(self) -> None:
        """The next ``flush(fsync=True)`` must fsync even if nothing is appended before it."""
        self._dirty = True

    def seal(self, *, fsync: bool = True) -> None:
        """The segment stops being active: index its final max timestamp and write it all.

        With ``fsync=False`` the bytes are durable only after a later ``flush`` (the
        partition's flush policy); until then the partition's recovery point stays below it.
        """
        if self.max_timestamp >= 0:
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)
        self._dirty = True
        self.flush(fsync=fsync, fsync_indexes=fsync)
        self._dirty = not fsync

    def truncate_to(self, offset: int) -> None:
        """Remove batches at and after ``offset`` (which must be a batch boundary)."""
        if self.read_only:
            raise LogClosedError(f"{self.log_path} is open read-only")
        found = self.find_position(offset)
        if found is None:
            return
        position = found[0]
        os.ftruncate(self._fd, position)
        os.fsync(self._fd)
        self.size = position
        self._recover("truncation")

    def close(self) -> None:
        if self.read_only:
            self._file.close()
            return
        self.flush(fsync=True, fsync_indexes=True)
        if self._index_suspect:
            # A lookup found an entry that names the wrong batch: make the next open rebuild.
            self.index_path.unlink(missing_ok=True)

    def delete(self) -> None:
        if self.read_only:
            raise LogClosedError(f"{self.log_path} is open read-only")
        with contextlib.suppress(FileNotFoundError):
            self.fileno()  # readers holding this segment keep reading the unlinked file
        for path in (self.log_path, self.index_path, self.timeindex_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    @property
    def is_empty(self) -> bool:
        return self.size == 0


def _covers(header: BatchHeader, offset: int, next_base: int | None) -> bool:
    """Whether ``offset`` is at or before the end of the batch, bounded by its successor."""
    last = max(header.last_offset, header.base_offset)
    if next_base is not None:
        last = min(last, next_base - 1)
    return last >= offset


class _FileHandle:
    """A segment's ``.log`` descriptor, or -1 while it is closed (kept apart from the segment
    so the segment's finalizer can close it)."""

    __slots__ = ("_lock", "fd")

    def __init__(self) -> None:
        self.fd = -1
        self._lock = threading.Lock()

    def open(self, path: Path, *, read_only: bool) -> int:
        with self._lock:
            if self.fd < 0:
                flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT | os.O_APPEND
                self.fd = os.open(path, flags, 0o644)
            return self.fd

    def close(self) -> None:
        with self._lock:
            fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
