"""``TablePartition``: the live state of one partition of one table, held by one worker.

Reads and writes go through a cache of decoded values in front of the store. A write only
touches the cache and marks the key dirty; every commit the state manager takes the dirty
changes (``take_changes``), sends them to the changelog, and once the log acknowledged them
writes them to the store in one batch together with the changelog offset they reach
(``apply``). So a store never holds a change the changelog lacks, and the offset it records is
exactly where recovery resumes. Between the two steps the changes stay readable in the cache.

The cache keeps clean entries too (values read, or written and since stored) up to
``CACHE_LIMIT`` keys, so hot keys are decoded once per commit interval, not per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from streamkit._core.serde import Serde
from streamkit.tables.store import Change, KeyValueStore

CACHE_LIMIT = 200_000


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

    __slots__ = ("_cache", "_dirty", "_key_dumps", "_key_loads", "_value_dumps", "_value_loads", "partition", "store")

    def __init__(self, partition: int, store: KeyValueStore, key_serde: Serde, value_serde: Serde) -> None:
        self.partition = partition
        self.store = store
        self._key_dumps: Callable[[Any], bytes | None] = key_serde.dumps
        self._key_loads: Callable[[bytes | None], Any] = key_serde.loads
        self._value_dumps: Callable[[Any], bytes | None] = value_serde.dumps
        self._value_loads: Callable[[bytes | None], Any] = value_serde.loads
        self._cache: dict[Any, Any] = {}  # key -> value, or DELETED
        self._dirty: dict[Any, int] = {}  # key -> timestamp of its last write

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
        self._dirty[key] = timestamp_ms

    def delete(self, key: Any, timestamp_ms: int) -> None:
        self._cache[key] = DELETED
        self._dirty[key] = timestamp_ms

    @property
    def dirty(self) -> int:
        """How many keys changed since the last ``take_changes``."""
        return len(self._dirty)

    def take_changes(self) -> list[OutgoingChange]:
        """The changes since the last call, encoded, in the order keys were first changed."""
        dirty, self._dirty = self._dirty, {}
        cache = self._cache
        key_dumps = self._key_dumps
        value_dumps = self._value_dumps
        out: list[OutgoingChange] = []
        for key, timestamp in dirty.items():
            value = cache[key]
            key_bytes = key_dumps(key)
            if key_bytes is None:
                raise ValueError("a table key cannot be None")
            out.append((key_bytes, None if value is DELETED else value_dumps(value), timestamp))
        return out

    def stored(self, changes: Sequence[OutgoingChange]) -> None:
        """``changes`` reached the store: deleted keys leave the cache, which stays bounded."""
        cache = self._cache
        dirty = self._dirty
        if len(cache) >= CACHE_LIMIT:
            self._evict()
            return
        for key, value, _ts in changes:
            if value is None:
                decoded = self._key_loads(key)
                if cache.get(decoded, MISSING) is DELETED and decoded not in dirty:
                    del cache[decoded]

    def _evict(self) -> None:
        """Drop every clean entry (dirty ones must stay until they are stored)."""
        dirty = self._dirty
        cache = self._cache
        self._cache = {key: cache[key] for key in dirty}

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Every key and value of this partition (the store merged with unstored changes)."""
        cache = self._cache
        dirty = self._dirty
        key_loads = self._key_loads
        value_loads = self._value_loads
        seen: set[Any] = set()
        for raw_key, raw_value in self.store.items():
            key = key_loads(raw_key)
            if key in dirty:
                seen.add(key)
                value = cache[key]
                if value is not DELETED:
                    yield key, value
            else:
                yield key, value_loads(raw_value)
        for key in list(dirty):
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
