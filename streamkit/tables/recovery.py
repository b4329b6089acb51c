"""Opening a table partition: local state checked, then brought up to date from the changelog.

The store records the changelog offset its data reflect (written in the same batch as the
data). Opening a partition therefore replays only the changelog from that offset to the high
watermark. The local state is thrown away and rebuilt from the whole changelog when:

* RocksDB cannot open it (``corrupt``);
* it belongs to another app, table or partition (``foreign``: its recorded identity differs);
* its offset is past the changelog's end (``ahead``: the changelog was deleted and recreated,
  or the state was copied from elsewhere), or before the changelog's start (``behind``: the
  records in between are gone, so the tail cannot bring it up to date).

The changelog is the truth; local state is a cache of it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from streamkit._core.serde import Serde
from streamkit.tables.changelog import ChangelogReader
from streamkit.tables.errors import CorruptStateError
from streamkit.tables.partition import SortedPartition, TablePartition
from streamkit.tables.store import KeyValueStore, MemoryStore, RocksStore, wipe

logger = logging.getLogger(__name__)
RESTORE_CHUNK = 20_000


@dataclass
class RestoreProgress:
    """Where the restore of one table partition is; shown on ``/status`` and ``/tables``."""

    table: str
    partition: int
    start_offset: int = 0
    end_offset: int = 0
    offset: int = 0
    records: int = 0
    wiped: str | None = None  # why local state was rebuilt from the whole changelog
    done: bool = False
    seconds: float = 0.0

    @property
    def replayed(self) -> int:
        """Changelog offsets replayed (the tail past the local state)."""
        return self.offset - self.start_offset


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """What opening one table partition needs to know."""

    table: str
    partition: int
    changelog_topic: str
    identity: str
    store_kind: str  # "rocksdb" or "memory"
    path: str | None  # the RocksDB directory (rocksdb only)
    key_serde: Serde
    value_serde: Serde
    windowed: bool = False  # a SortedPartition (a window driver's store), not a TablePartition


def _open_store(spec: PartitionSpec) -> KeyValueStore:
    if spec.store_kind == "memory" or spec.path is None:
        return MemoryStore()
    os.makedirs(os.path.dirname(spec.path), exist_ok=True)
    return RocksStore(spec.path)


def _open_checked(spec: PartitionSpec, progress: RestoreProgress) -> KeyValueStore:
    try:
        store = _open_store(spec)
    except CorruptStateError as exc:
        _rebuild(spec, progress, f"corrupt: {exc}")
        return _open_store(spec)
    found = store.identity
    if found is not None and found != spec.identity:
        store.close()
        _rebuild(spec, progress, f"foreign: it belongs to {found!r}")
        return _open_store(spec)
    return store


def _rebuild(spec: PartitionSpec, progress: RestoreProgress, reason: str) -> None:
    progress.wiped = reason
    logger.warning(
        "table %s partition %d: local state at %s thrown away (%s); restoring it from %s",
        spec.table, spec.partition, spec.path, reason, spec.changelog_topic,
    )
    if spec.path is not None:
        wipe(spec.path)


async def open_partition(
    spec: PartitionSpec,
    reader: ChangelogReader,
    *,
    progress: RestoreProgress | None = None,
    on_progress: Callable[[RestoreProgress], None] | None = None,
) -> TablePartition:
    """Open ``spec``'s store, bring it up to the changelog's end, and return it, ready."""
    progress = progress or RestoreProgress(spec.table, spec.partition)
    began = time.monotonic()
    store = await asyncio.to_thread(_open_checked, spec, progress)
    try:
        start, end = await reader.bounds(spec.changelog_topic, spec.partition)
        offset = store.changelog_offset
        reason = None
        if offset is not None and offset > end:
            reason = f"ahead: it reflects changelog offset {offset} but the changelog ends at {end}"
        elif offset is not None and offset < start:
            reason = f"behind: it reflects changelog offset {offset} but the changelog starts at {start}"
        if reason is not None:
            await asyncio.to_thread(store.close)
            await asyncio.to_thread(_rebuild, spec, progress, reason)
            store = await asyncio.to_thread(_open_store, spec)
            offset = None
        if offset is None:
            offset = start
        if store.identity is None:
            await asyncio.to_thread(store.set_identity, spec.identity)
        state = (
            SortedPartition(spec.partition, store)
            if spec.windowed
            else TablePartition(spec.partition, store, spec.key_serde, spec.value_serde)
        )
        progress.start_offset = progress.offset = offset
        progress.end_offset = end
        if offset < end:
            logger.info(
                "table %s partition %d: restoring changelog offsets %d..%d of %s",
                spec.table, spec.partition, offset, end, spec.changelog_topic,
            )
        while offset < end:
            chunk = await reader.read(spec.changelog_topic, spec.partition, offset, RESTORE_CHUNK)
            if chunk.next_offset <= offset:
                break  # nothing more readable below the high watermark (aborted tail)
            await asyncio.to_thread(state.restore, chunk.changes, chunk.next_offset)
            offset = chunk.next_offset
            progress.offset = offset
            progress.records += len(chunk.changes)
            if on_progress is not None:
                on_progress(progress)
    except BaseException:
        await asyncio.to_thread(store.close)
        raise
    progress.done = True
    progress.seconds = time.monotonic() - began
    logger.info(
            "table %s partition %d: restored %d records (offsets %d..%d) in %.2f s",
            spec.table, spec.partition, progress.records, progress.start_offset, progress.offset, progress.seconds,
        )
    return state
