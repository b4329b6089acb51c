"""Sparse offset and time indexes of one segment, in Kafka's on-disk layout.

``.index``: entries of 8 bytes, big-endian ``INT32 relative offset, INT32 position``: the last
offset of a batch (relative to the segment's base offset) and the file position where that
batch starts. An entry is added when at least ``index.interval.bytes`` were appended since the
previous one, so a lookup narrows a scan to about that many bytes.

``.timeindex``: entries of 12 bytes, big-endian ``INT64 timestamp, INT32 relative offset``: the
largest timestamp seen so far in the segment and the last offset of the batch that carried
it. Timestamps in it strictly increase.

Both are kept in memory as arrays (the lookups are plain bisects) and appended to their files;
``load`` checks a file's shape and returns ``None`` when it cannot be trusted, so the segment
rebuilds it from the log.
"""

from __future__ import annotations

import bisect
import os
import struct
import sys
from array import array
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
_BIG_ENDIAN = sys.byteorder == "big"


def _to_native(raw: bytes, typecode: str) -> array[int]:
    values = array(typecode)
    values.frombytes(raw)
    if not _BIG_ENDIAN:
        values.byteswap()
    return values


class OffsetIndex:
    """Relative last offset -> batch position, sorted by both."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._offsets: array[int] = array("i")
        self._positions: array[int] = array("i")
        self._pending = bytearray()

    def __len__(self) -> int:
        return len(self._offsets)

    @classmethod
    def load(cls, path: Path, base_offset: int, log_size: int) -> OffsetIndex | None:
        """The index in ``path``, or None when it is missing or inconsistent with the log."""
        index = cls(path, base_offset)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) % OFFSET_ENTRY.size:
            return None
        pairs = _to_native(raw, "i")
        index._offsets = pairs[0::2]
        index._positions = pairs[1::2]
        if not index._is_consistent(log_size):
            return None
        return index

    def _is_consistent(self, log_size: int) -> bool:
        offsets, positions = self._offsets, self._positions
        if not offsets:
            return True
        if offsets[0] < 0 or positions[0] < 0 or positions[-1] >= log_size:
            return False
        return all(offsets[i] < offsets[i + 1] for i in range(len(offsets) - 1)) and all(
            positions[i] < positions[i + 1] for i in range(len(positions) - 1)
        )

    def append(self, last_offset: int, position: int) -> None:
        relative = last_offset - self.base_offset
        if self._offsets and relative <= self._offsets[-1]:
            return
        # Readers bisect ``_offsets`` without a lock, then index ``_positions``: the position
        # goes in first so every offset they can see has one.
        self._positions.append(position)
        self._offsets.append(relative)
        self._pending += OFFSET_ENTRY.pack(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(last offset, position) of the greatest entry with last offset <= ``offset``.

        (base_offset - 1, 0) when none is; the caller scans forward from the position.
        """
        i = bisect.bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset - 1, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def last_entry(self) -> tuple[int, int] | None:
        if not self._offsets:
            return None
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def boundary_before(self, position: int) -> int:
        """The greatest indexed batch start <= ``position`` (0 when none): a batch boundary, so
        a read can end exactly there instead of trimming a partial batch."""
        i = bisect.bisect_right(self._positions, position) - 1
        return self._positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or after ``position`` and rewrite the file."""
        keep = bisect.bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]
        self.rewrite()

    def rewrite(self) -> None:
        self._pending.clear()
        data = bytearray()
        for off, pos in zip(self._offsets, self._positions, strict=True):
            data += OFFSET_ENTRY.pack(off, pos)
        _write_file(self.path, bytes(data))

    def flush(self, *, fsync: bool) -> None:
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
                if fsync:
                    os.fsync(f.fileno())
            self._pending.clear()


class TimeIndex:
    """Largest timestamp so far -> relative last offset of its batch, both increasing."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._timestamps: array[int] = array("q")
        self._offsets: array[int] = array("i")
        self._pending = bytearray()

    def __len__(self) -> int:
        return len(self._timestamps)

    @classmethod
    def load(cls, path: Path, base_offset: int, last_relative_offset: int) -> TimeIndex | None:
        index = cls(path, base_offset)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) % TIME_ENTRY.size:
            return None
        for ts, rel in TIME_ENTRY.iter_unpack(raw):
            index._timestamps.append(ts)
            index._offsets.append(rel)
        if not index._is_consistent(last_relative_offset):
            return None
        return index

    def _is_consistent(self, last_relative_offset: int) -> bool:
        ts, offs = self._timestamps, self._offsets
        if not ts:
            return True
        if offs[0] < 0 or offs[-1] > last_relative_offset:
            return False
        return all(ts[i] < ts[i + 1] and offs[i] <= offs[i + 1] for i in range(len(ts) - 1))

    @property
    def max_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    def append(self, timestamp: int, last_offset: int) -> None:
        # Kafka's "no timestamp" (-1) is never indexed; entries only ever increase.
        if timestamp < 0 or (self._timestamps and timestamp <= self._timestamps[-1]):
            return
        relative = last_offset - self.base_offset
        # Offsets first: readers bisect ``_timestamps`` and then index ``_offsets``.
        self._offsets.append(relative)
        self._timestamps.append(timestamp)
        self._pending += TIME_ENTRY.pack(timestamp, relative)

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the newest entry: the segment's max timestamp."""
        if not self._timestamps:
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def lookup(self, timestamp: int) -> int:
        """The last offset of the greatest entry with timestamp < ``timestamp``, else base - 1.

        Every batch up to that offset has all its timestamps below ``timestamp``, so a search
        for the first record at or after ``timestamp`` may start just after it.
        """
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        if i < 0:
            return self.base_offset - 1
        return self.base_offset + self._offsets[i]

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop entries for offsets at or after ``next_offset`` and rewrite the file."""
        keep = bisect.bisect_left(self._offsets, next_offset - self.base_offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self.rewrite()

    def rewrite(self) -> None:
        self._pending.clear()
        data = bytearray()
        for ts, off in zip(self._timestamps, self._offsets, strict=True):
            data += TIME_ENTRY.pack(ts, off)
        _write_file(self.path, bytes(data))

    def flush(self, *, fsync: bool) -> None:
        if self._pending:
            with open(self.path, "ab") as f:
                f.write(self._pending)
                if fsync:
                    os.fsync(f.fileno())
            self._pending.clear()


def _write_file(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
