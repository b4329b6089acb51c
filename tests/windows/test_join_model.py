"""The windowed stream-stream join driver against a reference model of Kafka Streams' join.

The model below uses no streamkit code. It keeps every record forever, and for each new record
recomputes from scratch which records of the other side it pairs with, and which waiting
unpaired records are emitted. The rules it encodes are Kafka Streams 4.4's
(``KStreamKStreamJoin.KStreamKStreamJoinProcessor``, symmetric ``JoinWindows`` of
``within`` before and after, the outer-join store on, its emit interval 0):

* stream time is the largest timestamp seen on either side (``sharedTimeTracker``); each
  side's store has its own time, the largest timestamp stored on it;
* no record is dropped as late (``process`` has no such check): a record pairs with every kept
  record of the other side with the same key and ``|ts - other_ts| <= within`` that the other
  side's store still returns, ``other_ts > other side's time - (2 * within + grace)``
  (the store's retention, ``AbstractRocksDBSegmentedBytesStore.getActualFrom``), in order of
  timestamp then arrival; the pair has timestamp ``max(ts, other_ts)``
  (``emitInnerJoin``);
* a record of an outer side that paired with nothing is emitted unpaired at once when
  ``ts + within < stream time`` (``timeTo < sharedTimeTracker.streamTime``), else waits in the
  outer-join store; ``minTime`` becomes the smaller of it and its timestamp;
* when a record at stream time arrives (``inputRecordTimestamp == streamTime``) and
  ``minTime + within + grace < stream time``, the waiting records are looked at in order of
  timestamp, side (right first), key and arrival (``emitNonJoinedOuterRecords``): ``minTime``
  becomes each one's timestamp in turn; the look stops once an open record of each side was
  seen; a closed one (``ts + within + grace < stream time``) is emitted unpaired and leaves;
  all this before the record's own pairs;
* a pair removes the other record from the waiting ones (``putIfAbsent(otherKey, null)``);
* the late records streamkit reports: a record of a side that is not outer, that paired with
  nothing and that its own store hides at once (no record can ever pair with it).

Because the model never forgets a record, equality with the driver (which expires records
``2 * within + grace`` behind each side's time) also shows that expiry changes no answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamkit._core.errors import ConfigError
from streamkit.windows import WindowJoin, run_join
from streamkit.windows.join import Codec
from streamkit.windows.store import SortedMemoryStore

Rec = tuple[str, bytes, int, int]  # side, key, timestamp, value (the record's id)
Out = tuple[bytes, int, Any, Any]  # key, timestamp, left value, right value


class Model:
    def __init__(self, within: int, grace: int, how: str) -> None:
        self.within, self.grace, self.how = within, grace, how
        self.retention = 2 * within + grace
        self.outputs: list[Out] = []
        self.late: list[tuple[int, str]] = []
        self.kept: list[tuple[int, str, bytes, int, int]] = []  # arrival, side, key, ts, value
        self.waiting_records: list[tuple[int, str, bytes, int, int]] = []  # the outer-join store
        self.stream_time = -1
        self.side_time = {"left": -1, "right": -1}
        self.min_time: int | None = None  # None: Long.MAX_VALUE

    def outer(self, side: str) -> bool:
        return self.how == "outer" or (self.how == "left" and side == "left")

    def emit_non_joined(self) -> None:
        now, span = self.stream_time, self.within + self.grace
        if self.min_time is not None and self.min_time + span >= now:
            return
        self.min_time = None
        left_open = right_open = False
        order = sorted(self.waiting_records, key=lambda r: (r[3], r[1] == "left", r[2], r[0]))
        for record in order:
            _j, s, k, t, v = record
            self.min_time = t
            if left_open and right_open:
                break
            if t + span >= now:
                left_open, right_open = left_open or s == "left", right_open or s == "right"
                continue
            self.waiting_records.remove(record)
            self.outputs.append((k, t, v, None) if s == "left" else (k, t, None, v))

    def feed(self, i: int, side: str, key: bytes, ts: int, value: int) -> None:
        if ts < 0:
            self.late.append((i, "negative-timestamp"))
            return
        self.stream_time = max(self.stream_time, ts)
        if self.how != "inner" and ts == self.stream_time:
            self.emit_non_joined()
        other = "right" if side == "left" else "left"
        visible_after = self.side_time[other] - self.retention
        partners = sorted(
            (r for r in self.kept if r[1] == other and r[2] == key and abs(r[3] - ts) <= self.within
             and r[3] > visible_after),
            key=lambda r: (r[3], r[0]),
        )
        for j, _s, _k, t, v in partners:
            self.outputs.append((key, max(ts, t), value, v) if side == "left" else (key, max(ts, t), v, value))
            self.waiting_records = [r for r in self.waiting_records if r[0] != j]
        self.kept.append((i, side, key, ts, value))
        self.side_time[side] = max(self.side_time[side], ts)
        if partners:
            return
        if self.outer(side):
            if ts + self.within < self.stream_time:
                self.outputs.append((key, ts, value, None) if side == "left" else (key, ts, None, value))
            else:
                self.waiting_records.append((i, side, key, ts, value))
                self.min_time = ts if self.min_time is None else min(self.min_time, ts)
        elif ts <= self.side_time[side] - self.retention:
            self.late.append((i, "window-closed"))

    def waiting(self) -> list[tuple[str, bytes, int]]:
        """The records waiting in the outer-join store, in emit order."""
        order = sorted(self.waiting_records, key=lambda r: (r[3], r[1] == "left", r[2], r[0]))
        return [(s, k, t) for _j, s, k, t, _v in order]


def model_join(within: int, grace: int, how: str, records: list[Rec]) -> Model:
    model = Model(within, grace, how)
    for i, (side, key, ts, value) in enumerate(records):
        model.feed(i, side, key, ts, value)
    return model


INTS = Codec(lambda v: str(v).encode(), lambda b: int(b))

records_strategy = st.lists(
    st.tuples(
        st.sampled_from(["left", "right"]),
        st.sampled_from([b"a", b"b", b"c\x00"]),
        st.integers(-2, 80) | st.integers(0, 5),  # a narrow range too: duplicate timestamps
    ),
    max_size=60,
)


def _number(raw: list[tuple[str, bytes, int]]) -> list[Rec]:
    return [(side, key, ts, i) for i, (side, key, ts) in enumerate(raw)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raw=records_strategy,
    within=st.integers(0, 12),
    grace=st.integers(0, 10),
    how=st.sampled_from(["inner", "left", "outer"]),
)
def test_the_driver_matches_the_model(raw: list[tuple[str, bytes, int]], within: int, grace: int, how: str) -> None:
    records = _number(raw)
    model = model_join(within, grace, how, records)
    join = WindowJoin(within, grace, how, left=INTS, right=INTS)
    results: list[Out] = []
    late: list[tuple[int, str]] = []
    for i, (side, key, ts, value) in enumerate(records):
        step = join.process(side, key, ts, value)  # type: ignore[arg-type]
        results.extend((r.key, r.ts_ms, r.left, r.right) for r in step.results)
        if step.late is not None:
            late.append((i, step.late.reason))
            assert step.late.ts_ms == ts and step.late.value == value
    assert results == model.outputs
    assert late == model.late
    assert list(join.unpaired()) == model.waiting()
    assert join.stream_time.ms == model.stream_time
    # Expiry: nothing older than 2 * within + grace (and the expiry step) behind its side's time
    # is kept.
    retention = 2 * within + grace
    step = max(1, retention // 4)
    assert all(ts + retention + step >= model.side_time[s] for s, _k, ts, _v in join.stored())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=records_strategy, cut=st.integers(0, 60), how=st.sampled_from(["inner", "left", "outer"]))
def test_a_driver_over_the_same_store_carries_on_with_the_same_answers(
    raw: list[tuple[str, bytes, int]], cut: int, how: str
) -> None:
    records = _number(raw)
    store = SortedMemoryStore()
    first = run_join(6, 3, how, [(s, k, t, str(v).encode()) for s, k, t, v in records[:cut]], store)  # type: ignore[misc]
    second = run_join(6, 3, how, [(s, k, t, str(v).encode()) for s, k, t, v in records[cut:]], store)  # type: ignore[misc]
    whole = run_join(6, 3, how, [(s, k, t, str(v).encode()) for s, k, t, v in records])  # type: ignore[misc]
    assert first.results + second.results == whole.results
    assert [(x.key, x.ts_ms, x.reason) for x in first.late + second.late] == [
        (x.key, x.ts_ms, x.reason) for x in whole.late
    ]


def test_duplicate_timestamps_all_pair_in_arrival_order() -> None:
    run = run_join(1, 0, "inner", [
        ("left", b"k", 5, b"l1"), ("left", b"k", 5, b"l2"), ("right", b"k", 5, b"r1"), ("right", b"k", 5, b"r2"),
    ])
    assert [(r.left, r.right) for r in run.results] == [(b"l1", b"r1"), (b"l2", b"r1"), (b"l1", b"r2"), (b"l2", b"r2")]


def test_a_join_window_of_zero_with_no_grace_pairs_nothing() -> None:
    # Kafka Streams 4.4 keeps each side for the window's size plus grace, 0 ms here, and its
    # store returns nothing kept for 0 ms (getActualFrom: observed time - retention + 1), so
    # JoinWindows.ofTimeDifferenceAndGrace(0, 0) never pairs, even equal timestamps.
    run = run_join(0, 0, "inner", [("left", b"k", 5, b"l"), ("right", b"k", 5, b"r")])
    assert run.results == [] and [late.ts_ms for late in run.late] == [5, 5]


def test_a_late_record_pairs_with_what_the_other_side_still_holds() -> None:
    # Issue 29: inner join, 1 s, grace 0. The left side holds a at 1018100 (its store's time);
    # a right record at 1017948 arrives when stream time is 1019100 (a right record moved it):
    # Kafka Streams drops no late record, and the left store still returns 1018100.
    records = [("left", b"a", 1018100, b"l"), ("right", b"b", 1019100, b"x"), ("right", b"a", 1017948, b"r")]
    run = run_join(1000, 0, "inner", records)  # type: ignore[arg-type]
    assert [(r.key, r.ts_ms, r.left, r.right) for r in run.results] == [(b"a", 1018100, b"l", b"r")]
    assert run.late == []


def test_a_late_unpaired_record_of_an_outer_side_is_emitted_at_once() -> None:
    # Issue 29: outer join, 1 s, grace 0: right a at 1004304 after right a at 1006600 pairs with
    # nothing and its window ended before stream time (1004304 + 1000 < 1006600): Kafka Streams
    # emits null+v at once (timeTo < sharedTimeTracker.streamTime).
    records = [("right", b"a", 1006600, b"r1"), ("right", b"a", 1004304, b"r2")]
    run = run_join(1000, 0, "outer", records)  # type: ignore[arg-type]
    assert [(r.key, r.ts_ms, r.left, r.right) for r in run.results] == [(b"a", 1004304, None, b"r2")]


def test_an_unpaired_left_record_waits_until_its_window_closes() -> None:
    join = WindowJoin(10, 5, "left")
    assert join.process("left", b"k", 100, b"l").results == []
    # Stream time reaches exactly ts + within + grace: a right record at 110 may still come.
    assert join.process("left", b"other", 115, b"x").results == []
    assert [(r.left, r.right) for r in join.process("right", b"k", 110, b"r").results] == [(b"l", b"r")]
    # Paired now: it is never emitted unpaired.
    assert all(r.right is not None or r.key != b"k" for r in join.process("left", b"z", 1_000, b"z").results)


def test_outer_joins_emit_both_sides_unpaired_with_their_own_timestamps() -> None:
    run = run_join(2, 0, "outer", [("right", b"k", 10, b"r"), ("left", b"j", 11, b"l"), ("left", b"k", 20, b"late-enough")])
    assert [(r.key, r.ts_ms, r.left, r.right) for r in run.results] == [(b"k", 10, None, b"r"), (b"j", 11, b"l", None)]


def test_state_stays_bounded_over_advancing_time() -> None:
    store = SortedMemoryStore()
    join = WindowJoin(50, 20, "outer", store)
    for i in range(5_000):
        join.process("left" if i % 2 else "right", str(i % 7).encode(), i * 10, b"v")
    # Records kept: those within 2 * within + grace = 120 ms of stream time (+ the expiry step
    # of 30 ms), with their index entries and unpaired marks, plus the progress key.
    assert len(list(join.stored())) <= 16
    assert len(store) <= 16 * 3 + 1


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ConfigError, match="one of"):
        WindowJoin(10, 0, "full")
    with pytest.raises(ConfigError, match="within >= 0"):
        WindowJoin(-1, 0, "inner")
    with pytest.raises(ConfigError, match="'left' or 'right'"):
        WindowJoin(10).process("middle", b"k", 1, b"v")  # type: ignore[arg-type]
