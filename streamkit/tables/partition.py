"""``TablePartition``: the live state of one partition of one table, held by one worker.

Reads and writes go through a cache of decoded values in front of the store. A write only
touches the cache and marks the key dirty; every commit the state manager takes the dirty
changes (``take_changes``), sends them to the changelog, and once the log acknowledged them
writes them to the store in one batch together with the changelog offset they reach
(``apply``). So a store never holds a change the changelog lacks, and the offset it records is
exactly where recovery resumes. Between the two steps the changes stay readable in the cache.

The cache keeps clean entries too (values read, or written and since stored) up to
``CACHE_LIMIT`` keys, so hot keys are decoded once per commit interval, not per record.
Entries taken by ``take_changes`` and not yet ``stored`` are never evicted: the store lacks
them, a read would find the old value.

Under exactly-once this cache is the per-task write batch with reads through it: the changes
of a commit interval reach the store only after their transaction committed, so the store
(and the changelog offset it records) holds committed state only, and a crash needs no wipe.
``discard_uncommitted`` forgets the writes of a transaction that aborted.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from streamkit._core.serde import RawSerde, Serde
from streamkit.tables.store import Change, KeyValueStore

CACHE_LIMIT = 200_000
RAW = RawSerde()


class _Deleted:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<deleted>"


DELETED: Any = _Deleted()
MISSING: Any = object()

# A change as the changelog gets it: key bytes, value bytes (None: tombstone), timestamp ms.
OutgoingChange = tuple[bytes, bytes | None, int]


class TablePartition:
    """State of ``partition`` of a table: a store plus a write-back cache."""

    __slots__ = (
        "_cache", "_dirty", "_key_dumps", "_key_loads", "_log", "_unstored", "_value_dumps", "_value_loads",
        "_written_at", "partition", "store",
    )

    def __init__(self, partition: int, store: KeyValueStore, key_serde: Serde, value_serde: Serde) -> None:
        self.partition = partition
        self.store = store
        self._key_dumps: Callable[[Any], bytes | None] = key_serde.dumps
        self._key_loads: Callable[[bytes | None], Any] = key_serde.loads
        self._value_dumps: Callable[[Any], bytes | None] = value_serde.dumps
        self._value_loads: Callable[[bytes | None], Any] = value_serde.loads
        self._cache: dict[Any, Any] = {}  # key -> value, or DELETED
        self._dirty: dict[Any, int] = {}  # key -> timestamp of its last write
        self._unstored: dict[Any, int] = {}  # keys taken by take_changes, not stored yet
        # key -> timestamp of its last write, for keys in the cache (evicted with them; the
        # store keeps no timestamps, so a key read back from it has none: ``timestamp_of``)
        self._written_at: dict[Any, int] = {}
        # Every write in order, encoded when made (``cache_off``), else None: the latest per key.
        self._log: list[OutgoingChange] | None = None

    def cache_off(self) -> None:
        """Send every write to the changelog, in order, not the latest per key per commit:
        the table's stream then carries each update (Kafka Streams with its record cache off,
        ``statestore.cache.max.bytes=0``)."""
        if self._log is None:
            self._log = []

    def get(self, key: Any) -> Any:
        """The value of ``key``, or ``MISSING``."""
        cache = self._cache
        value = cache.get(key, MISSING)
        if value is MISSING:
            raw = self.store.get(self._key_bytes(key))
            if raw is None:
                return MISSING
            value = self._value_loads(raw)
            if len(cache) >= CACHE_LIMIT:
                self._evict()
            cache[key] = value
            return value
        return MISSING if value is DELETED else value

    def set(self, key: Any, value: Any, timestamp_ms: int) -> None:
        self._cache[key] = value
        self._dirty[key] = self._written_at[key] = timestamp_ms
        if self._log is not None:
            self._log.append((self._key_bytes(key), self._value_dumps(value), timestamp_ms))

    def delete(self, key: Any, timestamp_ms: int) -> None:
        self._cache[key] = DELETED
        self._dirty[key] = self._written_at[key] = timestamp_ms
        if self._log is not None:
            self._log.append((self._key_bytes(key), None, timestamp_ms))

    def timestamp_of(self, key: Any) -> int | None:
        """The timestamp of ``key``'s last write while it stayed in the cache (the changelog
        record's), or ``None``: never written here, or evicted or restored since (the store
        keeps values only)."""
        return self._written_at.get(key)

    @property
    def dirty(self) -> int:
        """How many keys changed since the last ``take_changes``."""
        return len(self._dirty)

    def take_changes(self) -> list[OutgoingChange]:
        """The changes since the last call, encoded, in the order keys were first changed
        (with the cache off: every write, in order)."""
        dirty, self._dirty = self._dirty, {}
        sent_before = self._unstored  # taken earlier, not stored yet: the changelog has them
        if sent_before:
            self._unstored = {**sent_before, **dirty}
        else:
            self._unstored = dirty
        log = self._log
        if log is not None:
            self._log = []
            return log
        cache = self._cache
        key_dumps = self._key_dumps
        value_dumps = self._value_dumps
        out: list[OutgoingChange] = []
        unchanged: list[Any] = []
        for key, timestamp in dirty.items():
            value = cache[key]
            key_bytes = key_dumps(key)
            if key_bytes is None:
                raise ValueError("a table key cannot be None")
            if value is DELETED:
                if key not in sent_before and self.store.get(key_bytes) is None:
                    # Absent at the last commit and now: no change to send. Kafka Streams'
                    # cache flush forwards nothing for null -> null either (with the cache
                    # off, ``_log``, every deletion is sent).
                    unchanged.append(key)
                    continue
                out.append((key_bytes, None, timestamp))
            else:
                out.append((key_bytes, value_dumps(value), timestamp))
        for key in unchanged:
            del cache[key]
            self._written_at.pop(key, None)
            self._unstored.pop(key, None)
        return out

    def stored(self, changes: Sequence[OutgoingChange]) -> None:
        """``changes`` reached the store: deleted keys leave the cache, which stays bounded."""
        cache = self._cache
        dirty = self._dirty
        self._unstored = {}  # one batch is on its way at a time: this one
        if len(cache) >= CACHE_LIMIT:
            self._evict()
            return
        for key, value, _ts in changes:
            if value is None:
                decoded = self._key_loads(key)
                if cache.get(decoded, MISSING) is DELETED and decoded not in dirty:
                    del cache[decoded]
                    self._written_at.pop(decoded, None)

    def _evict(self) -> None:
        """Drop every clean entry (dirty and taken ones must stay until they are stored)."""
        dirty = self._dirty
        cache = self._cache
        kept = {key: cache[key] for key in dirty}
        for key in self._unstored:
            if key not in kept and key in cache:
                kept[key] = cache[key]
        self._cache = kept
        written_at = self._written_at
        self._written_at = {key: written_at[key] for key in kept if key in written_at}

    def discard_uncommitted(self) -> None:
        """Forget every write the store does not hold (a transaction aborted)."""
        self._cache = {}
        self._dirty = {}
        self._unstored = {}
        self._written_at = {}
        if self._log is not None:
            self._log = []

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every key and value of this partition (the store merged with unstored changes:
        the dirty ones and those taken for the changelog, not stored yet; a global table's
        stay so until its changelog brings them back)."""
        cache = self._cache
        pending = {**self._unstored, **self._dirty}
        key_loads = self._key_loads
        value_loads = self._value_loads
        seen: set[Any] = set()
        for raw_key, raw_value in self.store.items():
            key = key_loads(raw_key)
            if key in pending:
                seen.add(key)
                value = cache[key]
                if value is not DELETED:
                    yield key, value
            else:
                yield key, value_loads(raw_value)
        for key in list(pending):
            if key not in seen:
                value = cache.get(key, DELETED)
                if value is not DELETED:  # written, and not in the store yet
                    yield key, value

    def _key_bytes(self, key: Any) -> bytes:
        raw = self._key_dumps(key)
        if raw is None:
            raise ValueError("a table key cannot be None")
        return raw

    def restore(self, changes: Sequence[Change], changelog_offset: int) -> None:
        """Apply changelog records to the store (recovery); the cache forgets those keys."""
        self.store.apply(changes, changelog_offset)
        if self._cache:
            key_loads = self._key_loads
            for key, _value in changes:
                decoded = key_loads(key)
                if decoded not in self._dirty:
                    self._cache.pop(decoded, None)
                    self._unstored.pop(decoded, None)
                    self._written_at.pop(decoded, None)


