"""Read-only inspection of segment files: the code behind ``streamkit log dump`` and ``log verify``.

Plain code over the files themselves: it never goes through ``Segment`` or ``LogManager``
(which recover, truncate and rewrite indexes), takes no lock and never writes, so it can look
at a data directory exactly as a crash or a bug left it. Files are opened read-only and
mapped with ``ACCESS_READ``.

``read_segment`` walks a ``.log`` file batch by batch. A batch whose CRC fails is reported
and the walk goes on (its length field is still believed); a batch whose length or magic is
wrong ends the walk, because nothing after it can be located. Nothing the CRC covers in a
failing batch is believed: its record count is not added to any total, its offsets and
timestamps are not used to check what follows.

``verify_data_dir`` checks every partition directory (see ``manager.py`` for the layout):

* each batch: length, magic, CRC, record count against its offset delta;
* offsets: every batch starts at or after the segment's base offset and after the previous
  batch's last offset, across segments too, and fits a relative offset (int32); a log start
  offset DeleteRecords set (``log-start-offset``) inside the first segment is the partition's
  first offset; one past the log's end is a note (the next open takes the end);
* ``.index``: whole 8-byte entries, increasing, each naming the start position of a batch
  and that batch's last offset; a non-empty log has at least one entry;
* ``.timeindex``: whole 12-byte entries, timestamps strictly increasing, each naming a batch's
  last offset whose timestamp is the largest seen up to that batch;
* each topic in ``.meta/topics`` has its partition directories.

What the manager cleans up by itself on open (a ``.cleaned`` file, a half-deleted topic, an
index without its log, an unclean-shutdown marker) is reported as a note, not as damage.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from streamkit.log.errors import InvalidRecordError
from streamkit.log.index import OFFSET_ENTRY, TIME_ENTRY
from streamkit.log.partition import read_log_start_offset
from streamkit.log.records import (
    BATCH_OVERHEAD,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Record,
    check_batch,
    crc32c,
    decode_records,
    parse_header,
)

_LOG_FILE = re.compile(r"^(\d{20})\.log$")
_INDEX_FILE = re.compile(r"^(\d{20})\.(index|timeindex)$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_LEFTOVER_SUFFIXES = (".cleaned", ".tmp", ".deleted", ".swap")
_MAX_RELATIVE_OFFSET = 2**31 - 1


# -- one segment file ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One batch of a segment file, as found at ``position``."""

    position: int
    header: BatchHeader
    data: bytes
    computed_crc: int

    @property
    def crc_valid(self) -> bool:
        return self.computed_crc == self.header.crc

    def structure_problem(self) -> str | None:
        """What is wrong with the batch apart from its CRC (None when nothing is)."""
        try:
            check_batch(self.data, verify_crc=False)
        except InvalidRecordError as exc:
            return str(exc)
        return None

    def records(self) -> list[Record]:
        """The decoded records; raises ``InvalidRecordError`` when they cannot be decoded."""
        return decode_records(self.header, self.data)


@dataclass(frozen=True, slots=True)
class BrokenTail:
    """Bytes from ``position`` on that do not form a batch; the walk stops here."""

    position: int
    length: int
    reason: str


