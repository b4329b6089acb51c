"""The store a window aggregation keeps its state in, and an in-memory sorted one.

The port is four methods over bytes, so the engine can hand the aggregation a table
partition's store (RocksDB or memory, with its changelog) unchanged:

* ``get(key)``, ``put(key, value)``, ``delete(key)``;
* ``range(lo, hi)``: every ``(key, value)`` with ``lo <= key < hi``, in key order. The
  aggregation never writes to the store while it iterates a range (it lists the range first).

A store that writes to durable state in commits (a table partition) may also let a driver
defer writes (``DeferringStore``): the driver keeps its progress (stream time) in memory and
the store asks for it once, right before a commit takes the store's changes, so the progress
is committed with the data it describes without a write per record.

``SortedMemoryStore`` keeps keys in a sorted list beside a dict: the store the plain-code
driver and its tests use.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

# What a deferred write gives: key, value (None: delete), the timestamp to stamp it with.
DeferredWrite = tuple[bytes, bytes | None, int]


class WindowStore(Protocol):
    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every key in ``[lo, hi)`` with its value, in key order."""
        ...


@runtime_checkable
class DeferringStore(Protocol):
    def defer(self, owner: object, writes: Callable[[], Iterable[DeferredWrite]]) -> None:
        """Call ``writes`` once before the store's changes are next taken for a commit (the
        last one given per ``owner``) and write what it returns then."""
        ...

    def flush_deferred(self) -> None:
        """Call the deferred ``writes`` and write their results now."""
        ...


class SortedMemoryStore:
    """A ``WindowStore`` in memory.

    >>> s = SortedMemoryStore()
    >>> s.put(b"b", b"2"); s.put(b"a", b"1"); s.put(b"c", b"3")
    >>> list(s.range(b"a", b"c"))
    [(b'a', b'1'), (b'b', b'2')]
    """

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        first = bisect.bisect_left(self._keys, lo)
        last = bisect.bisect_left(self._keys, hi)
        for key in self._keys[first:last]:
            yield key, self._data[key]

    def __len__(self) -> int:
        return len(self._keys)
