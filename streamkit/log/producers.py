"""Idempotent and transactional producer state, per partition, and the appends it guards.

An idempotent producer numbers its batches per partition (``base_sequence``) under a
``producer_id`` and ``producer_epoch``. For each partition we keep, per producer id, its
epoch and the sequence ranges and offsets of its last ``CACHED_BATCHES`` batches, and check
every new batch against it before it is appended:

* same epoch, a batch whose sequence range equals a cached one: a retry of a batch already
  written; it is *not* appended again and the original offsets are returned;
* same epoch, ``base_sequence == last_sequence + 1`` (wrapping at 2^31): appended;
* same epoch, anything else: ``OutOfOrderSequenceError``;
* an older epoch: ``InvalidProducerEpochError``; a newer epoch must start at sequence 0;
* a producer id we have no state for, with ``base_sequence != 0``: ``UnknownProducerIdError``.

Transactional batches also open a transaction on the partition: its first offset is kept
until a control batch (COMMIT or ABORT marker) from the same producer closes it. The last
stable offset (LSO) of a partition is the first offset of its oldest open transaction, or
the high watermark when none is open; ``read_committed`` consumers read only below it.
Aborted transactions are remembered as ``(producer_id, first_offset, last_offset)`` so a
fetch can list those overlapping the data it returns.

Recovery: state is rebuilt lazily, the first time a partition is used after ``open``, from
a snapshot written on clean close (``<data>/.producer-state/<topic>-<partition>.json``,
holding the high watermark it covers) plus a scan of the batch *headers* appended after it.
Snapshots are trusted only after a clean shutdown of the log; otherwise they are deleted at
open and state is rebuilt by scanning every batch header of the partition (records are never
decoded, except the one control record of each marker batch). A snapshot is deleted once
loaded, so it never outlives the run that follows the clean close it was written at.

Check-and-append is atomic per partition (a lock per partition), so appends may run on any
thread. Known limit: the aborted-transaction list of a partition is pruned only when the
state is (re)loaded, by the partition's log start offset.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from streamkit._core.types import TopicPartition
from streamkit.log.errors import LogError
from streamkit.log.partition import AppendResult, Partition
from streamkit.log.records import BATCH_OVERHEAD, BatchHeader, Record, decode_batch, iter_batches

CACHED_BATCHES = 5
_SEQUENCE_MODULUS = 1 << 31
_SCAN_CHUNK_BYTES = 4 * 1024 * 1024
_SNAPSHOT_DIR = ".producer-state"
_CONTROL_KEY = struct.Struct(">hh")


class ProducerStateError(LogError):
    """A batch from an idempotent producer does not fit that producer's state."""


class OutOfOrderSequenceError(ProducerStateError):
    """The batch's sequence number leaves a gap, or goes back without being a known retry."""


class InvalidProducerEpochError(ProducerStateError):
    """The batch comes from an older epoch of the producer (it has been fenced)."""


class UnknownProducerIdError(ProducerStateError):
    """No state for this producer id, and the batch does not start its sequence at 0."""


@dataclass(slots=True)
class _CachedBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    batches: deque[_CachedBatch] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    txn_first_offset: int = -1  # first offset of this producer's open transaction, -1: none

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int
    last_offset: int  # offset of the ABORT marker


class _SnapshotEntry(msgspec.Struct, array_like=True):
    producer_id: int
    epoch: int
    batches: list[tuple[int, int, int, int]]
    txn_first_offset: int


class _Snapshot(msgspec.Struct):
    high_watermark: int
    producers: list[_SnapshotEntry]
    aborted: list[tuple[int, int, int]]