def read_segment(path: str | os.PathLike[str]) -> Iterator[BatchEntry | BrokenTail]:
    """Every batch of the ``.log`` file at ``path``, then a ``BrokenTail`` if one is left."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            pos = 0
            while pos < size:
                left = size - pos
                if left < BATCH_OVERHEAD:
                    yield BrokenTail(pos, left, f"{left} bytes are too few for a batch header")
                    return
                header = parse_header(mm[pos : pos + BATCH_OVERHEAD])
                if header.batch_length < BATCH_OVERHEAD - LOG_OVERHEAD:
                    yield BrokenTail(pos, left, f"batch length field {header.batch_length} is too small")
                    return
                if header.size > left:
                    yield BrokenTail(
                        pos, left, f"batch of {header.size} bytes runs past the end of the file"
                    )
                    return
                if header.magic != MAGIC:
                    yield BrokenTail(pos, left, f"batch magic is {header.magic}, not {MAGIC}")
                    return
                data = mm[pos : pos + header.size]
                yield BatchEntry(pos, header, data, crc32c(memoryview(data)[CRC_START:]))
                pos += header.size


@dataclass(frozen=True, slots=True)
class IndexEntry:
    number: int
    offset: int  # absolute
    position: int


@dataclass(frozen=True, slots=True)
class TimeIndexEntry:
    number: int
    timestamp: int
    offset: int  # absolute


def read_offset_index(path: Path, base_offset: int) -> tuple[list[IndexEntry], int]:
    """The entries of an ``.index`` file and the number of bytes after the last whole one."""
    raw = path.read_bytes()
    whole = len(raw) - len(raw) % OFFSET_ENTRY.size
    entries = [
        IndexEntry(i, base_offset + rel, pos)
        for i, (rel, pos) in enumerate(OFFSET_ENTRY.iter_unpack(raw[:whole]))
    ]
    return entries, len(raw) - whole


def read_time_index(path: Path, base_offset: int) -> tuple[list[TimeIndexEntry], int]:
    """The entries of a ``.timeindex`` file and the number of bytes after the last whole one."""
    raw = path.read_bytes()
    whole = len(raw) - len(raw) % TIME_ENTRY.size
    entries = [
        TimeIndexEntry(i, ts, base_offset + rel)
        for i, (ts, rel) in enumerate(TIME_ENTRY.iter_unpack(raw[:whole]))
    ]
    return entries, len(raw) - whole


def segment_base_offset(path: str | os.PathLike[str]) -> int | None:
    """The base offset a segment file's name gives, or None for another name."""
    m = _LOG_FILE.match(Path(path).name) or _INDEX_FILE.match(Path(path).name)
    return int(m.group(1)) if m else None


# -- verification ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    """Damage found in ``path`` (at byte ``position`` when it is known)."""

    path: Path
    position: int | None
    message: str

    def __str__(self) -> str:
        where = f" position {self.position}" if self.position is not None else ""
        return f"{self.path}{where}: {self.message}"


@dataclass(slots=True)
class PartitionSummary:
    name: str
    segments: int = 0
    batches: int = 0
    records: int = 0  # in batches that pass their CRC: a damaged header's count means nothing
    damaged_batches: int = 0  # batches failing their CRC: their records are not counted
    size_bytes: int = 0
    first_offset: int | None = None
    next_offset: int | None = None
    problems: int = 0


@dataclass(slots=True)
class VerifyReport:
    data_dir: Path
    topics: int = 0
    partitions: list[PartitionSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems

    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.partitions)

    @property
    def batches(self) -> int:
        return sum(p.batches for p in self.partitions)

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def damaged_batches(self) -> int:
        return sum(p.damaged_batches for p in self.partitions)

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.partitions)


def verify_data_dir(data_dir: str | os.PathLike[str]) -> VerifyReport:
    """Check every partition of a data directory; never writes to it.

    Raises ``FileNotFoundError``/``NotADirectoryError`` when ``data_dir`` is not a directory.
    """
    root = Path(data_dir)
    if not root.exists():
        raise FileNotFoundError(f"no such data directory: {root}")
    if not root.is_dir():
        raise NotADirectoryError(f"not a directory: {root}")
    report = VerifyReport(root)
    _note_owner(root, report)
    expected = _check_meta(root, report)
    found: set[str] = set()
    for entry in sorted(root.iterdir(), key=lambda p: _partition_sort_key(p.name)):
        if not entry.is_dir() or entry.name.startswith("."):
            continue  # .meta, and the wire server's .broker and .producer-state: not partitions
        if entry.name.endswith("-delete"):
            report.notes.append(f"{entry}: left over from a topic deletion (removed on next open)")
            continue
        if not _PARTITION_DIR.match(entry.name):
            report.notes.append(f"{entry}: not a partition directory, skipped")
            continue
        found.add(entry.name)
        if expected is not None and entry.name not in expected:
            report.notes.append(f"{entry}: no topic metadata names this partition")
        report.partitions.append(_verify_partition(entry, report))
    for name in sorted((expected or set()) - found, key=_partition_sort_key):
        report.problems.append(
            Problem(root / name, None, "partition directory is missing (its topic's metadata names it)")
        )
    return report


