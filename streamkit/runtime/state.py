"""The state manager: the tables' partitions a worker holds, from assignment to revocation.

Partitions. Tables are co-partitioned with the agents' inputs: when a worker is assigned
partition p of an input topic, it holds partition p of every table (that has one), and a
partition task does not start before those partitions are restored (``assign``). On revocation
they are closed after the worker committed (``revoke``).

Commits (``commits.py``): ``send_changes`` sends every table partition's changes since the
last commit to its changelog, *before* the worker flushes its producer; after the flush
(at-least-once) or after the transaction holding them committed (exactly-once),
``store_changes`` writes them to the stores, each in one batch with the changelog offset it
reaches. A crash in between leaves the changelog ahead of the store, never behind: recovery
replays the difference. Under exactly-once the changelogs are read committed, so a restore
never applies what an aborted transaction wrote; a task whose transaction aborted while the
worker runs on is lost (``Rebalancer.lose_task``, ``rebalance.py``): its partitions are
revoked, dropping their uncommitted writes, and reopened from the committed store and
changelog.

State directory: ``<state_dir>/<table>/<partition>/`` per RocksDB table partition.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamkit._core.clock import Clock
from streamkit._core.errors import ConfigError
from streamkit._core.types import TopicPartition
from streamkit.tables.changelog import ChangelogChunk
from streamkit.tables.partition import OutgoingChange, TablePartition
from streamkit.tables.recovery import PartitionSpec, RestoreProgress, open_partition
from streamkit.tables.table import Table
from streamkit.topics.topic import Topic
from streamkit.transport.base import (
    READ_UNCOMMITTED,
    LogClient,
    PartitionReader,
    Producer,
    RecordMetadata,
)

logger = logging.getLogger(__name__)
TAIL_INTERVAL_S = 0.2  # how often replicas look for new changelog records


class _ReaderPort:
    """``tables.changelog.ChangelogReader`` over a transport's ``PartitionReader``."""

    def __init__(self, reader: PartitionReader) -> None:
        self._reader = reader

    async def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        return await self._reader.bounds(TopicPartition(topic, partition))

    async def read(self, topic: str, partition: int, offset: int, max_records: int) -> ChangelogChunk:
        chunk = await self._reader.read(TopicPartition(topic, partition), offset, max_records)
        return ChangelogChunk([(r.key or b"", r.value) for r in chunk.records], chunk.next_offset, chunk.high_watermark)


@dataclass
class _Outgoing:
    """Changes of one table partition on their way: sent, waiting for the log's offset."""

    state: TablePartition
    changes: list[OutgoingChange]
    ack: Awaitable[RecordMetadata]  # of the last change


