"""A long run over advancing event time keeps the stored windows bounded.

A worker (``streamkit.testing``'s driver runs the real one: RocksDB stores, changelogs,
commits) counts views of 20 users into a tumbling, a hopping, a session and a sliding window
table while event time moves on by 40 minutes, in rounds, with a restart half-way (expiry
must carry on from the restored state). Tens of thousands of windows are created; after each
round the keys in each table's RocksDB stores must stay under a bound set by the windows that
can be open at once (a few per user), not by how many there ever were. At the end the same
holds for each changelog as compaction leaves it (the latest record per key, tombstoned keys
gone): expired windows are deleted from the store and tombstoned in the changelog.

The last test: the per-record expiry scan does not re-read the tombstones of windows expired
earlier (it starts where the previous scan stopped), so its cost does not grow with them.
"""

from __future__ import annotations

import bisect
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import streamkit as sk
from streamkit._core.types import TopicPartition
from streamkit.tables.partition import SortedPartition
from streamkit.testing import AppDriver
from streamkit.transport.connect import open_log_client
from streamkit.windows import Hopping, Session, Sliding, Tumbling
from streamkit.windows.aggregate import Aggregation, WindowAggregator

BASE = 1_700_000_040_000  # a round minute (ms)
USERS = [f"user-{i}" for i in range(20)]
PARTITIONS = 2
ROUNDS = 16
ROUND_S = 150  # event time each round covers
VIEWS_PER_ROUND = 600  # one every 250 ms, users in turn
SPECS: dict[str, Any] = {
    "tumbling": Tumbling(10, grace=5),
    "hopping": Hopping(20, 5, grace=5),
    "session": Session(3, grace=2),
    "sliding": Sliding(4, grace=2),
}
# Windows a user can have stored at once (open, or closed but not yet expired), generously:
# tumbling: the current one and the one in grace; hopping: size/step + 1 per window end in
# grace; sessions: views 5 s apart per user (20 users, 250 ms apart) make one session per view
# within gap + grace; sliding: two per record within max_difference + grace.
OPEN_PER_USER = {"tumbling": 3, "hopping": 6, "session": 3, "sliding": 8}
# Per window a data entry and an index entry; plus a stream-time and an emit entry per partition.
ENTRIES_PER_WINDOW = 2
META_PER_PARTITION = 2


def the_app() -> tuple[sk.App, sk.Topic, dict[str, Any]]:
    app = sk.App("wsize", commit_interval=0.5)
    views = app.topic("views", key_type=str, value_type=str, partitions=PARTITIONS)
    tables = {}
    for kind, spec in SPECS.items():
        out = app.topic(f"closed-{kind}", key_type=str, value_type=dict, partitions=PARTITIONS)
        tables[kind] = app.stream(views).group_by_key(name=kind).window(spec).count(f"views-{kind}", key_type=str)
        tables[kind].to_stream(emit="close").to(out)
    return app, views, tables


def bound(kind: str) -> int:
    return len(USERS) * OPEN_PER_USER[kind] * ENTRIES_PER_WINDOW + PARTITIONS * META_PER_PARTITION


def stored_keys(table: Any) -> int:
    """Keys in the table's RocksDB stores (what the last commit wrote)."""
    total = 0
    for p in table.table.held_partitions:
        state = table.table.partition_state(p)
        assert isinstance(state, SortedPartition)
        total += sum(1 for _ in state.store.items())
    return total


async def compacted_changelog(data_dir: str, topic: str) -> tuple[int, int]:
    """(records in the changelog, keys compaction keeps: the latest record per key, not a tombstone)."""
    client = open_log_client(f"file://{data_dir}")
    await client.start()
    reader = client.reader()
    records = 0
    latest: dict[bytes | None, bytes | None] = {}
    try:
        for p in range(PARTITIONS):
            tp = TopicPartition(topic, p)
            offset, end = await reader.bounds(tp)
            while offset < end:
                chunk = await reader.read(tp, offset, 10_000)
                for r in chunk.records:
                    latest[r.key] = r.value
                records += len(chunk.records)
                offset = chunk.next_offset
    finally:
        await reader.aclose()
        await client.aclose()
    return records, sum(1 for v in latest.values() if v is not None)