def _partition_sort_key(name: str) -> tuple[str, int]:
    m = _PARTITION_DIR.match(name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


def _note_owner(root: Path, report: VerifyReport) -> None:
    lock = root / ".lock"
    if lock.exists():
        fd = os.open(lock, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                report.notes.append(
                    "the data directory is in use by another process: appends in progress "
                    "may show up as damage at the end of active segments"
                )
                return
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        if not (root / ".clean_shutdown").exists():
            report.notes.append(
                "the last process to use this directory did not shut down cleanly: "
                "the next open recovers its active segments"
            )


def _check_meta(root: Path, report: VerifyReport) -> set[str] | None:
    """Partition directory names the topic metadata promises (None without a .meta dir)."""
    meta_dir = root / ".meta" / "topics"
    if not meta_dir.is_dir():
        return None
    expected: set[str] = set()
    for path in sorted(meta_dir.glob("*.json")):
        try:
            meta = json.loads(path.read_bytes())
            name, partitions = meta["name"], meta["partitions"]
            if not isinstance(name, str) or not isinstance(partitions, int):
                raise TypeError("name or partitions has the wrong type")
        except (ValueError, KeyError, TypeError) as exc:
            report.problems.append(Problem(path, None, f"unreadable topic metadata: {exc}"))
            continue
        report.topics += 1
        expected.update(f"{name}-{p}" for p in range(partitions))
    return expected


@dataclass(slots=True)
class _BatchSeen:
    last_offset: int
    max_timestamp_so_far: int
    own_max_timestamp: int
    damaged: bool = False  # fails its CRC: its offsets and timestamps are unknown


def _verify_partition(directory: Path, report: VerifyReport) -> PartitionSummary:
    summary = PartitionSummary(directory.name)
    before = len(report.problems)
    bases: list[int] = []
    index_bases: set[int] = set()
    for entry in sorted(os.listdir(directory)):
        path = directory / entry
        m = _LOG_FILE.match(entry)
        if m:
            bases.append(int(m.group(1)))
        elif _INDEX_FILE.match(entry):
            index_bases.add(int(entry[:20]))
        elif entry.endswith(_LEFTOVER_SUFFIXES):
            report.notes.append(f"{path}: left over from an interrupted write (removed on next open)")
    for base in sorted(index_bases - set(bases)):
        report.notes.append(f"{directory}: index files of base offset {base} have no log (removed on next open)")
    if not bases:
        report.problems.append(Problem(directory, None, "partition has no segment"))
    next_offset: int | None = None
    for base in bases:
        summary.segments += 1
        if next_offset is not None and base < next_offset:
            report.problems.append(
                Problem(
                    directory / f"{base:020d}.log",
                    None,
                    f"segment base offset {base} lies before the previous segment's end {next_offset}",
                )
            )
        next_offset = _verify_segment(directory, base, next_offset, summary, report)
        if summary.first_offset is None:
            summary.first_offset = base
    summary.next_offset = next_offset
    start = read_log_start_offset(directory)
    if summary.first_offset is not None and next_offset is not None and start > summary.first_offset:
        if start > next_offset:
            report.notes.append(
                f"{directory}: log start offset {start} lies past the log's end {next_offset} (the next open takes the end)"
            )
        summary.first_offset = min(start, next_offset)
    summary.problems = len(report.problems) - before
    return summary


def _verify_segment(
    directory: Path,
    base: int,
    prev_next_offset: int | None,
    summary: PartitionSummary,
    report: VerifyReport,
) -> int:
    """Check one segment and its indexes; return the offset after its last batch."""
    log_path = directory / f"{base:020d}.log"
    problems = report.problems
    next_offset = max(base, prev_next_offset or 0)
    seen: dict[int, _BatchSeen] = {}  # position -> batch
    max_ts = -1
    valid_end = 0
    for item in read_segment(log_path):
        if isinstance(item, BrokenTail):
            problems.append(Problem(log_path, item.position, f"{item.reason} ({item.length} bytes left)"))
            break
        header, pos = item.header, item.position
        summary.batches += 1
        if item.crc_valid:
            summary.records += header.records_count
        else:
            summary.damaged_batches += 1
        structure = item.structure_problem()
        if structure is not None:
            problems.append(Problem(log_path, pos, structure))
        if not item.crc_valid:
            problems.append(
                Problem(
                    log_path,
                    pos,
                    f"CRC mismatch: stored {header.crc:#010x}, computed {item.computed_crc:#010x}",
                )
            )
            # Nothing the CRC covers (offset delta, count, timestamps) can be believed: keep
            # the batch's position for the index checks, learn no offsets or times from it.
            seen[pos] = _BatchSeen(header.base_offset, max_ts, -1, damaged=True)
            valid_end = pos + header.size
            continue
        if header.base_offset < next_offset:
            problems.append(
                Problem(
                    log_path,
                    pos,
                    f"batch base offset {header.base_offset} goes back (expected {next_offset} or later)",
                )
            )
        if header.last_offset - base > _MAX_RELATIVE_OFFSET or header.base_offset < base:
            problems.append(
                Problem(log_path, pos, f"offsets {header.base_offset}..{header.last_offset} do not fit segment {base}")
            )
        next_offset = max(next_offset, header.next_offset)
        if header.max_timestamp > max_ts:
            max_ts = header.max_timestamp
        seen[pos] = _BatchSeen(header.last_offset, max_ts, header.max_timestamp)
        valid_end = pos + header.size
    summary.size_bytes += log_path.stat().st_size
    _verify_offset_index(directory / f"{base:020d}.index", base, seen, valid_end, problems)
    _verify_time_index(directory / f"{base:020d}.timeindex", base, seen, problems)
    return next_offset


def _verify_offset_index(
    path: Path, base: int, seen: dict[int, _BatchSeen], valid_end: int, problems: list[Problem]
) -> None:
    if not path.exists():
        problems.append(Problem(path, None, "offset index is missing"))
        return
    entries, extra = read_offset_index(path, base)
    if extra:
        problems.append(
            Problem(path, len(entries) * OFFSET_ENTRY.size, f"index ends in a partial entry of {extra} bytes")
        )
    if seen and not entries:
        problems.append(Problem(path, None, "offset index is empty but the log is not"))
    prev: IndexEntry | None = None
    for e in entries:
        at = e.number * OFFSET_ENTRY.size
        if prev is not None and (e.offset <= prev.offset or e.position <= prev.position):
            problems.append(Problem(path, at, f"entry {e.number} ({e.offset} -> {e.position}) does not increase"))
        prev = e
        batch = seen.get(e.position)
        if batch is None:
            where = "past the end of the log" if e.position >= valid_end else "not at the start of a batch"
            problems.append(Problem(path, at, f"entry {e.number} points at position {e.position}, {where}"))
        elif not batch.damaged and batch.last_offset != e.offset:
            problems.append(
                Problem(
                    path,
                    at,
                    f"entry {e.number} says offset {e.offset} for position {e.position}, "
                    f"but that batch ends at offset {batch.last_offset}",
                )
            )


def _verify_time_index(path: Path, base: int, seen: dict[int, _BatchSeen], problems: list[Problem]) -> None:
    if not path.exists():
        problems.append(Problem(path, None, "time index is missing"))
        return
    entries, extra = read_time_index(path, base)
    if extra:
        problems.append(
            Problem(path, len(entries) * TIME_ENTRY.size, f"time index ends in a partial entry of {extra} bytes")
        )
    by_last_offset = {b.last_offset: b for b in seen.values() if not b.damaged}
    prev: TimeIndexEntry | None = None
    for e in entries:
        at = e.number * TIME_ENTRY.size
        if prev is not None and (e.timestamp <= prev.timestamp or e.offset < prev.offset):
            problems.append(
                Problem(path, at, f"entry {e.number} ({e.timestamp} -> {e.offset}) does not increase")
            )
        prev = e
        batch = by_last_offset.get(e.offset)
        if batch is None and _inside_damaged_batch(e.offset, seen):
            continue  # names a batch whose offsets its damage hides: reported already
        if batch is None:
            problems.append(Problem(path, at, f"entry {e.number} names offset {e.offset}, not the last offset of a batch"))
        elif batch.own_max_timestamp != e.timestamp or batch.max_timestamp_so_far != e.timestamp:
            problems.append(
                Problem(
                    path,
                    at,
                    f"entry {e.number} says timestamp {e.timestamp} for offset {e.offset}, "
                    f"but the largest timestamp up to that batch is {batch.max_timestamp_so_far}",
                )
            )


def _inside_damaged_batch(offset: int, seen: dict[int, _BatchSeen]) -> bool:
    """Whether ``offset`` may belong to a batch that fails its CRC (whose last offset is not
    known): one starts at or before it with no intact batch ending in between."""
    intact_before = max((b.last_offset for b in seen.values() if not b.damaged and b.last_offset < offset), default=-1)
    return any(b.damaged and intact_before < b.last_offset <= offset for b in seen.values())
