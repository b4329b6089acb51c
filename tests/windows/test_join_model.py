"""The windowed stream-stream join driver against a brute-force reference model.

The model below uses no streamkit code. It keeps every record that was not late, forever, and
for each new record recomputes from scratch which earlier records of the other side it pairs
with, and which unpaired records' windows the record's timestamp closed. The rules it encodes
are the documented ones (Kafka Streams 3.1+ ``JoinWindows``, no spurious results):

* stream time is the largest timestamp seen on either side;
* a record is late when its timestamp is negative, or when ``ts + within + grace`` is below
  stream time on arrival; a late record pairs with nothing and is kept nowhere;
* a record pairs with every earlier kept record of the other side with the same key and
  ``|ts - other_ts| <= within``, in order of timestamp then arrival; the pair has timestamp
  ``max(ts, other_ts)``; the pairs of a record come after the unpaired records it closed;
* left joins emit each kept left record that paired with nothing before its window closed
  (``stream time > ts + within + grace``), outer joins each such record of either side, with
  the missing side ``None``, in order of timestamp then arrival, when stream time moves.

Because the model never forgets a record, equality with the driver (which expires records
``2 * within + grace`` behind stream time) also shows that expiry changes no answer.
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
        self.outputs: list[Out] = []
        self.late: list[tuple[int, str]] = []
        self.kept: list[tuple[int, str, bytes, int, int]] = []  # arrival, side, key, ts, value
        self.paired: set[int] = set()
        self.emitted_unpaired: set[int] = set()
        self.stream_time = -1

    def outer(self, side: str) -> bool:
        return self.how == "outer" or (self.how == "left" and side == "left")

    def closed(self, ts: int) -> bool:
        return ts + self.within + self.grace < self.stream_time

    def feed(self, i: int, side: str, key: bytes, ts: int, value: int) -> None:
        if ts < 0:
            self.late.append((i, "negative-timestamp"))
            return
        if self.closed(ts):
            self.late.append((i, "window-closed"))
            return
        in_order = sorted(self.kept, key=lambda r: (r[3], r[0]))
        if ts > self.stream_time:
            self.stream_time = ts
            for j, s, k, t, v in in_order:
                if self.outer(s) and self.closed(t) and j not in self.paired and j not in self.emitted_unpaired:
                    self.emitted_unpaired.add(j)
                    self.outputs.append((k, t, v, None) if s == "left" else (k, t, None, v))
        for j, s, k, t, v in in_order:
            if s != side and k == key and abs(t - ts) <= self.within:
                self.paired.update((i, j))
                self.outputs.append((key, max(ts, t), value, v) if side == "left" else (key, max(ts, t), v, value))
        self.kept.append((i, side, key, ts, value))

    def waiting(self) -> list[tuple[str, bytes, int]]:
        """Kept records that may still be emitted unpaired, in emit order."""
        return [
            (s, k, t)
            for j, s, k, t, _v in sorted(self.kept, key=lambda r: (r[3], r[0]))
            if self.outer(s) and j not in self.paired and j not in self.emitted_unpaired
        ]


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
    # Expiry: nothing older than 2 * within + grace (and the expiry step) behind stream time is kept.
    retention = 2 * within + grace
    step = max(1, retention // 4)
    assert all(ts + retention + step >= model.stream_time for _s, _k, ts, _v in join.stored())


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
    run = run_join(0, 0, "inner", [
        ("left", b"k", 5, b"l1"), ("left", b"k", 5, b"l2"), ("right", b"k", 5, b"r1"), ("right", b"k", 5, b"r2"),
    ])
    assert [(r.left, r.right) for r in run.results] == [(b"l1", b"r1"), (b"l2", b"r1"), (b"l1", b"r2"), (b"l2", b"r2")]


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