async def test_stored_windows_stay_bounded_as_event_time_advances() -> None:
    app, views, tables = the_app()
    peaks = {kind: 0 for kind in SPECS}
    created = {kind: 0 for kind in SPECS}
    with tempfile.TemporaryDirectory(prefix="windows-size-") as tmp:
        dirs = {"data_dir": str(Path(tmp) / "log"), "state_dir": str(Path(tmp) / "state")}
        view = 0
        for half in (range(ROUNDS // 2), range(ROUNDS // 2, ROUNDS)):  # a restart in between
            async with AppDriver(app, **dirs) as driver:
                for _round in half:
                    for _ in range(VIEWS_PER_ROUND):
                        ts = BASE + view * ROUND_S * 1000 // VIEWS_PER_ROUND
                        await driver.send(views, "/page", key=USERS[view % len(USERS)], timestamp=ts)
                        view += 1
                    await driver.process()
                    for kind, table in tables.items():
                        peaks[kind] = max(peaks[kind], stored_keys(table))
                for kind in SPECS:
                    created[kind] += len(await driver.read(app.topics[f"closed-{kind}"])) - created[kind]
        changelogs = {kind: await compacted_changelog(dirs["data_dir"], t.table.changelog_topic.name)
                      for kind, t in tables.items()}
    for kind in SPECS:
        # Not vacuous: far more windows were closed over the run than the bound allows at once.
        assert created[kind] > 10 * bound(kind), (kind, created[kind], bound(kind))
        assert 0 < peaks[kind] <= bound(kind), (kind, peaks[kind], bound(kind))
        records, kept = changelogs[kind]
        assert records > created[kind]  # every window went through the changelog ...
        assert 0 < kept <= bound(kind), (kind, kept, bound(kind))  # ... and compaction keeps few


class TombstoneStore:
    """A ``WindowStore`` that keeps a deleted key as a tombstone a range read must step over,
    as RocksDB does until it compacts and as a table partition's overlay does until the next
    commit; it counts the entries its range reads visit."""

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._data: dict[bytes, bytes | None] = {}
        self.visited = 0

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        if key in self._data:
            self._data[key] = None

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in self._keys[bisect.bisect_left(self._keys, lo) : bisect.bisect_left(self._keys, hi)]:
            self.visited += 1
            value = self._data[key]
            if value is not None:
                yield key, value


def test_the_expiry_scan_per_record_does_not_grow_with_the_windows_expired_before() -> None:
    count = Aggregation(lambda: 0, lambda n, _v: n + 1, lambda n: b"%d" % n, int)
    store = TombstoneStore()
    aggregator = WindowAggregator(Tumbling(10), count, store, emit="close")
    visited_per_record = []
    for i in range(60_000):  # 1 ms apart, 100 users: 100 windows end every 10 s, 600 in all
        before = store.visited
        aggregator.process(b"user-%d" % (i % 100), BASE + i, None)
        visited_per_record.append(store.visited - before)
    # What one record's steps must read: its window, and the windows that close or expire now
    # (at most the 100 users' windows of one end), not the tombstones of all expired before
    # (the defect: 100 more every 10 s of event time, 500 by the end of this run).
    assert max(visited_per_record[-10_000:]) <= 2 * 100 + 10


class RangeCountingStore(TombstoneStore):
    """A ``TombstoneStore`` that counts its range reads (each is a RocksDB iterator in a worker)."""

    def __init__(self) -> None:
        super().__init__()
        self.ranges = 0

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        self.ranges += 1
        return super().range(lo, hi)


def test_a_step_of_stream_time_that_closes_and_expires_nothing_reads_no_range() -> None:
    count = Aggregation(lambda: 0, lambda n, _v: n + 1, lambda n: b"%d" % n, int)
    store = RangeCountingStore()
    aggregator = WindowAggregator(Tumbling(10), count, store, emit="close")
    emitted = []
    for i in range(60_000):  # 1 ms apart, 100 users: each record moves stream time
        if i == 35_000:  # a restarted driver finds the open windows' ends in the index
            aggregator = WindowAggregator(Tumbling(10), count, store, emit="close")
        emitted += aggregator.process(b"user-%d" % (i % 100), BASE + i, None).emitted
    # Every window but the open one was emitted once, with its full count ...
    assert sorted((w.start_ms, w.key) for w in emitted) == sorted(
        (BASE + 10_000 * n, b"user-%d" % u) for n in range(5) for u in range(100)
    )
    assert {w.value for w in emitted} == {100}
    # ... and the range reads were those of the 5 steps that closed (and expired) windows,
    # plus loading the ends twice (one per driver), not two per record.
    assert store.ranges <= 2 * 5 + 2, store.ranges