class PartitionProducerState:
    """Producer state of one partition. Not thread-safe: ``ProducerStates`` serialises it."""

    def __init__(self) -> None:
        self.producers: dict[int, _ProducerEntry] = {}
        self.aborted: list[AbortedTransaction] = []
        self.end_offset = 0  # state covers batches below this offset

    def check(self, header: BatchHeader, log_start_offset: int) -> AppendResult | None:
        """Raise if ``header`` may not be appended; the original result if it is a retry."""
        entry = self.producers.get(header.producer_id)
        if header.is_control:  # a transaction marker: no sequence, only the epoch matters
            if entry is not None and header.producer_epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"marker for producer {header.producer_id} epoch {header.producer_epoch} "
                    f"is older than {entry.epoch}"
                )
            return None
        if entry is None:
            if header.base_sequence != 0:
                raise UnknownProducerIdError(
                    f"no state for producer {header.producer_id}; its batch starts at sequence "
                    f"{header.base_sequence}, not 0"
                )
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"{entry.epoch}"
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} starts epoch {header.producer_epoch} at "
                    f"sequence {header.base_sequence}, not 0"
                )
            return None
        for cached in entry.batches:
            if (
                cached.first_sequence == header.base_sequence
                and cached.last_sequence == header.last_sequence
            ):
                return AppendResult(cached.base_offset, cached.last_offset, -1, log_start_offset)
        expected = (entry.last_sequence + 1) % _SEQUENCE_MODULUS
        if header.base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sent sequence {header.base_sequence}, "
                f"expected {expected}"
            )
        return None

    def update(self, header: BatchHeader, base_offset: int, control_type: int | None = None) -> None:
        """Record an appended batch (stamped at ``base_offset``) of an idempotent producer."""
        last_offset = base_offset + header.last_offset_delta
        self.end_offset = max(self.end_offset, last_offset + 1)
        pid = header.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            txn = entry.txn_first_offset if entry is not None else -1
            entry = _ProducerEntry(header.producer_epoch, txn_first_offset=txn)
            self.producers[pid] = entry
        if header.is_control:
            if control_type == 0 and entry.txn_first_offset >= 0:
                self.aborted.append(AbortedTransaction(pid, entry.txn_first_offset, last_offset))
            entry.txn_first_offset = -1
            return
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = base_offset
        if header.base_sequence >= 0:
            entry.batches.append(
                _CachedBatch(header.base_sequence, header.last_sequence, base_offset, last_offset)
            )

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction, None when none is open."""
        firsts = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        return min(firsts) if firsts else None

    def has_open_transaction(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.txn_first_offset >= 0

    def aborted_between(self, start: int, end: int) -> list[AbortedTransaction]:
        """Aborted transactions whose range overlaps offsets [start, end)."""
        return [a for a in self.aborted if a.first_offset < end and a.last_offset >= start]

    def forget_before(self, log_start_offset: int) -> None:
        self.aborted = [a for a in self.aborted if a.last_offset >= log_start_offset]

    # -- snapshots -------------------------------------------------------------------------

    def to_snapshot(self) -> _Snapshot:
        return _Snapshot(
            self.end_offset,
            [
                _SnapshotEntry(
                    pid,
                    e.epoch,
                    [(b.first_sequence, b.last_sequence, b.base_offset, b.last_offset) for b in e.batches],
                    e.txn_first_offset,
                )
                for pid, e in self.producers.items()
            ],
            [(a.producer_id, a.first_offset, a.last_offset) for a in self.aborted],
        )

    @classmethod
    def from_snapshot(cls, snap: _Snapshot) -> PartitionProducerState:
        state = cls()
        state.end_offset = snap.high_watermark
        for s in snap.producers:
            entry = _ProducerEntry(s.epoch, txn_first_offset=s.txn_first_offset)
            entry.batches.extend(_CachedBatch(*b) for b in s.batches)
            state.producers[s.producer_id] = entry
        state.aborted = [AbortedTransaction(*a) for a in snap.aborted]
        return state


def control_type_of(data: bytes | memoryview, header: BatchHeader) -> int | None:
    """The marker type (0 ABORT, 1 COMMIT) of an uncompressed control batch, else None.

    A control batch holds one record whose key is ``INT16 version, INT16 type``; the key sits
    at a fixed place after the record's length, attributes, timestamp and offset deltas and
    key length, all one-byte varints for a marker record.
    """
    if not header.is_control or header.compression != 0:
        return None
    key_at = BATCH_OVERHEAD + 5  # length, attributes, ts delta, offset delta, key length
    if len(data) < key_at + _CONTROL_KEY.size:
        return None
    _version, kind = _CONTROL_KEY.unpack_from(data, key_at)
    return int(kind)


def scan_state(partition: Partition) -> PartitionProducerState:
    """The partition's producer state from a scan of its batch headers, read-only (no
    snapshot read or deleted): what a tool that opens a data directory for reading needs to
    read committed."""
    state = PartitionProducerState()
    offset = partition.log_start_offset
    hw = partition.high_watermark
    while offset < hw:
        data = partition.read(offset, _SCAN_CHUNK_BYTES)
        if not data:
            break
        view = memoryview(data)
        for pos, header in iter_batches(data):
            if header.last_offset >= offset:
                state.update(header, header.base_offset, control_type_of(view[pos : pos + header.size], header))
            offset = header.next_offset
    state.end_offset = max(state.end_offset, hw)
    return state


def last_stable_offset(state: PartitionProducerState | None, high_watermark: int, log_start_offset: int) -> int:
    """Where read_committed reading stops: the first offset of the oldest open transaction,
    else the high watermark. Never below the log start offset: DeleteRecords may move the start
    past an open transaction's first offset, and Kafka then takes the start as the first
    unstable offset (``UnifiedLog.maybeIncrementFirstUnstableOffset``)."""
    if state is None:
        return high_watermark
    first = state.first_unstable_offset()
    return high_watermark if first is None else min(max(first, log_start_offset), high_watermark)


def committed_records(
    data: bytes | memoryview, offset: int, stable_offset: int, aborted: list[AbortedTransaction], max_records: int
) -> tuple[list[Record], int]:
    """Read committed over ``data`` (whole batches from a read at ``offset``): the records from
    ``offset`` on below ``stable_offset``, without control batches and without the batches of
    aborted transactions; and the offset the next read starts at (never past
    ``stable_offset``). A batch never straddles the last stable offset: it is the first
    offset of a transactional batch, or the high watermark."""
    records: list[Record] = []
    next_offset = offset
    view = memoryview(data)
    for pos, header in iter_batches(data):
        if header.base_offset >= stable_offset or len(records) >= max_records:
            break
        next_offset = max(next_offset, header.next_offset)
        if header.is_control:
            continue
        if header.is_transactional and _aborted(header, aborted):
            continue
        _header, batch = decode_batch(view[pos : pos + header.size], verify_crc=False)
        if header.base_offset >= offset:
            records.extend(batch)
        else:
            records.extend(r for r in batch if r.offset >= offset)
    if len(records) > max_records:
        records = records[:max_records]
        next_offset = records[-1].offset + 1
    return records, next_offset


def _aborted(header: BatchHeader, aborted: list[AbortedTransaction]) -> bool:
    pid = header.producer_id
    base = header.base_offset
    return any(a.producer_id == pid and a.first_offset <= base <= a.last_offset for a in aborted)


class ProducerStates:
    """Producer state of every partition of a log, loaded lazily, with its snapshots."""

    def __init__(self, data_dir: Path, *, trust_snapshots: bool) -> None:
        self._dir = data_dir / _SNAPSHOT_DIR
        self._states: dict[TopicPartition, PartitionProducerState] = {}
        self._locks: dict[TopicPartition, threading.Lock] = {}
        self._guard = threading.Lock()
        self._dir.mkdir(parents=True, exist_ok=True)
        if not trust_snapshots:
            for path in self._dir.glob("*.json"):
                path.unlink()

    def lock(self, tp: TopicPartition) -> threading.Lock:
        with self._guard:
            lock = self._locks.get(tp)
            if lock is None:
                lock = self._locks[tp] = threading.Lock()
            return lock

    def append(
        self, partition: Partition, header: BatchHeader, data: bytes | memoryview, *, crc_checked: bool = False
    ) -> AppendResult:
        """Check ``header`` against the producer's state, then append (or not, for a retry).

        ``crc_checked`` is passed on to ``Partition.append_checked``.
        """
        if header.producer_id < 0:
            result = partition.append_checked(header, data, crc_checked=crc_checked)
            state = self._states.get(partition.tp)
            if state is not None:
                state.end_offset = result.last_offset + 1
            return result
        with self.lock(partition.tp):
            state = self._state(partition)
            duplicate = state.check(header, partition.log_start_offset)
            if duplicate is not None:
                return duplicate
            result = partition.append_checked(header, data, crc_checked=crc_checked)
            state.update(header, result.base_offset, control_type_of(data, header))
            return result

    def state(self, partition: Partition) -> PartitionProducerState:
        """The partition's state, loading it first if needed (callers hold ``lock``)."""
        return self._state(partition)

    def load(self, partition: Partition) -> None:
        """Load the partition's state now (it may scan the partition: call off the event loop)."""
        with self.lock(partition.tp):
            self._state(partition)

    def peek(self, tp: TopicPartition) -> PartitionProducerState | None:
        """The state if it is loaded; None means no idempotent batch was seen this run."""
        return self._states.get(tp)

    def _state(self, partition: Partition) -> PartitionProducerState:
        state = self._states.get(partition.tp)
        if state is None:
            state = self._load(partition)
            self._states[partition.tp] = state
        return state

    def _load(self, partition: Partition) -> PartitionProducerState:
        path = self._path(partition.tp)
        state = PartitionProducerState()
        hw = partition.high_watermark
        if path.exists():
            try:
                snap = msgspec.json.decode(path.read_bytes(), type=_Snapshot)
            except (msgspec.DecodeError, OSError):
                snap = None
            path.unlink(missing_ok=True)
            if snap is not None and snap.high_watermark <= hw:
                state = PartitionProducerState.from_snapshot(snap)
        offset = max(state.end_offset, partition.log_start_offset)
        while offset < hw:
            data = partition.read(offset, _SCAN_CHUNK_BYTES)
            if not data:
                break
            view = memoryview(data)
            for pos, header in iter_batches(data):
                if header.last_offset >= offset:
                    chunk = view[pos : pos + header.size]
                    state.update(header, header.base_offset, control_type_of(chunk, header))
                offset = header.next_offset
        state.end_offset = max(state.end_offset, hw)
        state.forget_before(partition.log_start_offset)
        return state

    def _path(self, tp: TopicPartition) -> Path:
        return self._dir / f"{tp.topic}-{tp.partition}.json"

    def forget_topic(self, topic: str) -> None:
        with self._guard:
            for tp in [tp for tp in self._states if tp.topic == topic]:
                del self._states[tp]
        for path in self._dir.glob(f"{topic}-*.json"):
            if path.stem.rpartition("-")[0] == topic:
                path.unlink(missing_ok=True)

    def write_snapshots(self) -> None:
        """Write every loaded state to its snapshot file (call at clean close, after appends stop)."""
        for tp, state in list(self._states.items()):
            path = self._path(tp)
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(msgspec.json.encode(state.to_snapshot()))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)


class ProducerIdAllocator:
    """Hands out producer ids that are never reused, across restarts of the data directory.

    Ids are reserved in blocks: ``<data>/.producer-state/next-producer-id`` holds the first id
    not yet reserved and is rewritten (fsynced) once per block, so a crash skips at most the
    rest of a block and never hands out an id twice.
    """

    BLOCK = 1000

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / _SNAPSHOT_DIR / "next-producer-id"
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._next = 0
        self._reserved_until = 0
        if self._path.exists():
            text = self._path.read_text().strip()
            if text.isdigit():
                self._next = self._reserved_until = int(text)

    def allocate(self) -> int:
        with self._lock:
            if self._next >= self._reserved_until:
                self._reserve(self._next + self.BLOCK)
            pid = self._next
            self._next += 1
            return pid

    def _reserve(self, until: int) -> None:
        tmp = self._path.with_name(self._path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(f"{until}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._reserved_until = until
