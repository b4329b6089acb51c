"""Log compaction for ``cleanup.policy=compact``: keep the latest record of each key.

Rules (Kafka's):

* only closed segments are cleaned, never the active one, and only segments whose newest
  record is older than ``min.compaction.lag.ms``;
* a record survives when it is the latest one for its key among the cleanable segments;
  records without a key and control batches are kept as they are;
* a tombstone (a null value) is the latest record of its key until ``delete.retention.ms``
  after its timestamp; then it goes too, so a consumer that reads the whole log within that
  time still sees the deletion;
* offsets never change: a rewritten batch keeps its base offset, its records keep theirs, and
  its header keeps the original last offset delta and producer fields.

Crash safety: a segment is rewritten into ``<base>.log.cleaned``, fsynced, and scanned and
indexed in memory; then, under the partition lock, its index files are removed, the
``.cleaned`` file is renamed over the ``.log`` (one atomic ``rename``) and the directory is
fsynced; after the lock the new index files are written. A crash at any point leaves either
the old or the new ``.log`` whole; a leftover ``.cleaned`` is deleted on open and missing
indexes are rebuilt. Segments are swapped oldest first, so a tombstone never goes before the
older values of its key do.

A segment whose batches fail their CRC is not compacted (``CorruptRecordError``): what the
cleaner keeps is re-encoded with a fresh CRC, so damage it decoded would come out looking valid.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from streamkit.log.errors import CorruptRecordError, InvalidRecordError
from streamkit.log.partition import Partition, fsync_dir
from streamkit.log.records import BatchHeader, Record, build_batch, check_batch, decode_records
from streamkit.log.segment import Segment

CHECKPOINT_FILE = "cleaner-checkpoint"


@dataclass(frozen=True, slots=True)
class CompactionReport:
    segments_cleaned: int
    records_removed: int
    bytes_before: int
    bytes_after: int


def keep_record(
    record: Record, latest: dict[bytes, int], now_ms: int, delete_retention_ms: int
) -> bool:
    """Whether compaction keeps ``record``, given the latest offset of each key."""
    if record.key is None:
        return True
    if latest.get(record.key, record.offset) > record.offset:
        return False
    return not (record.value is None and now_ms - record.timestamp > delete_retention_ms)


def checked_batches(seg: Segment) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of ``seg`` with its bytes, each one's CRC checked.

    The cleaner re-encodes what it keeps with a fresh CRC, so a damaged batch it decoded
    would come out looking valid: it raises ``CorruptRecordError`` instead, and the
    partition is left as it is.
    """
    next_offset = seg.base_offset
    end = seg.base_offset
    for pos, header, view in seg.batches():
        try:
            check_batch(view)
        except InvalidRecordError as exc:
            raise CorruptRecordError(
                f"{seg.log_path} at position {pos}: {exc}; not compacting {seg.directory.name}"
            ) from exc
        if header.base_offset < next_offset:
            raise CorruptRecordError(
                f"{seg.log_path} at position {pos}: batch base offset {header.base_offset} "
                f"is out of order; not compacting {seg.directory.name}"
            )
        next_offset = header.next_offset
        end = pos + header.size
        yield header, view
    if end != seg.size and seg.size:
        raise CorruptRecordError(
            f"{seg.log_path} at position {end}: batch length does not fit the segment; "
            f"not compacting {seg.directory.name}"
        )


def build_offset_map(segments: Sequence[Segment]) -> dict[bytes, int]:
    """Latest offset of each key across ``segments``."""
    latest: dict[bytes, int] = {}
    for seg in segments:
        for header, view in checked_batches(seg):
            if header.is_control:
                continue
            for record in decode_records(header, view):
                if record.key is not None:
                    latest[record.key] = record.offset
    return latest


