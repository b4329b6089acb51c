"""The aggregation driver on known examples: Kafka Streams' session example, sliding windows,
emit modes, restore from the store, and expiry keeping state bounded."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from streamkit._core.errors import ConfigError
from streamkit.windows import (
    Aggregation,
    Hopping,
    Session,
    Sliding,
    SortedMemoryStore,
    Tumbling,
    WindowAggregator,
    WindowResult,
    WindowSpec,
    merge_session,
    run,
)

SUM: Aggregation[int, int] = Aggregation(
    initializer=lambda: 0,
    adder=lambda total, v: total + v,
    serialize=lambda total: str(total).encode(),
    deserialize=int,
    merger=lambda a, b: a + b,
)
VALUES: Aggregation[int, list[int]] = Aggregation(
    initializer=list,
    adder=lambda values, v: sorted([*values, v]),
    serialize=lambda values: json.dumps(values).encode(),
    deserialize=json.loads,
    merger=lambda a, b: sorted(a + b),
)


def ms(value: int) -> timedelta:
    return timedelta(milliseconds=value)


def table(results: list[WindowResult[list[int]]]) -> dict[tuple[int, int], list[int] | None]:
    return {(w.start_ms, w.end_ms): w.value for w in results}


def test_kafka_streams_session_example_merges_two_sessions() -> None:
    # SessionWindows' javadoc: gap 5; A at 10, 12, 20 makes [10, 12] and [20, 20]; a record at
    # 16 then bridges them into [10, 20] holding all four values. (The grace keeps [10, 12]
    # open at stream time 20; see the next test for when it is closed.)
    agg = WindowAggregator(Session(ms(5), grace=ms(10)), VALUES)
    for ts, value in ((10, 1), (12, 2), (20, 3)):
        agg.process(b"A", ts, value)
    assert table(list(agg.windows())) == {(10, 12): [1, 2], (20, 20): [3]}
    step = agg.process(b"A", 16, 4)
    assert step.late is None
    # The merged-away sessions are emitted as removed, then the merged one; each stamped with
    # its session's end, as KStreamSessionWindowAggregate forwards them.
    assert step.emitted == [
        WindowResult(b"A", 10, 12, None, 12),
        WindowResult(b"A", 20, 20, None, 20),
        WindowResult(b"A", 10, 20, [1, 2, 3, 4], 20),
    ]
    assert table(list(agg.windows())) == {(10, 20): [1, 2, 3, 4]}


def test_a_closed_session_is_final_and_never_merged_again() -> None:
    # The same records without grace: at stream time 20, [10, 12] is closed (20 > 12 + 5), so
    # emit="close" has emitted it as final. The record at 16 (not late: its session would
    # close only after 16 + 5) joins [20, 20] alone.
    result = run(
        Session(ms(5)),
        VALUES,
        [(b"A", 10, 1), (b"A", 12, 2), (b"A", 20, 3), (b"A", 16, 4), (b"A", 40, 5)],
        emit="close",
    )
    assert [(w.start_ms, w.end_ms, w.value) for w in result.emitted] == [
        (10, 12, [1, 2]),
        (16, 20, [3, 4]),
    ]
    assert result.late == []


def test_merge_session_ignores_closed_and_unreachable_sessions() -> None:
    spec = Session(ms(5))
    sessions = [(0, 2, "closed"), (10, 12, "open"), (30, 31, "far")]
    merge = merge_session(spec, sessions, 14, stream_time_ms=14)
    assert (merge.start_ms, merge.end_ms, merge.late) == (10, 14, None)
    assert merge.replaces == [(10, 12, "open")]
    # At stream time 16, [0, 2] is closed (16 >= 2 + 5) and [10, 12] is not (16 < 12 + 5): a
    # record at 6 reaches both but joins only the open one.
    merge = merge_session(spec, sessions, 6, stream_time_ms=16)
    assert (merge.start_ms, merge.end_ms) == (6, 12)
    assert merge.replaces == [(10, 12, "open")]
    # At 17, [10, 12] is closed too (emitted, and past the session store's retention): the
    # record would make a session of its own, [6, 6], which ends before 17 - 5 = 12: Kafka
    # Streams drops it.
    assert merge_session(spec, sessions, 6, stream_time_ms=17).late == "window-closed"
    # A record ending exactly at stream time - gap - grace is kept (KStreamSessionWindowAggregate
    # drops only mergedWindow.end() < windowCloseTime).
    edge = merge_session(spec, sessions, 12, stream_time_ms=17)
    assert (edge.start_ms, edge.end_ms, edge.replaces, edge.late) == (12, 12, [], None)
    late = merge_session(spec, [], 3, stream_time_ms=20)
    assert late.late == "window-closed"


def test_session_records_inside_a_session_update_it_in_place() -> None:
    agg = WindowAggregator(Session(ms(5)), SUM)
    agg.process(b"k", 10, 1)
    agg.process(b"k", 14, 2)
    # Inside [10, 14]: the same window, but Kafka Streams removes the merged session and
    # writes the new one (KStreamSessionWindowAggregate.process), so a tombstone comes first.
    step = agg.process(b"k", 12, 3)
    assert step.emitted == [WindowResult(b"k", 10, 14, None, 14), WindowResult(b"k", 10, 14, 6, 14)]


def test_sliding_windows_follow_kafka_streams() -> None:
    # d = 10: records at 10, 15, 30 make [0, 10] {10}, [5, 15] {10, 15}, the right window of 10
    # [11, 21] {15}, and [20, 30] {30}; 15 has no later record within 11 ms, so no [16, 26].
    result = run(
        Sliding(ms(10), grace=ms(100)), VALUES, [(b"k", 10, 10), (b"k", 15, 15), (b"k", 30, 30)]
    )
    assert table(result.windows) == {
        (0, 10): [10],
        (5, 15): [10, 15],
        (11, 21): [15],
        (20, 30): [30],
    }
    # The same records out of order give the same windows.
    shuffled = run(
        Sliding(ms(10), grace=ms(100)), VALUES, [(b"k", 30, 30), (b"k", 15, 15), (b"k", 10, 10)]
    )
    assert table(shuffled.windows) == table(result.windows)


def test_a_closed_session_takes_no_late_record() -> None:
    # Issue 29: gap 1 s, grace 0. a's session [1001000, 1003000] closes when stream time
    # reaches 1003000 + 1000: emitted then, and a record at 1000807 that would have extended it
    # is dropped (Kafka Streams: a@1001000-1003000 = 4, not a@1000807-1003000 = 5).
    records = [(b"a", t, 1) for t in (1001000, 1002000, 1002500, 1003000)]
    records += [(b"b", 1004000, 1), (b"a", 1000807, 1)]
    result = run(Session(1), SUM, records, emit="close")
    assert [(w.key, w.start_ms, w.end_ms, w.value) for w in result.emitted] == [(b"a", 1001000, 1003000, 4)]
    assert [late.ts_ms for late in result.late] == [1000807]


def test_a_closed_session_the_retention_keeps_merges_a_record_that_reaches_it() -> None:
    # Found by the oracle's long run (538 of 10,000 session cases, a day's retention). Gap 4,
    # grace 1: [10, 10] closes at stream time 15, so at 16 (b's record) it is emitted; a record
    # at 12 is not late (its session would end at 12 >= 16 - 5). With the default retention (gap + grace)
    # the session store hides [10, 10] and the record makes [12, 12]; with a longer one
    # (Materialized.withRetention; expires=) KStreamSessionWindowAggregate finds it and merges.
    records = [(b"a", 10, 9), (b"b", 16, 3), (b"a", 12, 2), (b"b", 40, 1)]

    def closed(retention_ms: int | None) -> list[tuple[bytes, int, int, int]]:
        aggregator = WindowAggregator(Session(ms(4), grace=ms(1)), SUM, emit="close", retention_ms=retention_ms)
        emitted = [w for key, ts, value in records for w in aggregator.process(key, ts, value).emitted]
        return [(w.key, w.start_ms, w.end_ms, w.value) for w in emitted if w.key == b"a"]

    assert closed(None) == [(b"a", 10, 10, 9), (b"a", 12, 12, 2)]
    assert closed(1000) == [(b"a", 10, 10, 9), (b"a", 10, 12, 11)]


def test_a_session_made_closed_is_emitted_at_once_and_forgotten() -> None:
    # Gap 5, grace 0, stream time 20: a record of k at 15 (= 20 - 5) is not dropped
    # (KStreamSessionWindowAggregate keeps mergedWindow.end() >= windowCloseTime) but its
    # session is closed as it is made: suppress emits it at once, and the store's retention
    # hides it from the next record at 15, which makes [15, 15] again.
    records = [(b"a", 20, 1), (b"k", 15, 2), (b"k", 15, 4)]
    result = run(Session(ms(5)), SUM, records, emit="close")
    assert [(w.key, w.start_ms, w.end_ms, w.value) for w in result.emitted] == [
        (b"k", 15, 15, 2), (b"k", 15, 15, 4),
    ]
    assert result.late == []
    assert [(w.key, w.start_ms, w.value) for w in result.windows] == [(b"a", 20, 1)]


def test_a_sliding_window_written_after_it_closed_is_emitted_again() -> None:
    # d = 5 ms, grace 0: [5, 10] closes as the record at 10 makes it (stream time 10 reaches
    # its end), so suppress(untilWindowCloses) emits it at once; it still takes records
    # (KStreamSlidingWindowAggregate: end >= stream time - grace), and a second record at 10
    # changes it: Kafka Streams emits it again, and so does streamkit.
    result = run(Sliding(ms(5)), SUM, [(b"k", 10, 1), (b"k", 10, 2)], emit="close")
    assert [(w.start_ms, w.end_ms, w.value) for w in result.emitted] == [(5, 10, 1), (5, 10, 3)]


def test_a_skipped_value_changes_nothing_not_even_stream_time() -> None:
    # Kafka Streams' sliding aggregation skips a null value before it observes the record's
    # time (KStreamSlidingWindowAggregate.process); the DSL passes that test as ``skip``.
    agg = WindowAggregator(Sliding(ms(5)), SUM, skip=lambda v: v is None)
    agg.process(b"k", 10, 1)
    step = agg.process(b"k", 100, None)
    assert step.emitted == [] and step.late is None and agg.stream_time.ms == 10
    assert table(list(agg.windows())) == {(5, 10): 1}


def test_a_sliding_record_whose_left_window_is_closed_goes_to_the_open_windows() -> None:
    # d = 3, grace = 4, records at 25, 19, 22. Kafka Streams accepts 19 (19 + 3 >= 25 - 4,
    # KStreamSlidingWindowAggregate.process) but its left window [16, 19] is closed (19 < 21)
    # and no open window exists yet that holds it; [19, 22], made when 22 arrives, starts from
    # the initializer (no earlier window is left of 22 in the store), so 19 is in no window.
    result = run(
        Sliding(ms(3), grace=ms(4)), VALUES, [(b"k", 25, 25), (b"k", 19, 19), (b"k", 22, 22)]
    )
    assert result.late == []
    assert table(result.windows) == {(19, 22): [22], (22, 25): [22, 25], (23, 26): [25]}


def test_a_late_sliding_record_counts_in_the_right_window_of_the_record_before() -> None:
    # Issue 29: d = 3 s, grace 0; a at 1013931, b up to 1016600, then a at 1015265. Its own
    # left window [1012265, 1015265] is closed, but the right window of 1013931,
    # [1013932, 1016932], is open: Kafka Streams makes it (createPreviousRecordRightWindow)
    # with the late record in it, and emits it on close.
    records = [(b"a", 1013931, 1), (b"b", 1016000, 2), (b"b", 1016600, 3), (b"a", 1015265, 4)]
    result = run(Sliding(3), VALUES, records)
    assert result.late == []
    assert table([w for w in result.windows if w.key == b"a"]) == {
        (1010931, 1013931): [1], (1013932, 1016932): [4],
    }
    closing = run(Sliding(3), VALUES, [*records, (b"b", 1016932, 5)], emit="close")
    assert (b"a", 1013932, 1016932, [4]) in [(w.key, w.start_ms, w.end_ms, w.value) for w in closing.emitted]


def test_time_windows_late_records_and_emit_close() -> None:
    spec = Tumbling(ms(10), grace=ms(2))
    result = run(
        spec,
        SUM,
        [(b"k", 1, 1), (b"k", 11, 2), (b"k", 9, 4), (b"k", 12, 8), (b"k", 5, 16), (b"k", -3, 32)],
        emit="close",
    )
    # 9 arrives at stream time 11 < 10 + 2: still counted. At 12 the window [0, 10) closes;
    # 5 is then late, and a negative timestamp belongs to no window.
    assert [(w.start_ms, w.value) for w in result.emitted] == [(0, 5)]
    assert [(late.ts_ms, late.reason, late.stream_time_ms) for late in result.late] == [
        (5, "window-closed", 12),
        (-3, "negative-timestamp", 12),
    ]
    assert [(w.start_ms, w.value) for w in result.windows] == [(10, 10)]


def test_advance_closes_windows_without_a_record() -> None:
    agg = WindowAggregator(Hopping(ms(10), ms(5)), SUM, emit="close")
    agg.process(b"k", 7, 1)
    assert agg.advance(9).emitted == []
    assert [(w.start_ms, w.value) for w in agg.advance(10).emitted] == [(0, 1)]
    assert [(w.start_ms, w.value) for w in agg.advance(100).emitted] == [(5, 1)]
    assert agg.advance(50).emitted == []  # stream time never goes back
    assert list(agg.windows()) == []


@pytest.mark.parametrize(
    "spec",
    [
        Tumbling(ms(10), grace=ms(3)),
        Hopping(ms(10), ms(3), grace=ms(3)),
        Sliding(ms(7), grace=ms(3)),
        Session(ms(4), grace=ms(3)),
    ],
)
def test_a_restored_store_carries_on_with_the_same_answers(spec: WindowSpec) -> None:
    records = [(bytes([65 + i % 3]), (i * 7919) % 60 + i // 2, i) for i in range(120)]
    records += [(b"A", 10, 120), (b"B", 200, 121), (b"B", 150, 122), (b"C", 201, 123)]
    whole = run(spec, VALUES, records, emit="close")
    store = SortedMemoryStore()
    first = run(spec, VALUES, records[:50], emit="close", store=store)
    # A new aggregator over the same store: stream time and what was emitted come back.
    second = run(spec, VALUES, records[50:], emit="close", store=store)
    assert first.emitted + second.emitted == whole.emitted
    assert first.late + second.late == whole.late
    assert second.windows == whole.windows
    assert whole.emitted and whole.late  # the input exercises both


@pytest.mark.parametrize(
    "spec",
    [
        Tumbling(ms(100), grace=ms(50)),
        Hopping(ms(100), ms(10), grace=ms(50)),
        Sliding(ms(100), grace=ms(50)),
        Session(ms(20), grace=ms(50)),
    ],
)
def test_expiry_keeps_state_bounded_over_a_long_run(spec: WindowSpec) -> None:
    store = SortedMemoryStore()
    agg = WindowAggregator(spec, SUM, store, emit="close")
    keys = [f"user-{i}".encode() for i in range(5)]
    sizes = []
    emitted = 0
    for i in range(20_000):
        # Time advances 3 ms a record, with records up to 40 ms out of order.
        ts = 3 * i - (i * 37) % 41
        step = agg.process(keys[i % len(keys)], ts, 1)
        emitted += len(step.emitted)
        sizes.append(len(store))
    # Each key holds only the windows of the last retention period (plus its index entries
    # and two progress entries), however long the run.
    assert max(sizes[1_000:]) <= max(sizes[:1_000]) * 1.5
    assert max(sizes) < 2 * len(keys) * 2 * (spec.retention_ms // 3 + 10)
    assert emitted > 1_000
    # Every window left is one stream time still needs.
    now = agg.stream_time.ms
    # (Sliding windows are kept by the window store's time, the largest start written, at
    # least stream time - max_difference.)
    if isinstance(spec, Sliding):
        now -= spec.max_difference_ms
    assert all(not spec.expired(w.end_ms, now) for w in agg.windows())


def test_bad_driver_arguments_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="emit must be 'update' or 'close'"):
        WindowAggregator(Tumbling(1), SUM, emit="final")  # type: ignore[arg-type]
    no_merger = Aggregation(lambda: 0, lambda a, v: a + v, lambda a: b"", lambda b: 0)
    with pytest.raises(ConfigError, match="session windows need an aggregation with a merger"):
        WindowAggregator(Session(1), no_merger)


def test_windows_of_one_key_and_fetch() -> None:
    agg = WindowAggregator(Tumbling(ms(10), grace=ms(10)), SUM)
    for key, ts in ((b"a", 1), (b"a\x00", 2), (b"a", 12), (b"b", 3)):
        agg.process(key, ts, 1)
    assert [(w.key, w.start_ms) for w in agg.windows(b"a")] == [(b"a", 0), (b"a", 10)]
    assert [w.key for w in agg.windows()] == [b"a", b"a", b"a\x00", b"b"]
    assert agg.fetch(b"a", 10, 20) == 1
    assert agg.fetch(b"a", 20, 30) is None
