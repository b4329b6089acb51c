"""Window specs: validation, units, assignment and the close/expiry rules at their edges."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from streamkit._core.errors import ConfigError
from streamkit.windows import Hopping, Session, Sliding, StreamTime, Tumbling, duration_ms


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Tumbling(0), "window size must be at least 1 ms"),
        (lambda: Tumbling(-1), "window size must be at least 1 ms"),
        (lambda: Tumbling(0.0001), "window size must be at least 1 ms"),
        (lambda: Tumbling(10, grace=-1), "grace must not be negative"),
        (lambda: Hopping(10, 0), "window step must be at least 1 ms"),
        (lambda: Hopping(10, 11), "window step (11000 ms) must not be larger than the window size (10000 ms)"),
        (lambda: Hopping(10, 5, grace=timedelta(seconds=-1)), "grace must not be negative"),
        (lambda: Sliding(-1), "max_difference must not be negative"),
        (lambda: Sliding(1, grace=-0.5), "grace must not be negative"),
        (lambda: Session(0), "session gap must be at least 1 ms"),
        (lambda: Session(timedelta(0)), "session gap must be at least 1 ms"),
        (lambda: Session(5, grace=-2), "grace must not be negative"),
        (lambda: Tumbling("60"), "window size must be seconds (int or float) or a timedelta, not '60'"),  # type: ignore[arg-type]
        (lambda: Tumbling(True), "window size must be seconds"),
        (lambda: Tumbling(float("nan")), "window size must be a finite duration"),
        (lambda: Session(float("inf")), "session gap must be a finite duration"),
        (lambda: Tumbling(1e20), "window size is too large: 1e+20"),
    ],
)
def test_bad_arguments_raise_config_error(make: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        make()  # type: ignore[operator]
    assert message in str(info.value)


def test_durations_are_seconds_or_timedelta_stored_as_ms() -> None:
    assert Tumbling(60).size_ms == 60_000
    assert Tumbling(1.5, grace=0.25).grace_ms == 250
    assert Tumbling(timedelta(minutes=2)).size_ms == 120_000
    assert Hopping(timedelta(milliseconds=10), 0.005).step_ms == 5
    assert Sliding(0).max_difference_ms == 0  # as Kafka Streams: records of the same ms only
    assert Session(timedelta(seconds=30), grace=timedelta(seconds=5)).grace_ms == 5_000
    assert duration_ms(0.1 + 0.2, "x") == 300  # rounded to whole ms, not truncated to 299


def test_specs_are_frozen_values() -> None:
    spec = Hopping(10, 5, grace=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.size_ms = 1  # type: ignore[misc]
    assert spec == Hopping(timedelta(seconds=10), 5.0, grace=1)
    assert hash(spec) == hash(Hopping(10, 5, grace=1))
    assert Tumbling(10) != Hopping(10, 10)  # different declarations, same windows
    assert Tumbling(10).windows_for(12_345) == Hopping(10, 10).windows_for(12_345)
    assert repr(Tumbling(60, grace=10)) == "Tumbling(size_ms=60000, grace_ms=10000)"


def test_time_windows_are_aligned_to_the_epoch_and_half_open() -> None:
    hop = Hopping(timedelta(milliseconds=10), timedelta(milliseconds=5))
    assert hop.windows_for(0) == [(0, 10)]  # never a window starting before the epoch
    assert hop.windows_for(4) == [(0, 10)]
    assert hop.windows_for(5) == [(0, 10), (5, 15)]
    assert hop.windows_for(10) == [(5, 15), (10, 20)]  # end is exclusive
    assert hop.windows_for(-1) == []
    tumble = Tumbling(timedelta(milliseconds=10))
    assert [tumble.windows_for(ts) for ts in (9, 10)] == [[(0, 10)], [(10, 20)]]
    assert Hopping(timedelta(milliseconds=10), timedelta(milliseconds=3)).windows_for(10) == [
        (3, 13),
        (6, 16),
        (9, 19),
    ]


def test_close_rules_at_their_edges() -> None:
    # Time window [0, 10), grace 5: closed when stream time >= end + grace.
    tumble = Tumbling(timedelta(milliseconds=10), grace=timedelta(milliseconds=5))
    assert not tumble.closed(10, 14) and tumble.closed(10, 15)
    assert tumble.retention_ms == 15
    # Sliding [0, 10] (inclusive end), grace 5: closed (emitted) when stream time >= end +
    # grace (suppress(untilWindowCloses)), takes records until stream time > end + grace
    # (KStreamSlidingWindowAggregate.updateWindowAndForward).
    sliding = Sliding(timedelta(milliseconds=10), grace=timedelta(milliseconds=5))
    assert not sliding.closed(10, 14) and sliding.closed(10, 15)
    assert sliding.accepts(10, 15) and not sliding.accepts(10, 16)
    assert sliding.retention_ms == 25  # 2 * max_difference + grace, as Kafka Streams
    # The store hides a window once its start is retention behind the store's time
    # (AbstractRocksDBSegmentedBytesStore.getActualFrom: start > time - retention).
    assert not sliding.expired(10, 24) and sliding.expired(10, 25)
    # Session ending at 10, gap 3, grace 5: closed when stream time >= end + gap + grace
    # (emitted by suppress, hidden by the session store's retention of gap + grace).
    session = Session(timedelta(milliseconds=3), grace=timedelta(milliseconds=5))
    assert not session.closed(10, 17) and session.closed(10, 18)
    assert session.retention_ms == 8
    assert not session.expired(10, 17) and session.expired(10, 18)


def test_sliding_left_window_folds_early_records_into_zero_to_d() -> None:
    spec = Sliding(timedelta(milliseconds=10))
    assert spec.left_window(25) == (15, 25)
    assert spec.left_window(10) == (0, 10)
    assert spec.left_window(3) == (0, 10)  # Kafka Streams: no window starts before 0


def test_stream_time_only_moves_forward() -> None:
    time = StreamTime()
    assert time.ms == -1
    assert time.advance(0) is True
    assert time.advance(0) is False
    assert time.advance(7) is True
    assert time.advance(3) is False
    assert time.ms == 7
    assert time == StreamTime(7)