def rewrite_batches(
    batches: Sequence[tuple[BatchHeader, memoryview]],
    latest: dict[bytes, int],
    now_ms: int,
    delete_retention_ms: int,
) -> tuple[bytes, int, int | None]:
    """The cleaned bytes of a segment, the number of records removed, and the earliest time a
    kept tombstone may go (None when no tombstone was kept)."""
    out = bytearray()
    removed = 0
    tombstone_deadline: int | None = None
    for header, view in batches:
        if header.is_control:
            out += view
            continue
        records = decode_records(header, view)
        kept = [r for r in records if keep_record(r, latest, now_ms, delete_retention_ms)]
        removed += len(records) - len(kept)
        for r in kept:
            if r.value is None and r.key is not None:
                # the first time at which ``keep_record`` lets the tombstone go
                deadline = r.timestamp + delete_retention_ms + 1
                if tombstone_deadline is None or deadline < tombstone_deadline:
                    tombstone_deadline = deadline
        if len(kept) == len(records):
            out += view
        elif kept:
            out += build_batch(
                kept,
                base_offset=header.base_offset,
                compression_codec=header.compression,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                transactional=header.is_transactional,
                partition_leader_epoch=header.partition_leader_epoch,
                last_offset_delta=header.last_offset_delta,
            )
    return bytes(out), removed, tombstone_deadline


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    first_dirty_offset: int = 0
    tombstone_deadline_ms: int = -1


def _read_checkpoint(directory: Path) -> _Checkpoint:
    try:
        fields = (directory / CHECKPOINT_FILE).read_text().split()
        return _Checkpoint(int(fields[0]), int(fields[1]))
    except (FileNotFoundError, IndexError, ValueError):
        return _Checkpoint()


def _write_checkpoint(directory: Path, checkpoint: _Checkpoint) -> None:
    tmp = directory / (CHECKPOINT_FILE + ".tmp")
    tmp.write_text(f"{checkpoint.first_dirty_offset} {checkpoint.tombstone_deadline_ms}\n")
    os.replace(tmp, directory / CHECKPOINT_FILE)


def compact(partition: Partition, now_ms: int, *, force: bool = False) -> CompactionReport | None:
    """Clean ``partition`` if it is dirty enough (or ``force``); None when nothing was due.

    Runs without the partition lock except for each segment's final swap, so appends go on.
    """
    config = partition.config
    if not config.compact:
        return None
    closed = list(partition.segments[:-1])
    cleanable: list[Segment] = []
    for seg in closed:
        if now_ms - seg.max_timestamp < config.min_compaction_lag_ms:
            break
        cleanable.append(seg)
    if not cleanable:
        return None
    checkpoint = _read_checkpoint(partition.directory)
    total = sum(s.size for s in cleanable)
    dirty = sum(s.size for s in cleanable if s.base_offset >= checkpoint.first_dirty_offset)
    tombstones_due = 0 <= checkpoint.tombstone_deadline_ms <= now_ms
    ratio = dirty / total if total else 0.0
    if not force and not tombstones_due and (dirty == 0 or ratio < config.min_cleanable_dirty_ratio):
        return None
    latest = build_offset_map(cleanable)
    cleaned = removed = 0
    deadline: int | None = None
    for seg in cleanable:
        batches = list(checked_batches(seg))
        data, n_removed, seg_deadline = rewrite_batches(
            batches, latest, now_ms, config.delete_retention_ms
        )
        if seg_deadline is not None and (deadline is None or seg_deadline < deadline):
            deadline = seg_deadline
        if not n_removed:
            continue
        if _swap_in(partition, seg, data):
            cleaned += 1
            removed += n_removed
    _write_checkpoint(
        partition.directory,
        _Checkpoint(cleanable[-1].next_offset, -1 if deadline is None else deadline),
    )
    bytes_after = sum(s.size for s in partition.segments[: len(cleanable)])
    return CompactionReport(cleaned, removed, total, bytes_after)


def _swap_in(partition: Partition, old: Segment, data: bytes) -> bool:
    cleaned_path = old.log_path.with_name(old.log_path.name + ".cleaned")
    with open(cleaned_path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    # Scan and index the cleaned file before taking the partition's lock: under it there is
    # only the swap itself (two unlinks, a rename, a directory fsync), so appends go on.
    new = Segment.load_replacement(
        partition.directory, old.base_offset, partition.config.index_interval_bytes, cleaned_path
    )

    def install() -> Segment:
        # Readers still holding ``old`` must go on reading the old file, not the new one that
        # takes its name: open its descriptor (opened lazily) before the rename.
        old.fileno()
        old.index_path.unlink(missing_ok=True)
        old.timeindex_path.unlink(missing_ok=True)
        os.replace(cleaned_path, old.log_path)
        fsync_dir(partition.directory)
        return new

    swapped = partition.replace_segment(old, install)
    if swapped:
        new.write_indexes()  # a crash before this leaves them missing: rebuilt on open
    else:
        cleaned_path.unlink(missing_ok=True)
    return swapped
