"""Key-value stores of table partitions: the protocol, ``MemoryStore`` and ``RocksStore``.

A store holds the state of one partition of one table as bytes: the key and value as the
table's serializers wrote them to the changelog. Beside the data it keeps two facts written in
the same atomic batch as the data they describe:

* ``changelog_offset``: the next changelog offset the data does not reflect yet; recovery
  replays the changelog from there;
* ``identity``: which app, table and partition the data belongs to, so a state directory
  copied from elsewhere or left by another table is detected and rebuilt, never served.

``RocksStore`` is the only module that imports ``rocksdict``. Its data sit in RocksDB's default
column family and the two facts in a column family of their own (``streamkit``), so no data
key can collide with them. A directory RocksDB cannot open is reported as
``CorruptStateError``; the state manager then wipes it and restores from the changelog. One
locked by another open store is ``StateLockedError``, and is never wiped.
"""

from __future__ import annotations

import bisect
import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from typing import Protocol

from streamkit.tables.errors import CorruptStateError, StateLockedError

Change = tuple[bytes, bytes | None]  # key, value (None deletes the key)

_OFFSET_KEY = b"changelog_offset"
_IDENTITY_KEY = b"identity"
_META_CF = "streamkit"


class KeyValueStore(Protocol):
    """The state of one table partition, as bytes."""

    def get(self, key: bytes) -> bytes | None: ...

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Every key starting with ``prefix`` and its value, in key order."""
        ...

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every key in ``[lo, hi)`` and its value, in key order."""
        ...

    def apply(self, changes: Sequence[Change], changelog_offset: int) -> None:
        """Write ``changes`` and the changelog offset they reach, atomically."""
        ...

    @property
    def changelog_offset(self) -> int | None:
        """The next changelog offset the data does not reflect (None: never written)."""
        ...

    @property
    def identity(self) -> str | None: ...

    def set_identity(self, identity: str) -> None: ...

    def estimated_keys(self) -> int:
        """About how many keys the store holds (exact for memory, RocksDB's estimate)."""
        ...

    def close(self) -> None: ...


class MemoryStore:
    """A store in a dict: state lives as long as the process (``store="memory"``).

    Keys are also kept in a sorted list, so a range read costs its length, not the store's
    size (windowed tables and joins read ranges per record). The state manager writes a commit's
    changes (``apply``) in a thread while the partition's task may read: reads of several keys
    take a snapshot under a lock, so they never see a dict changing under them."""

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # the keys of _data, sorted
        self._lock = threading.Lock()
        self._offset: int | None = None
        self._identity: str | None = None

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            keys, data = self._keys, self._data
            first = bisect.bisect_left(keys, prefix)
            pairs = []
            for key in keys[first:] if prefix else keys:
                if not key.startswith(prefix):
                    break
                pairs.append((key, data[key]))
        return iter(pairs)

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            keys, data = self._keys, self._data
            selected = keys[bisect.bisect_left(keys, lo) : bisect.bisect_left(keys, hi)]
            pairs = [(key, data[key]) for key in selected]
        return iter(pairs)

    def apply(self, changes: Sequence[Change], changelog_offset: int) -> None:
        with self._lock:
            data = self._data
            keys = self._keys
            for key, value in changes:
                if value is None:
                    if data.pop(key, None) is not None:
                        del keys[bisect.bisect_left(keys, key)]
                else:
                    if key not in data:
                        bisect.insort(keys, key)
                    data[key] = value
            self._offset = changelog_offset

    @property
    def changelog_offset(self) -> int | None:
        return self._offset

    @property
    def identity(self) -> str | None:
        return self._identity

    def set_identity(self, identity: str) -> None:
        self._identity = identity

    def estimated_keys(self) -> int:
        return len(self._data)

    def close(self) -> None:
        return None


class RocksStore:
    """A store in a RocksDB directory (``store="rocksdb"``, the default)."""

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        import rocksdict

        self.path = path
        self._rocksdict = rocksdict
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(not read_only)
        options.create_missing_column_families(not read_only)
        families = {_META_CF: rocksdict.Options(raw_mode=True)}
        access = rocksdict.AccessType.read_only() if read_only else rocksdict.AccessType.read_write()
        if read_only and not os.path.isdir(path):
            raise CorruptStateError(f"no table state at {path}")
        try:
            self._db = rocksdict.Rdict(path, options, column_families=families, access_type=access)
            self._meta = self._db.get_column_family(_META_CF)
            self._meta_handle = self._db.get_column_family_handle(_META_CF)
        except Exception as exc:  # rocksdict raises plain exceptions for every open failure
            if "lock" in str(exc).lower():
                # Another store (in this or another process) has it open: not damage, and
                # never a reason to wipe it.
                raise StateLockedError(f"the table state at {path} is in use by another worker: {exc}") from exc
            raise CorruptStateError(f"cannot open the table state at {path}: {exc}") from exc
        self._closed = False

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        if prefix:
            it.seek(prefix)
        else:
            it.seek_to_first()
        while it.valid():
            key: bytes = it.key()
            if prefix and not key.startswith(prefix):
                return
            yield key, it.value()
            it.next()

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        # The upper bound lets RocksDB stop at ``hi`` instead of stepping over the deleted
        # keys that follow (windows and joins delete behind them as stream time moves).
        options = self._rocksdict.ReadOptions()
        options.set_iterate_upper_bound(hi)
        it = self._db.iter(options)
        it.seek(lo)
        while it.valid():
            key: bytes = it.key()
            if key >= hi:
                return
            yield key, it.value()
            it.next()

    def apply(self, changes: Sequence[Change], changelog_offset: int) -> None:
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        for key, value in changes:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        batch.put(_OFFSET_KEY, str(changelog_offset).encode(), self._meta_handle)
        self._db.write(batch)

    @property
    def changelog_offset(self) -> int | None:
        raw = self._meta.get(_OFFSET_KEY)
        if raw is None:
            return None
        try:
            return int(raw)
        except ValueError as exc:
            raise CorruptStateError(f"the table state at {self.path} has a bad changelog offset {raw!r}") from exc

    @property
    def identity(self) -> str | None:
        raw = self._meta.get(_IDENTITY_KEY)
        return None if raw is None else bytes(raw).decode(errors="replace")

    def set_identity(self, identity: str) -> None:
        self._meta.put(_IDENTITY_KEY, identity.encode())

    def estimated_keys(self) -> int:
        found = self._db.property_int_value("rocksdb.estimate-num-keys")
        return int(found or 0)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            # The column family's handles share the database: drop them first, or RocksDB's
            # lock outlives close().
            del self._meta, self._meta_handle
            self._db.close()
            del self._db


def wipe(path: str) -> None:
    """Delete the state directory at ``path`` (it is rebuilt from the changelog)."""
    shutil.rmtree(path, ignore_errors=True)
