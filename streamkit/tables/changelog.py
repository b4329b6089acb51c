"""The port between tables and a log: how changes go out and how state comes back.

Tables never import ``log/`` or ``transport/``; the runtime implements these two protocols over
its producer and a partition reader, and bytes and ints are all that cross.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from streamkit.tables.partition import OutgoingChange


class ChangelogWriter(Protocol):
    async def write(self, topic: str, partition: int, changes: Sequence[OutgoingChange]) -> int:
        """Send ``changes`` in order to ``topic``-``partition``, wait until the log holds them,
        and return the offset after the last one."""
        ...


@dataclass(frozen=True, slots=True)
class ChangelogChunk:
    changes: list[tuple[bytes, bytes | None]]  # key, value (None: tombstone), in offset order
    next_offset: int  # where the next read starts (past control records and compacted gaps)
    high_watermark: int


class ChangelogReader(Protocol):
    async def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """The log start offset and high watermark of ``topic``-``partition``."""
        ...

    async def read(self, topic: str, partition: int, offset: int, max_records: int) -> ChangelogChunk:
        """Records from ``offset`` on (raises ``ChangelogGapError`` below the log start)."""
        ...