class _SortedKeys:
    """A sorted set of bytes keys in chunks of at most ``2 * CHUNK`` keys: an insert moves one
    chunk's tail, not every key after it as one sorted list would (a join inserts two keys per
    record into tens of thousands)."""

    CHUNK = 512

    __slots__ = ("_chunks", "_maxes")

    def __init__(self, keys: Iterable[bytes] = ()) -> None:
        ordered = sorted(keys)
        step = self.CHUNK
        self._chunks: list[list[bytes]] = [ordered[i : i + step] for i in range(0, len(ordered), step)]
        self._maxes: list[bytes] = [chunk[-1] for chunk in self._chunks]

    def add(self, key: bytes) -> None:
        """Insert ``key``, which must not be in the set."""
        chunks = self._chunks
        if not chunks:
            chunks.append([key])
            self._maxes.append(key)
            return
        maxes = self._maxes
        i = bisect.bisect_left(maxes, key)
        if i == len(maxes):
            i -= 1
            chunk = chunks[i]
            chunk.append(key)
        else:
            chunk = chunks[i]
            bisect.insort(chunk, key)
        maxes[i] = chunk[-1]
        if len(chunk) > 2 * self.CHUNK:
            half = self.CHUNK
            chunks[i : i + 1] = [chunk[:half], chunk[half:]]
            maxes[i : i + 1] = [chunk[half - 1], chunk[-1]]

    def between(self, lo: bytes, hi: bytes) -> list[bytes]:
        """The keys ``k`` with ``lo <= k < hi``, in order."""
        chunks = self._chunks
        i = bisect.bisect_left(self._maxes, lo)
        out: list[bytes] = []
        first = i
        while i < len(chunks):
            chunk = chunks[i]
            start = bisect.bisect_left(chunk, lo) if i == first else 0  # later chunks start above lo
            end = bisect.bisect_left(chunk, hi)
            out.extend(chunk[start:end])
            if end < len(chunk):
                break
            i += 1
        return out

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            yield from chunk


