"""The window and join drivers' progress over a table partition: written once per commit, not
per record.

Over a ``SortedPartition`` (what the worker gives it) the driver keeps stream time and the
emitted-until bound in memory and the partition takes them right before each commit's
changes (``SortedPartition.defer``). These tests hold that to the per-record writes it
replaces, with the real partition and store code and commits made by hand as the state
manager makes them (``take_changes``, ``store.apply``, ``stored``):

* every commit sends the changelog exactly what a driver writing its progress per record
  sends (keys, values, timestamps), for every window type, records out of order and late;
* a kill between commits (the partition and driver dropped with their unstored writes, a new
  one over the store, the input read again from the committed position) gives exactly the
  answers of an uninterrupted run (the reference model: the plain driver over a memory store);
* stream time moved by ``advance`` alone makes the partition dirty, an aborted transaction's
  progress is forgotten with its other writes, and a second driver over the partition reads
  the first one's progress.

The same two properties hold for the windowed join's progress (stream time, arrival number).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from streamkit.tables.partition import SortedPartition, WindowStoreView
from streamkit.tables.store import MemoryStore
from streamkit.windows import Hopping, Session, Sliding, Tumbling
from streamkit.windows.aggregate import Aggregation, WindowAggregator, WindowResult, run
from streamkit.windows.join import WindowJoin, run_join
from streamkit.windows.spec import WindowSpec

SPECS: list[WindowSpec] = [Tumbling(10, grace=2), Hopping(10, 5, grace=1), Session(3, grace=1), Sliding(4, grace=1)]
BASE = 1_700_000_000_000
IDS: Aggregation[int, list[int]] = Aggregation(
    list, lambda ids, v: [*ids, v], lambda ids: json.dumps(ids).encode(), json.loads, lambda a, b: a + b
)

# Records: (key, ts); mostly forward in steps of up to 4 s, sometimes back up to 20 s (late).
records_st = st.lists(
    st.tuples(st.sampled_from([b"a", b"b", b"c\x00d"]), st.integers(-20_000, 4_000)), min_size=1, max_size=120
).map(lambda steps: _stamped(steps))


def _stamped(steps: list[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
    out, ts = [], BASE
    for key, delta in steps:
        ts = max(BASE, ts + delta) if delta >= 0 else ts
        out.append((key, ts if delta >= 0 else max(0, ts + delta)))
    return out


class PerRecordStore:
    """The partition's view without ``defer``: the driver writes its progress per record."""

    def __init__(self, view: WindowStoreView) -> None:
        self.view = view

    def get(self, key: bytes) -> bytes | None:
        return self.view.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.view.put(key, value)

    def delete(self, key: bytes) -> None:
        self.view.delete(key)

    def range(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        return self.view.range(lo, hi)


class CountingView(WindowStoreView):
    """Counts the driver's direct writes of progress keys (``0x00 ...``)."""

    __slots__ = ("meta_puts",)

    def __init__(self, partition: SortedPartition) -> None:
        super().__init__(partition)
        self.meta_puts = 0
        write = partition.write

        def put(key: bytes, value: bytes) -> None:
            if key[:1] == b"\x00":
                self.meta_puts += 1
            write(key, value)

        self.put = put


def commit(partition: SortedPartition) -> list[tuple[bytes, bytes | None, int]]:
    """What the state manager does at a commit, the changelog's acknowledgement aside."""
    changes = partition.take_changes()
    partition.store.apply([(k, v) for k, v, _ts in changes], 0)
    partition.stored(changes)
    return changes


@settings(max_examples=60, deadline=None)
@given(spec_at=st.integers(0, len(SPECS) - 1), records=records_st, commits=st.sets(st.integers(0, 120)))
def test_each_commit_sends_what_per_record_progress_writes_send(
    spec_at: int, records: list[tuple[bytes, int]], commits: set[int]
) -> None:
    spec = SPECS[spec_at]
    deferred_part, per_record_part = SortedPartition(0, MemoryStore()), SortedPartition(0, MemoryStore())
    view = CountingView(deferred_part)
    deferred = WindowAggregator(spec, IDS, view, emit="close")
    per_record = WindowAggregator(spec, IDS, PerRecordStore(WindowStoreView(per_record_part)), emit="close")
    sent = 0
    for i, (key, ts) in enumerate(records):
        deferred_part.timestamp_ms = per_record_part.timestamp_ms = ts
        a, b = deferred.process(key, ts, i), per_record.process(key, ts, i)
        assert (a.emitted, a.late) == (b.emitted, b.late)
        if i in commits:
            changes = commit(deferred_part)
            assert changes == commit(per_record_part)
            sent += len([c for c in changes if c[0][:1] == b"\x00"])
    assert commit(deferred_part) == commit(per_record_part)
    assert view.meta_puts == 0  # progress went only through the commits
    assert sent <= 2 * len(commits)


def _emitted(steps: Any) -> list[WindowResult[list[int]]]:
    return [w for step in steps for w in step.emitted]


@settings(max_examples=60, deadline=None)
@given(
    spec_at=st.integers(0, len(SPECS) - 1),
    records=records_st,
    cuts=st.tuples(st.integers(0, 120), st.integers(0, 120)),
)
def test_a_kill_between_commits_resumes_with_the_models_answers(
    spec_at: int, records: list[tuple[bytes, int]], cuts: tuple[int, int]
) -> None:
    spec = SPECS[spec_at]
    committed_at = min(cuts[0], len(records))  # records below it are committed
    killed_at = max(committed_at, min(cuts[1], len(records)))  # processed, not committed, then the kill
    store = MemoryStore()
    partition = SortedPartition(0, store)
    driver = WindowAggregator(spec, IDS, WindowStoreView(partition), emit="close")
    steps = []
    for i, (key, ts) in enumerate(records[:killed_at]):
        partition.timestamp_ms = ts
        step = driver.process(key, ts, i)
        if i < committed_at:
            steps.append(step)  # what was sent before the commit (the rest is sent again)
        if i == committed_at - 1:
            commit(partition)
    # The kill: the partition's unstored writes and the driver's memory are gone.
    partition = SortedPartition(0, store)
    driver = WindowAggregator(spec, IDS, WindowStoreView(partition), emit="close")
    for i, (key, ts) in enumerate(records[committed_at:], committed_at):
        partition.timestamp_ms = ts
        steps.append(driver.process(key, ts, i))
    commit(partition)
    model = run(spec, IDS, [(key, ts, i) for i, (key, ts) in enumerate(records)], emit="close")
    assert _emitted(steps) == model.emitted
    assert [s.late for s in steps if s.late is not None] == model.late
    assert list(WindowAggregator(spec, IDS, WindowStoreView(SortedPartition(0, store))).windows()) == model.windows
    assert driver.stream_time.ms == model.stream_time_ms


def test_advance_alone_is_committed_and_an_abort_forgets_it() -> None:
    store = MemoryStore()
    partition = SortedPartition(0, store)
    driver = WindowAggregator(Tumbling(10), IDS, WindowStoreView(partition), emit="close")
    partition.timestamp_ms = BASE
    driver.process(b"k", BASE, 1)
    commit(partition)
    assert partition.dirty == 0
    driver.advance(BASE + 5_000)  # stream time moves, no window changes
    assert partition.dirty > 0, "the progress alone must be committed"
    assert [(k, ts) for k, _v, ts in commit(partition)] == [
        (b"\x00emitted_until", BASE + 5_000), (b"\x00stream_time", BASE + 5_000)
    ]
    assert WindowAggregator(Tumbling(10), IDS, WindowStoreView(SortedPartition(0, store))).stream_time.ms == BASE + 5_000
    # Exactly-once abort: the transaction's progress goes with its other writes.
    emitted = driver.advance(BASE + 10_000).emitted
    assert [w.value for w in emitted] == [[1]]
    partition.discard_uncommitted()
    assert partition.dirty == 0
    restarted = WindowAggregator(Tumbling(10), IDS, WindowStoreView(partition), emit="close")
    assert restarted.stream_time.ms == BASE + 5_000
    assert [w.value for w in restarted.advance(BASE + 10_000).emitted] == [[1]], "emitted again after the abort"


def test_a_second_driver_over_the_partition_reads_the_first_ones_progress() -> None:
    partition = SortedPartition(0, MemoryStore())
    first = WindowAggregator(Tumbling(10), IDS, WindowStoreView(partition), emit="close")
    partition.timestamp_ms = BASE
    first.process(b"k", BASE, 1)
    first.process(b"k", BASE + 12_000, 2)
    second = WindowAggregator(Tumbling(10), IDS, WindowStoreView(partition), emit="close")
    assert second.stream_time.ms == BASE + 12_000
    assert second.advance(BASE + 12_500).emitted == []  # the first window was emitted already
    assert [k for k, _v, _ts in commit(partition)][:2] == [b"\x00emitted_until", b"\x00stream_time"]


# -- the windowed join's progress (stream time and arrival number) --------------------------

join_records_st = st.lists(
    st.tuples(st.sampled_from(["left", "right"]), st.sampled_from([b"a", b"b"]), st.integers(-3_000, 1_500)),
    min_size=1,
    max_size=120,
).map(lambda steps: [(side, key, ts) for (side, _k, _d), (key, ts) in zip(steps, _stamped([(k, d) for _s, k, d in steps]), strict=True)])


@settings(max_examples=60, deadline=None)
@given(how=st.sampled_from(["inner", "left", "outer"]), records=join_records_st, commits=st.sets(st.integers(0, 120)))
def test_each_join_commit_sends_what_per_record_progress_writes_send(
    how: str, records: list[tuple[Any, bytes, int]], commits: set[int]
) -> None:
    deferred_part, per_record_part = SortedPartition(0, MemoryStore()), SortedPartition(0, MemoryStore())
    view = CountingView(deferred_part)
    deferred = WindowJoin(1_000, 500, how, view)
    per_record = WindowJoin(1_000, 500, how, PerRecordStore(WindowStoreView(per_record_part)))
    for i, (side, key, ts) in enumerate(records):
        deferred_part.timestamp_ms = per_record_part.timestamp_ms = ts
        a, b = deferred.process(side, key, ts, b"%d" % i), per_record.process(side, key, ts, b"%d" % i)
        assert (a.results, a.late) == (b.results, b.late)
        if i in commits:
            assert commit(deferred_part) == commit(per_record_part)
    assert commit(deferred_part) == commit(per_record_part)
    assert view.meta_puts == 0


@settings(max_examples=60, deadline=None)
@given(
    how=st.sampled_from(["inner", "left", "outer"]),
    records=join_records_st,
    cuts=st.tuples(st.integers(0, 120), st.integers(0, 120)),
)
@example(  # the restored store holds records the last expiry step left: expiry counts from them
    how="inner",
    records=[("left", b"a", BASE)] * 6 + [("left", b"a", BASE + t) for t in (378, 1878, 2502, 3126)],
    cuts=(9, 0),
)
def test_a_join_killed_between_commits_resumes_with_the_models_answers(
    how: str, records: list[tuple[Any, bytes, int]], cuts: tuple[int, int]
) -> None:
    committed_at = min(cuts[0], len(records))
    killed_at = max(committed_at, min(cuts[1], len(records)))
    store = MemoryStore()
    partition = SortedPartition(0, store)
    join = WindowJoin(1_000, 500, how, WindowStoreView(partition))
    results, late = [], []
    for i, (side, key, ts) in enumerate(records[:killed_at]):
        partition.timestamp_ms = ts
        step = join.process(side, key, ts, b"%d" % i)
        if i < committed_at:
            results.extend(step.results)
            late.extend([step.late] if step.late is not None else [])
        if i == committed_at - 1:
            commit(partition)
    partition = SortedPartition(0, store)  # the kill
    join = WindowJoin(1_000, 500, how, WindowStoreView(partition))
    for i, (side, key, ts) in enumerate(records[committed_at:], committed_at):
        partition.timestamp_ms = ts
        step = join.process(side, key, ts, b"%d" % i)
        results.extend(step.results)
        late.extend([step.late] if step.late is not None else [])
    model = run_join(1_000, 500, how, [(side, key, ts, b"%d" % i) for i, (side, key, ts) in enumerate(records)])
    assert results == model.results
    assert late == model.late
    assert join.stream_time.ms == model.stream_time_ms
    # Expiry (by time, kept in memory and reloaded from the store after the kill): every
    # stored record that can still pair is kept, none older than retention plus one step.
    commit(partition)
    # Each side's store keeps a record while ts > that side's time - retention.
    times, retention, step = join.side_time_ms, 2 * 1_000 + 500, (2 * 1_000 + 500) // 4
    kept = {(side, key, ts) for side, key, ts, _v in join.stored()}
    for side, key, ts in records:
        if ts > times[side] - retention:
            assert (side, key, ts) in kept
    assert all(ts > times[side] - retention - step for side, _key, ts in kept)
    assert list(store.range(b"\x02", b"\x03")) == []  # no index by time in the store


def test_a_store_of_the_earlier_layout_loses_its_index_by_time_and_expires_its_records() -> None:
    """Stores written before the index by time moved to memory hold ``0x02 ts side wk``
    entries: a driver deletes them, and still expires the records they indexed."""
    store = MemoryStore()
    partition = SortedPartition(0, store)
    join = WindowJoin(1_000, 0, "inner", WindowStoreView(partition))
    partition.timestamp_ms = BASE
    join.process("left", b"k", BASE, b"old")
    commit(partition)
    (data_key, _value), = store.range(b"\x01", b"\x02")
    store.apply([(b"\x02" + data_key[-16:-8] + data_key[1:], b"")], 0)  # what the earlier layout wrote
    partition = SortedPartition(0, store)
    join = WindowJoin(1_000, 0, "inner", WindowStoreView(partition))
    partition.timestamp_ms = BASE + 500
    assert [r.left for r in join.process("right", b"k", BASE + 500, b"new").results] == [b"old"]
    commit(partition)
    assert list(store.range(b"\x02", b"\x03")) == []
    partition.timestamp_ms = BASE + 10_000
    join.process("right", b"j", BASE + 10_000, b"later")  # the old records expire, each
    join.process("left", b"j", BASE + 10_000, b"later")  # when its own side's time moves
    commit(partition)
    assert [(side, key) for side, key, _ts, _v in join.stored()] == [("left", b"j"), ("right", b"j")]