class StateManager:
    def __init__(
        self, tables: Sequence[Table], client: LogClient, clock: Clock, state_dir: str,
        *, isolation_level: str = READ_UNCOMMITTED,
    ) -> None:
        self.tables = list(tables)
        self._client = client
        # read_committed under exactly-once: restores skip what aborted transactions wrote
        self._isolation_level = isolation_level
        self._clock = clock
        self.state_dir = state_dir
        self._reader: PartitionReader | None = None
        self._held: set[int] = set()
        self.restores: dict[tuple[str, int], RestoreProgress] = {}
        self._lock = asyncio.Lock()
        # Replicas: partitions kept current from their changelogs but not written here
        # (standbys of other workers' partitions, and every partition of a global table).
        self._replicas: dict[tuple[str, int], TablePartition] = {}
        self._standbys: set[int] = set()
        self._tailer: asyncio.Task[None] | None = None

    @property
    def changelog_names(self) -> set[str]:
        return {t.changelog_topic.name for t in self.tables}

    # -- start ---------------------------------------------------------------------------

    async def create_changelogs(
        self, ensure: Callable[[Topic, int], Awaitable[int]], source_partitions: int
    ) -> None:
        """Create each table's changelog (partitions: the table's, else the sources' most)."""
        for table in self.tables:
            wanted = table.declared_partitions or source_partitions
            count = await ensure(table.changelog_topic, wanted)
            if table.declared_partitions is not None and count != table.declared_partitions:
                raise ConfigError(
                    f"table {table.name!r} is declared with {table.declared_partitions} partitions but its "
                    f"changelog {table.changelog_topic.name!r} has {count}"
                )
            if count != source_partitions:
                logger.warning(
                    "table %s has %d partitions but the agents' inputs have up to %d: records of a "
                    "partition the table lacks cannot update it",
                    table.name, count, source_partitions,
                )
            table.partition_count = count
            table.clock = self._clock

    async def open_global_tables(self) -> None:
        """Every partition of every global table, restored here and then kept current."""
        async with self._lock:
            for table in self.tables:
                if table.is_global and table.partition_count is not None:
                    for p in range(table.partition_count):
                        state = await self._open_replica(table, p)
                        table.attach(state)
            self._ensure_tailer()

    # -- assignment ------------------------------------------------------------------------

    async def assign(self, partitions: set[int]) -> None:
        """Open and restore partition p of every table for each new p in ``partitions``."""
        async with self._lock:
            fresh = sorted(partitions - self._held)
            if not fresh or not self.tables:
                self._held |= partitions
                return
            if self._reader is None:
                self._reader = self._client.reader(isolation_level=self._isolation_level)
            port = _ReaderPort(self._reader)
            for p in fresh:
                for table in self.tables:
                    if table.is_global or table.partition_count is None or p >= table.partition_count:
                        continue
                    standby = self._replicas.pop((table.name, p), None)
                    if standby is not None:
                        # Promoted: the warm copy is closed and reopened as the active
                        # partition, which replays only what the copy had not seen yet.
                        await asyncio.to_thread(standby.store.close)
                    progress = self.restores[(table.name, p)] = RestoreProgress(table.name, p)
                    state = await open_partition(self._spec(table, p), port, progress=progress)
                    table.attach(state)
                self._held.add(p)
                self._standbys.discard(p)

    async def set_standbys(self, partitions: set[int]) -> None:
        """Keep warm copies of these partitions of every table (``standby_replicas`` > 0),
        and drop the copies of partitions no longer named."""
        async with self._lock:
            wanted = {
                (t.name, p)
                for t in self.tables
                if t.standby_replicas and not t.is_global and t.partition_count is not None
                for p in partitions - self._held
                if p < t.partition_count
            }
            for key in [k for k in self._replicas if k not in wanted and not self._by_name(k[0]).is_global]:
                state = self._replicas.pop(key)
                await asyncio.to_thread(state.store.close)
            for name, p in sorted(wanted - set(self._replicas)):
                await self._open_replica(self._by_name(name), p)
            self._standbys = {p for _name, p in wanted}
            self._ensure_tailer()

    @property
    def standbys(self) -> set[int]:
        return set(self._standbys)

    def _by_name(self, name: str) -> Table:
        return next(t for t in self.tables if t.name == name)

    async def _open_replica(self, table: Table, p: int) -> TablePartition:
        if self._reader is None:
            self._reader = self._client.reader(isolation_level=self._isolation_level)
        progress = self.restores[(table.name, p)] = RestoreProgress(table.name, p)
        state = await open_partition(self._spec(table, p), _ReaderPort(self._reader), progress=progress)
        self._replicas[(table.name, p)] = state
        return state

    def _ensure_tailer(self) -> None:
        if self._replicas and (self._tailer is None or self._tailer.done()):
            self._tailer = asyncio.ensure_future(self._tail())
            self._tailer.set_name("streamkit:tables-tail")

    async def _tail(self) -> None:
        """Apply what each replica's changelog gained since the last look."""
        while self._replicas:
            async with self._lock:
                await self.catch_up()
            await asyncio.sleep(TAIL_INTERVAL_S)

    async def catch_up(self) -> int:
        """Bring every replica to its changelog's end now; returns the records applied."""
        applied = 0
        assert self._reader is not None or not self._replicas
        for (name, p), state in list(self._replicas.items()):
            topic = self._by_name(name).changelog_topic.name
            assert self._reader is not None
            port = _ReaderPort(self._reader)
            offset = state.store.changelog_offset
            if offset is None:
                offset = (await port.bounds(topic, p))[0]
            while True:
                chunk = await port.read(topic, p, offset, 20_000)
                if chunk.next_offset <= offset:
                    break
                await asyncio.to_thread(state.restore, chunk.changes, chunk.next_offset)
                applied += len(chunk.changes)
                offset = chunk.next_offset
        return applied

    async def revoke(self, partitions: set[int]) -> None:
        """Close the tables' partitions in ``partitions`` (after the worker committed)."""
        async with self._lock:
            for p in sorted(partitions & self._held):
                for table in self.tables:
                    if table.is_global:
                        continue
                    state = table.detach(p)
                    if state is not None:
                        await asyncio.to_thread(state.store.close)
                    self.restores.pop((table.name, p), None)
                self._held.discard(p)

    @property
    def held(self) -> set[int]:
        return set(self._held)

    def _spec(self, table: Table, partition: int) -> PartitionSpec:
        app_id = table.app.id
        path = os.path.join(self.state_dir, table.name, str(partition))
        return PartitionSpec(
            table=table.name,
            partition=partition,
            changelog_topic=table.changelog_topic.name,
            identity=f"{app_id}/{table.name}/{partition}/{table.changelog_topic.name}",
            store_kind=table.store_kind,
            path=path if table.store_kind == "rocksdb" else None,
            key_serde=table.key_serde,
            value_serde=table.value_serde,
            windowed=table.is_windowed,
        )

    # -- commits ---------------------------------------------------------------------------

    async def send_changes(
        self, producer: Producer, *, partitions: set[int] | None = None, global_only: bool = False
    ) -> list[_Outgoing]:
        """Send every table partition's changes since the last call to its changelog; only
        of ``partitions`` of the tables that are not global (a task's, under exactly-once),
        or with ``global_only`` only of the global tables."""
        out: list[_Outgoing] = []
        for table in self.tables:
            if (global_only and not table.is_global) or (partitions is not None and table.is_global):
                continue
            topic = table.changelog_topic.name
            for p in table.held_partitions:
                if partitions is not None and p not in partitions:
                    continue
                state = table.partition_state(p)
                if state is None or not state.dirty:
                    continue
                changes = state.take_changes()
                if not changes:  # only deletions of keys absent before and after: nothing to send
                    continue
                if table.is_global:
                    # Replicas apply every change (this worker's too) from the changelog, so
                    # their offsets never claim records they have not applied.
                    await _send(producer, topic, p, changes)
                    continue
                out.append(_Outgoing(state, changes, await _send(producer, topic, p, changes)))
        return out

    async def store_changes(self, outgoing: list[_Outgoing]) -> None:
        """After the producer's flush: write the sent changes and their offsets to the stores."""
        for item in outgoing:
            offset = (await item.ack).offset + 1
            changes = [(key, value) for key, value, _ts in item.changes]
            await asyncio.to_thread(item.state.store.apply, changes, offset)
            item.state.stored(item.changes)

    async def aclose(self) -> None:
        tailer, self._tailer = self._tailer, None
        if tailer is not None:
            tailer.cancel()
            await asyncio.gather(tailer, return_exceptions=True)
        await self.revoke(set(self._held))
        for table in self.tables:
            if table.is_global:
                for p in table.held_partitions:
                    table.detach(p)
        replicas, self._replicas = self._replicas, {}
        for state in replicas.values():
            await asyncio.to_thread(state.store.close)
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.aclose()

    def describe(self) -> list[dict[str, Any]]:
        """Per table: partitions held here and their restore state (``/tables``, ``/status``)."""
        out = []
        for table in self.tables:
            parts = []
            for p in sorted(self._held):
                if table.partition_count is None or p >= table.partition_count:
                    continue
                progress = self.restores.get((table.name, p))
                state = table.partition_state(p)
                parts.append({
                    "partition": p,
                    "state": "ready" if state is not None else "restoring",
                    "keys": state.store.estimated_keys() if state is not None else None,
                    "restored_records": progress.records if progress else 0,
                    "restore_from": progress.start_offset if progress else None,
                    "restore_to": progress.end_offset if progress else None,
                    "wiped": progress.wiped if progress else None,
                })
            for (name, p), _replica in sorted(self._replicas.items()):
                if name == table.name and not table.is_global:
                    parts.append({"partition": p, "state": "standby"})
            if table.is_global:
                parts = [{"partition": p, "state": "replica", "keys": s.store.estimated_keys()}
                         for p in table.held_partitions if (s := table.partition_state(p)) is not None]
            entry: dict[str, Any] = {
                "name": table.name,
                "global": table.is_global,
                "changelog": table.changelog_topic.name,
                "store": table.store_kind,
                "partitions": table.partition_count,
                "held": parts,
                "help": table.help,
            }
            late = getattr(table, "late_records", None)
            if late is not None:  # a table that sets late records aside counts them (joins)
                entry["late_records"] = late
            out.append(entry)
        return out


async def _send(
    producer: Producer, topic: str, partition: int, changes: list[OutgoingChange]
) -> Awaitable[RecordMetadata]:
    """Send ``changes`` in order; returns the last one's acknowledgement."""
    send_nowait = producer.send_nowait
    for key, value, timestamp in changes[:-1]:
        wait = send_nowait(topic, partition, key, value, timestamp)
        if wait is not None:
            await wait
    key, value, timestamp = changes[-1]
    return await producer.send(topic, key, value, partition=partition, timestamp_ms=timestamp)