class SortedPartition(TablePartition):
    """A table partition of raw bytes keys and values with ordered range reads: the store of a
    windowed aggregation (``windows.WindowStore``: get, put, delete, range).

    Writes wait in a sorted overlay until the commit, as ``TablePartition``'s cache does: the
    state manager takes them (``take_changes``), sends them to the changelog, and writes them
    to the store with the changelog offset (``stored``); until then reads see them. A write is
    stamped with ``timestamp_ms``, which the runner sets to the event's time.

    A driver may also *defer* writes it would otherwise repeat every record (its stream-time
    progress): ``defer(owner, writes)`` has ``writes()`` called once, right before the changes
    are next taken for a commit (or forgotten by ``discard_uncommitted``), and what it returns
    is written then with its own timestamps. So the deferred keys reach the changelog and the
    store in the same commit as the writes they describe, as if written with each record;
    between commits only the driver holds them (``flush_deferred`` writes them at once, for a
    driver about to read them from the store).
    """

    __slots__ = ("_deferred", "_dirty_sorted", "_flushing", "_order", "_stamps", "timestamp_ms")

    def __init__(self, partition: int, store: KeyValueStore) -> None:
        super().__init__(partition, store, RAW, RAW)
        self.timestamp_ms = 0
        self._dirty_sorted: dict[bytes, bytes | None] = {}
        self._stamps: dict[bytes, int] = {}
        self._flushing: dict[bytes, bytes | None] = {}
        self._order = _SortedKeys()  # the keys of _dirty and _flushing
        self._deferred: dict[object, Callable[[], Iterable[tuple[bytes, bytes | None, int]]]] = {}

    def defer(self, owner: object, writes: Callable[[], Iterable[tuple[bytes, bytes | None, int]]]) -> None:
        """Call ``writes`` once before the next ``take_changes`` (one call per ``owner``, the
        last given) and write the ``(key, value, timestamp_ms)`` it returns."""
        self._deferred[owner] = writes

    def flush_deferred(self) -> None:
        """Write the deferred writes now."""
        deferred = self._deferred
        if not deferred:
            return
        self._deferred = {}
        for writes in deferred.values():
            for key, value, timestamp_ms in writes():
                self._write(key, value, timestamp_ms)

    def read(self, key: bytes) -> bytes | None:
        if key in self._dirty_sorted:
            return self._dirty_sorted[key]
        if key in self._flushing:
            return self._flushing[key]
        return self.store.get(key)

    def write(self, key: bytes, value: bytes | None) -> None:
        """Set ``key`` (``None`` deletes it)."""
        # _write's body, inlined: this runs for every record of a windowed table or join.
        dirty = self._dirty_sorted
        if key not in dirty and key not in self._flushing:
            self._order.add(key)
        dirty[key] = value
        self._stamps[key] = self.timestamp_ms

    def _write(self, key: bytes, value: bytes | None, timestamp_ms: int) -> None:
        if key not in self._dirty_sorted and key not in self._flushing:
            self._order.add(key)
        self._dirty_sorted[key] = value
        self._stamps[key] = timestamp_ms

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self._merge(self.store.range(lo, hi), self._order.between(lo, hi))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return self._merge(self.store.items(), list(self._order))

    def _merge(self, stored: Iterator[tuple[bytes, bytes]], overlay: list[bytes]) -> Iterator[tuple[bytes, bytes]]:
        """``stored`` with the unstored writes of ``overlay`` (sorted keys) over it."""
        if not overlay:
            yield from stored
            return
        dirty = self._dirty_sorted
        flushing = self._flushing
        values = [dirty[key] if key in dirty else flushing[key] for key in overlay]
        # Both are sorted: one pass, the overlay's value winning on an equal key.
        ahead = next(stored, None)
        for key, value in zip(overlay, values, strict=True):
            while ahead is not None and ahead[0] < key:
                yield ahead
                ahead = next(stored, None)
            if ahead is not None and ahead[0] == key:
                ahead = next(stored, None)
            if value is not None:
                yield key, value
        if ahead is not None:
            yield ahead
            yield from stored

    @property
    def dirty(self) -> int:
        return len(self._dirty_sorted) + len(self._deferred)

    def take_changes(self) -> list[OutgoingChange]:
        self.flush_deferred()
        dirty, self._dirty_sorted = self._dirty_sorted, {}
        stamps, self._stamps = self._stamps, {}
        self._flushing.update(dirty)
        return [(key, value, stamps[key]) for key, value in sorted(dirty.items())]

    def stored(self, changes: Sequence[OutgoingChange]) -> None:
        for key, _value, _ts in changes:
            if key not in self._dirty_sorted:
                self._flushing.pop(key, None)
        self._order = _SortedKeys({*self._dirty_sorted, *self._flushing})

    def restore(self, changes: Sequence[Change], changelog_offset: int) -> None:
        self.store.apply(changes, changelog_offset)

    def discard_uncommitted(self) -> None:
        self.flush_deferred()  # the drivers' deferred writes go with the rest
        super().discard_uncommitted()
        self._dirty_sorted = {}
        self._stamps = {}
        self._flushing = {}
        self._order = _SortedKeys()


class WindowStoreView:
    """A ``SortedPartition`` as the window driver's store (``windows.store.WindowStore``).
    ``get`` and ``put`` are the partition's own ``read`` and ``write``: a driver calls them
    for every record."""

    __slots__ = ("get", "partition", "put")

    def __init__(self, partition: SortedPartition) -> None:
        self.partition = partition
        self.get: Callable[[bytes], bytes | None] = partition.read
        self.put: Callable[[bytes, bytes], None] = partition.write

    def delete(self, key: bytes) -> None:
        self.partition.write(key, None)

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.partition.range(lo, hi)

    def defer(self, owner: object, writes: Callable[[], Iterable[tuple[bytes, bytes | None, int]]]) -> None:
        self.partition.defer(owner, writes)

    def flush_deferred(self) -> None:
        self.partition.flush_deferred()
