"""A partition: an ordered list of segments, the last one active.

Invariants:

* offsets are assigned here, densely, in append order: a batch of n records appended at log
  end offset L gets offsets L..L+n-1 and the log end offset becomes L+n;
* ``log_start_offset <= high_watermark``; the log start only moves forward (retention, or
  ``delete_records`` into a segment), the high watermark only moves forward (appends);
* the log start offset is the larger of the first segment's base offset and the offset
  ``delete_records`` last set (Kafka's DeleteRecords). That offset is kept in
  ``log-start-offset``, written (fsynced, renamed into place, directory fsynced) after the data
  below it is flushed, so after a crash it never lies past the recovered log's end; segments
  wholly below it are deleted at once; the records below it in the first segment stay in the
  file, unreadable;
* a single node has no replicas, so the high watermark is the log end offset: everything
  appended is visible to readers once ``append`` returns;
* appends and segment-list changes hold ``_lock``; readers take a snapshot of the segment list
  and never block writers;
* durability follows the flush policy, as in Kafka: rolling a segment does not fsync it on the
  appending thread; the next flush does, then records the *recovery point* (every offset
  below it is on disk) in ``recovery-point``. After an unclean shutdown every segment from
  the one holding the recovery point on is recovered; when one of them had to be cut, the
  segments after it are dropped, so the log stays a prefix of what was appended.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from streamkit._core.clock import Clock
from streamkit._core.types import TopicPartition
from streamkit.log.config import TopicConfig
from streamkit.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from streamkit.log.records import (
    BatchHeader,
    NewRecord,
    build_batch,
    check_batch,
    decode_records,
    iter_batches,
)
from streamkit.log.retention import SegmentSummary, plan_retention
from streamkit.log.segment import FileRange, RecoveryReport, Segment

logger = logging.getLogger(__name__)

_LOG_FILE = re.compile(r"^(\d{20})\.log$")
_MAX_RELATIVE_OFFSET = 2**31 - 1
DEFAULT_MAX_READ_BYTES = 1024 * 1024

AppendListener = Callable[[TopicPartition, int], None]


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int


class Partition:
    """One partition directory ``<data>/<topic>-<partition>/``."""

    def __init__(
        self,
        directory: Path,
        tp: TopicPartition,
        config: TopicConfig,
        clock: Clock,
        *,
        read_only: bool = False,
    ) -> None:
        self.directory = directory
        self.read_only = read_only
        self.tp = tp
        self.config = config
        self.clock = clock
        self._view: tuple[list[Segment], list[int]] = ([], [])
        self._lock = threading.RLock()
        self._unflushed_records = 0
        self._unflushed_segments: list[Segment] = []
        self._dir_dirty = False
        self._recovery_point = 0
        self._deleted_below = 0  # set by delete_records; see log_start_offset
        self._last_flush_ms = clock.monotonic_ms()
        self._closed = False
        self.listeners: list[AppendListener] = []

    # -- lifecycle -------------------------------------------------------------------------

    def open(self, *, clean_shutdown: bool) -> list[RecoveryReport]:
        """Load the segments; recover the active one unless the last shutdown was clean.

        Read-only (``read_only``), nothing in the directory changes: leftovers stay, damage is
        reported and left in place (see ``Segment.open``), no segment is dropped or created
        and the recovery point is not written. Appends then raise ``LogClosedError``.
        """
        ro = self.read_only
        if not ro:
            self.directory.mkdir(parents=True, exist_ok=True)
        reports: list[RecoveryReport] = []
        bases: list[int] = []
        if ro and not self.directory.is_dir():
            reports.append(
                RecoveryReport(str(self.directory), 0, 0, "partition directory is missing", False,
                               repaired=False, damaged=True)
            )
        for entry in os.listdir(self.directory) if self.directory.is_dir() else []:
            if entry.endswith((".cleaned", ".tmp", ".deleted")):
                if not ro:
                    (self.directory / entry).unlink()
                continue
            m = _LOG_FILE.match(entry)
            if m:
                bases.append(int(m.group(1)))
        bases.sort()
        for base in () if ro else set(_index_bases(self.directory)) - set(bases):
            for suffix in (".index", ".timeindex"):
                (self.directory / f"{base:020d}{suffix}").unlink(missing_ok=True)
        # After a crash, recover every segment a flush had not made durable; older ones were
        # fsynced whole before the recovery point moved past them.
        recover_from = len(bases)
        point = -1
        if not clean_shutdown:
            point = _read_recovery_point(self.directory)
            recover_from = max(0, bisect.bisect_right(bases, point) - 1)
        segments: list[Segment] = []
        for i, base in enumerate(bases):
            last = i == len(bases) - 1
            seg, report = Segment.open(
                self.directory,
                base,
                self.config.index_interval_bytes,
                recover=i >= recover_from,
                closed=not last and i < recover_from,
                read_only=ro,
            )
            if report is not None:
                reports.append(report)
            segments.append(seg)
            if ro:
                continue
            if i >= recover_from and report is not None and report.truncated_bytes and not last:
                # A cut before the end: what followed was never durable as a whole.
                for later in bases[i + 1 :]:
                    dropped = Segment(self.directory, later, self.config.index_interval_bytes)
                    size = dropped.log_path.stat().st_size
                    dropped.delete()
                    reports.append(
                        RecoveryReport(
                            str(dropped.log_path),
                            size,
                            later,
                            "dropped: follows a cut segment",
                            False,
                            damaged=True,
                        )
                    )
                break
        # Never past the log's end: the file is written after a flush of what lies below it, so
        # a larger value means the directory was damaged or edited; the end is the most it may say.
        deleted_below = read_log_start_offset(self.directory)
        if ro:
            if not segments:  # nothing on disk: an empty log, in memory only
                segments.append(Segment(self.directory, 0, self.config.index_interval_bytes, read_only=True))
            self._set_segments(segments)
            self._recovery_point = segments[-1].next_offset
            self._deleted_below = min(deleted_below, segments[-1].next_offset)
            return reports
        if not segments:
            segments.append(Segment.create(self.directory, 0, self.config.index_interval_bytes))
            # The new file's name must be durable before an fsynced append to it counts.
            fsync_dir(self.directory)
        self._set_segments(segments)
        self._deleted_below = min(deleted_below, segments[-1].next_offset)
        if clean_shutdown:
            self._recovery_point = segments[-1].next_offset
            _write_recovery_point(self.directory, self._recovery_point)
        else:
            # What recovery read may have been in the page cache only (a killed process, not
            # a lost machine): the first flush fsyncs it before the recovery point moves.
            self._recovery_point = point
            self._unflushed_segments = segments[recover_from:-1]
            segments[-1].mark_dirty()
            self._dir_dirty = True
        return reports

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self.read_only:
                for seg in self._segments:
                    seg.close()
                self._closed = True
                return
            self._flush_locked(persist=True)
            for seg in self._segments:
                seg.close()
            self._closed = True

    def _set_segments(self, segments: list[Segment]) -> None:
        # Replaced, never mutated in place, so readers can iterate a snapshot. The list and
        # its base offsets change together in one assignment: a reader that took them apart
        # could pair a new list with old bases and skip segments.
        self._view = (segments, [s.base_offset for s in segments])

    @property
    def _segments(self) -> list[Segment]:
        return self._view[0]

    # -- offsets ---------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return max(self._segments[0].base_offset, self._deleted_below)

    @property
    def high_watermark(self) -> int:
        return self._segments[-1].next_offset

    log_end_offset = high_watermark

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> Sequence[Segment]:
        return self._segments

    # -- append ----------------------------------------------------------------------------

    def append(self, data: bytes, *, verify_crc: bool = True) -> AppendResult:
        """Check one batch, give it the next offsets and append it."""
        header = check_batch(data, verify_crc=verify_crc)
        return self.append_checked(header, data, crc_checked=verify_crc)

    def append_checked(
        self, header: BatchHeader, data: bytes | memoryview, *, crc_checked: bool = False
    ) -> AppendResult:
        """Append a batch ``check_batch`` has already passed.

        ``crc_checked`` says that check included the CRC (on these very bytes): fetches may
        then send them from the file without checking them again.
        """
        if len(data) > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {len(data)} bytes exceeds max.message.bytes={self.config.max_message_bytes} of {self.tp}"
            )
        with self._lock:
            if self._closed:
                raise LogClosedError(f"partition {self.tp} is closed")
            if self.read_only:
                raise LogClosedError(f"partition {self.tp} is open read-only")
            active = self._segments[-1]
            base = active.next_offset
            if self._should_roll(active, header, len(data), base):
                active = self._roll(base)
            active.append(header, data, base, crc_checked=crc_checked)
            self._unflushed_records += header.last_offset_delta + 1
            if self.config.flush_messages and self._unflushed_records >= self.config.flush_messages:
                self._flush_locked()
            result = AppendResult(base, base + header.last_offset_delta, -1, self.log_start_offset)
        for listener in self.listeners:
            listener(self.tp, result.last_offset + 1)
        return result

    def append_records(self, records: Sequence[NewRecord], *, compression_codec: int = 0) -> AppendResult:
        """Encode ``records`` as one batch and append it (tools, tests, internal topics)."""
        data = build_batch(records, compression_codec=compression_codec)
        return self.append(data, verify_crc=False)

    def _should_roll(self, active: Segment, header: BatchHeader, size: int, base: int) -> bool:
        if active.is_empty:
            return False
        if active.size + size > self.config.segment_bytes:
            return True
        if header.max_timestamp - active.first_batch_timestamp > self.config.segment_ms:
            return True
        return base + header.last_offset_delta - active.base_offset > _MAX_RELATIVE_OFFSET

    def _roll(self, base_offset: int) -> Segment:
        old = self._segments[-1]
        old.seal(fsync=False)  # durable at the next flush, off the appending thread
        self._unflushed_segments.append(old)
        seg = Segment.create(self.directory, base_offset, self.config.index_interval_bytes)
        self._dir_dirty = True
        self._set_segments([*self._segments, seg])
        return seg

    # -- durability ------------------------------------------------------------------------

    def flush(self) -> None:
        """Make everything appended so far durable and move the recovery point to the end."""
        if self.read_only:
            return
        with self._lock:
            rolled, self._unflushed_segments = self._unflushed_segments, []
        # Rolled segments no longer change: fsync them without holding up appends.
        for seg in rolled:
            seg.flush(fsync=True, fsync_indexes=True)
        with self._lock:
            self._flush_locked(persist=bool(rolled))

    def _flush_locked(self, *, persist: bool = False) -> None:
        if self._closed:
            return
        # The recovery point only decides which segments a crash recovery re-checks, and the
        # active one always is: the file is rewritten only when a segment became durable.
        persist = persist or bool(self._unflushed_segments) or self._dir_dirty
        for seg in self._unflushed_segments:
            seg.flush(fsync=True, fsync_indexes=True)
        self._unflushed_segments = []
        active = self._segments[-1]
        active.flush(fsync=True)
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        self._unflushed_records = 0
        self._last_flush_ms = self.clock.monotonic_ms()
        self._recovery_point = active.next_offset
        if persist:
            _write_recovery_point(self.directory, self._recovery_point)

    def maybe_flush(self) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush and data is waiting.

        Rolled segments wait for this too: an fsync of a whole segment racing the appends
        into the next one stalled them (3x slower in benchmarks/log_bench.py), and the flush
        policy is the promise made to producers anyway.
        """
        if not self.config.flush_ms or not (self._unflushed_records or self._unflushed_segments):
            return False
        if self.clock.monotonic_ms() - self._last_flush_ms < self.config.flush_ms:
            return False
        self.flush()
        return True

    # -- read ------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int = DEFAULT_MAX_READ_BYTES, *, max_offset: int | None = None
    ) -> bytes:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` but at least one.

        ``max_offset`` (exclusive) caps what is returned, for read_committed fetches.
        Raises ``OffsetOutOfRangeError`` outside [log_start_offset, high_watermark].
        """
        segments, limit = self._read_from(offset, max_offset)
        for seg in segments:
            data = seg.read(offset, max_bytes)
            if data:
                return _cap_at(data, limit) if max_offset is not None else data
        return b""

    def read_range(
        self, offset: int, max_bytes: int = DEFAULT_MAX_READ_BYTES, *, max_offset: int | None = None
    ) -> bytes | FileRange:
        """What ``read`` returns, or a ``FileRange`` naming the same bytes in a segment file
        when they were verified already (see ``Segment.read_range``), for ``sendfile``."""
        segments, limit = self._read_from(offset, max_offset)
        for seg in segments:
            data = seg.read_range(offset, max_bytes)
            if data:
                if isinstance(data, FileRange):
                    return _cap_range_at(data, limit)
                return _cap_at(data, limit) if max_offset is not None else data
        return b""

    def _read_from(self, offset: int, max_offset: int | None) -> tuple[list[Segment], int]:
        """The segments a read at ``offset`` looks in, in order (none when nothing lies
        below the cap), and the cap: ``max_offset`` or the high watermark."""
        segments, bases = self._view
        hw = segments[-1].next_offset
        start = max(segments[0].base_offset, self._deleted_below)
        if offset < start or offset > hw:
            raise OffsetOutOfRangeError(offset, start, hw)
        limit = hw if max_offset is None else min(max_offset, hw)
        if offset >= limit:
            return [], limit
        i = max(0, bisect.bisect_right(bases, offset) - 1)
        return segments[i:], limit

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp`` at or
        after the log start offset (records below it were deleted, as in Kafka)."""
        start = self.log_start_offset
        for seg in self._segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= start:
                continue
            bound = seg.time_index.lookup(timestamp)
            if bound >= seg.base_offset:
                # The entry claims every batch up to ``bound`` lies before ``timestamp``; a
                # damaged entry must not make us skip records, so check the batch it names.
                named = seg.find_position(bound)
                if named is None or named[1].last_offset != bound or named[1].max_timestamp >= timestamp:
                    bound = seg.base_offset - 1
            found = seg.find_position(bound + 1)
            if found is None:
                continue
            for pos, header, view in seg.batches(found[0]):
                if header.max_timestamp < timestamp or header.is_control:
                    continue
                try:
                    check_batch(view)  # never answer from a damaged batch
                except InvalidRecordError as exc:
                    raise CorruptRecordError(f"{seg.log_path} at position {pos}: {exc}") from exc
                for record in decode_records(header, view):
                    if record.timestamp >= timestamp and record.offset >= start:
                        return record.offset, record.timestamp
        return None

    # -- retention -------------------------------------------------------------------------

    def apply_retention(self, now_ms: int) -> int:
        """Delete the segments retention allows, and those wholly below the log start offset
        (one that was the active segment when ``delete_records`` passed it, as Kafka's
        ``deleteLogStartOffsetBreachedSegments``); returns how many went."""
        if self.read_only:
            return 0
        with self._lock:
            summaries = [
                SegmentSummary(s.base_offset, s.size, s.max_timestamp) for s in self._segments
            ]
            start = self.log_start_offset
            below = next((i for i, s in enumerate(self._segments[1:]) if s.base_offset > start), len(self._segments) - 1)
            n = max(plan_retention(summaries, self.config, now_ms), below)
            if not n:
                return 0
            doomed = self._segments[:n]
            if n == len(self._segments):
                # Every segment expired, the active one too: a partition always has one, so a
                # new, empty one starts at the log end first (Kafka rolls so, then deletes).
                self._roll(self._segments[-1].next_offset)
            self._set_segments(self._segments[n:])
        for seg in doomed:
            seg.delete()
        return n

    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (Kafka's DeleteRecords); return the new
        log start offset (Kafka's low watermark).

        ``offset`` -1 (``HIGH_WATERMARK``) means the high watermark. The start never moves back:
        an offset at or below it changes nothing. The records below it can no longer be read;
        the segments wholly below it are deleted. Raises ``OffsetOutOfRangeError`` for an
        offset above the high watermark or below -1, ``LogClosedError`` when closed or read-only.
        """
        doomed: list[Segment] = []
        with self._lock:
            if self._closed or self.read_only:
                raise LogClosedError(f"partition {self.tp} is {'closed' if self._closed else 'open read-only'}")
            hw = self.high_watermark
            target = hw if offset == HIGH_WATERMARK else offset
            if not 0 <= target <= hw:
                raise OffsetOutOfRangeError(target, self.log_start_offset, hw)
            if target <= self.log_start_offset:
                return self.log_start_offset
            if target > self._recovery_point:
                # The start offset must never be durable ahead of the records below it: after
                # a crash the log would end before its own start.
                self._flush_locked(persist=True)
            _write_log_start_offset(self.directory, target)
            self._deleted_below = target
            segments = self._segments
            keep = bisect.bisect_right([s.base_offset for s in segments], target) - 1
            if keep > 0:
                doomed = segments[:keep]
                self._set_segments(segments[keep:])
            start = self.log_start_offset
        for seg in doomed:
            seg.delete()
        return start

    def replace_segment(self, old: Segment, install: Callable[[], Segment]) -> bool:
        """Swap in a rewritten copy of ``old`` (the compactor); False if ``old`` is gone."""
        with self._lock:
            if self._closed or self.read_only or old not in self._segments[:-1]:
                return False
            new = install()
            self._set_segments([new if s is old else s for s in self._segments])
            return True

    def update_config(self, config: TopicConfig) -> None:
        self.config = config


RECOVERY_POINT_FILE = "recovery-point"
LOG_START_OFFSET_FILE = "log-start-offset"
HIGH_WATERMARK = -1  # delete_records up to the high watermark (Kafka's DeleteRecordsRequest)


def _read_recovery_point(directory: Path) -> int:
    """The offset below which the partition was durable; 0 (recover all) when unknown."""
    try:
        return max(0, int((directory / RECOVERY_POINT_FILE).read_text().strip()))
    except (FileNotFoundError, ValueError):
        return 0


def _write_recovery_point(directory: Path, offset: int) -> None:
    # Written after the data it vouches for is fsynced. Not fsynced itself: a lost update
    # only means recovering more than needed after a crash.
    tmp = directory / (RECOVERY_POINT_FILE + ".tmp")
    tmp.write_text(f"{offset}\n")
    os.replace(tmp, directory / RECOVERY_POINT_FILE)


def read_log_start_offset(directory: Path) -> int:
    """The offset ``delete_records`` last set in partition directory ``directory``; 0 when
    none was (or the file is unreadable). The log start offset is the larger of it and the
    first segment's base offset."""
    path = directory / LOG_START_OFFSET_FILE
    try:
        return max(0, int(path.read_text().strip()))
    except FileNotFoundError:
        return 0
    except (ValueError, UnicodeDecodeError):
        # Written whole (renamed into place): unreadable means damaged. Said, not hidden: the
        # records DeleteRecords removed below it are readable again until it is set anew.
        logger.warning("%s is damaged (not an offset): the log starts at its first segment", path)
        return 0


def _write_log_start_offset(directory: Path, offset: int) -> None:
    # Durable before DeleteRecords answers: a lost update would bring deleted records back.
    tmp = directory / (LOG_START_OFFSET_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(f"{offset}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / LOG_START_OFFSET_FILE)
    fsync_dir(directory)


def _cap_at(data: bytes, limit: int) -> bytes:
    end = 0
    for pos, header in iter_batches(data):
        if header.base_offset >= limit:
            break
        end = pos + header.size
    return data[:end]


def _cap_range_at(data: FileRange, limit: int) -> bytes | FileRange:
    """The batches of ``data`` that start below ``limit`` (whole batches; b"" when none).

    Batches appended after the high watermark was read are cut too, as ``_cap_at`` does.
    """
    end = 0
    for pos, header in data.headers():
        if header.base_offset >= limit:
            break
        end = pos + header.size
    if end == data.size:
        return data
    return FileRange(data.segment, data.position, end) if end else b""


def _index_bases(directory: Path) -> list[int]:
    out = []
    for entry in os.listdir(directory):
        stem, _, suffix = entry.partition(".")
        if suffix in ("index", "timeindex") and stem.isdigit():
            out.append(int(stem))
    return out


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
