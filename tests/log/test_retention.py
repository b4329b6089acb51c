"""Retention: plan_retention's rules, and deleting whole segments from a live partition."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit._core.clock import ManualClock
from streamkit._core.types import TopicPartition
from streamkit.log.config import TopicConfig
from streamkit.log.errors import OffsetOutOfRangeError
from streamkit.log.manager import LogManager
from streamkit.log.partition import Partition
from streamkit.log.records import NewRecord, decode_batches
from streamkit.log.retention import SegmentSummary, plan_retention

T0 = 1_700_000_000_000


def summaries(*segments: tuple[int, int]) -> list[SegmentSummary]:
    """(size, max timestamp) pairs -> summaries with made-up base offsets."""
    return [SegmentSummary(10 * i, size, ts) for i, (size, ts) in enumerate(segments)]


def test_plan_by_time_takes_the_expired_prefix() -> None:
    config = TopicConfig(retention_ms=100)
    segs = summaries((10, 0), (10, 50), (10, 10), (10, 500), (10, 0))
    assert plan_retention(segs, config, now_ms=150) == 1  # 150-50 is not > 100: stops there
    assert plan_retention(segs, config, now_ms=151) == 3
    assert plan_retention(segs, config, now_ms=10_000) == 5  # the active one too: it has records
    # an empty active segment never goes (there is nothing in it to expire)
    assert plan_retention(summaries((10, 0), (0, -1)), config, now_ms=10_000) == 1


def test_plan_by_size_keeps_the_partition_within_retention_bytes() -> None:
    config = TopicConfig(retention_ms=-1, retention_bytes=25)
    segs = summaries((10, 0), (10, 0), (10, 0), (5, 0))
    assert plan_retention(segs, config, now_ms=0) == 1  # 35 -> 25
    # like Kafka, a segment goes only when what stays is still at least retention.bytes
    assert plan_retention(segs, replace(config, retention_bytes=24), 0) == 1
    assert plan_retention(segs, replace(config, retention_bytes=15), 0) == 2
    assert plan_retention(segs, replace(config, retention_bytes=0), 0) == 4  # all, as Kafka
    assert plan_retention(segs, replace(config, retention_bytes=-1), 0) == 0


def test_plan_takes_the_larger_of_time_and_size() -> None:
    config = TopicConfig(retention_ms=100, retention_bytes=15)
    segs = summaries((10, 0), (10, 1000), (10, 1000))
    assert plan_retention(segs, config, now_ms=150) == 1
    assert plan_retention(segs, replace(config, retention_bytes=5), now_ms=150) == 2


def test_plan_never_deletes_for_compact_only_topics_or_an_empty_active_segment() -> None:
    segs = summaries((10, 0), (10, 0))
    assert plan_retention(segs, TopicConfig(cleanup_policy="compact", retention_ms=0), 10**9) == 0
    assert plan_retention(segs, TopicConfig(cleanup_policy="compact,delete", retention_ms=0), 10**9) == 2
    assert plan_retention(summaries((10, 0)), TopicConfig(retention_ms=0, retention_bytes=0), 10**9) == 1
    assert plan_retention(summaries((0, -1)), TopicConfig(retention_ms=0, retention_bytes=0), 10**9) == 0
    assert plan_retention([], TopicConfig(retention_ms=0), 10**9) == 0


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 1000), st.integers(-1, 10_000)), min_size=0, max_size=20
    ),
    st.integers(-1, 5000),
    st.integers(-1, 12_000),
    st.integers(0, 20_000),
)
def test_plan_properties(
    segs: list[tuple[int, int]], retention_bytes: int, retention_ms: int, now: int
) -> None:
    config = TopicConfig(retention_ms=retention_ms, retention_bytes=retention_bytes)
    summary = summaries(*segs)
    n = plan_retention(summary, config, now)
    # never an empty active segment (a partition keeps one: see Partition.apply_retention)
    assert 0 <= n <= len(summary) - (1 if summary and summary[-1].size_bytes == 0 else 0)
    remaining = summary[n:]
    if n:
        # each deleted segment was either expired (as part of an expired prefix) or needed
        # to get under retention.bytes
        by_time = retention_ms >= 0 and all(now - s.max_timestamp > retention_ms for s in summary[:n])
        by_size = retention_bytes >= 0 and sum(s.size_bytes for s in remaining) >= retention_bytes
        assert by_time or by_size
    if retention_bytes >= 0 and len(remaining) > 1:
        # one more deletion would not have been needed for size
        total = sum(s.size_bytes for s in remaining)
        size_wants_more = total - remaining[0].size_bytes >= retention_bytes
        time_wants_more = retention_ms >= 0 and all(
            now - s.max_timestamp > retention_ms for s in summary[: n + 1]
        )
        assert not size_wants_more and not time_wants_more
    # monotone: a later time never deletes less
    assert plan_retention(summary, config, now + 1000) >= n


def open_partition(directory: Path, **config: object) -> Partition:
    part = Partition(
        directory,
        TopicPartition("r", 0),
        replace(TopicConfig(segment_bytes=200), **config),  # type: ignore[arg-type]
        ManualClock(T0),
    )
    part.open(clean_shutdown=True)
    return part


def test_apply_retention_deletes_segment_files(tmp_path: Path) -> None:
    part = open_partition(tmp_path, retention_ms=1000)
    for i in range(10):
        part.append_records([NewRecord(None, b"x" * 40, T0 + 100 * i)])
    bases = [s.base_offset for s in part.segments]
    assert len(bases) > 3
    assert part.apply_retention(T0 + 1000) == 0
    deleted = part.apply_retention(T0 + 1500)
    assert deleted > 0
    assert [s.base_offset for s in part.segments] == bases[deleted:]
    assert part.log_start_offset == bases[deleted]
    for base in bases[:deleted]:
        assert not list(tmp_path.glob(f"{base:020d}.*"))
    with pytest.raises(OffsetOutOfRangeError):
        part.read(bases[deleted] - 1)
    # everything expired, the active segment too: it goes, as in Kafka, after a new, empty one
    # starts at the log end; appends go on at the same offsets
    hw = part.high_watermark
    active = part.segments[-1]
    part.apply_retention(T0 + 10**9)
    assert [s.base_offset for s in part.segments] == [hw] and part.segments[-1] is not active
    assert (part.log_start_offset, part.high_watermark) == (hw, hw)
    assert not list(tmp_path.glob(f"{active.base_offset:020d}.*"))
    assert part.append_records([NewRecord(None, b"y", T0)]).base_offset == hw
    part.close()
    again = open_partition(tmp_path, retention_ms=1000)  # and so it opens again
    assert (again.log_start_offset, again.high_watermark) == (hw, hw + 1)
    again.close()


def test_retention_through_the_manager(open_log: object, clock: ManualClock) -> None:
    log: LogManager = open_log()  # type: ignore[operator]
    log.create_topic("by-time", 1, {"retention.ms": "60000", "segment.bytes": "200"})
    log.create_topic("by-size", 1, {"retention.bytes": "400", "segment.bytes": "200", "retention.ms": "-1"})
    log.create_topic("forever", 1, {"retention.ms": "-1", "segment.bytes": "200"})
    for topic in ("by-time", "by-size", "forever"):
        for i in range(20):
            log.partition(topic, 0).append_records([NewRecord(None, b"v" * 30, clock.now_ms() + i)])
    sizes = {t: log.partition(t, 0).size_bytes for t in ("by-time", "by-size", "forever")}
    report = log.run_upkeep()
    assert report.segments_deleted > 0
    assert 400 <= log.partition("by-size", 0).size_bytes <= 400 + 200
    assert log.partition("by-size", 0).size_bytes < sizes["by-size"]
    assert log.partition("by-time", 0).size_bytes == sizes["by-time"]
    clock.advance(60_000 + 20)
    log.run_upkeep()
    assert len(log.partition("by-time", 0).segments) == 1
    assert log.partition("forever", 0).size_bytes == sizes["forever"]
    assert log.partition("by-time", 0).log_start_offset > 0


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 5), st.integers(0, 120)),
            st.tuples(st.just("advance"), st.integers(0, 3000)),
            st.tuples(st.just("retain"), st.integers(-1, 2000), st.integers(-1, 3000)),
        ),
        max_size=40,
    )
)
def test_retention_deletes_a_prefix_and_rolls_when_it_takes_every_segment(ops: list[tuple[object, ...]]) -> None:
    now = T0
    with tempfile.TemporaryDirectory() as tmp:
        part = open_partition(Path(tmp), segment_bytes=250)
        appended: list[int] = []  # offsets
        for op in ops:
            if op[0] == "append":
                n, size = op[1], op[2]
                assert isinstance(n, int) and isinstance(size, int)
                r = part.append_records([NewRecord(None, b"z" * size, now) for _ in range(n)])
                appended.extend(range(r.base_offset, r.last_offset + 1))
            elif op[0] == "advance":
                assert isinstance(op[1], int)
                now += op[1]
            else:
                assert isinstance(op[1], int) and isinstance(op[2], int)
                part.update_config(replace(part.config, retention_ms=op[1], retention_bytes=op[2]))
                before = [s.base_offset for s in part.segments]
                start, hw, active = part.log_start_offset, part.high_watermark, part.segments[-1]
                n = part.apply_retention(now)
                after = [s.base_offset for s in part.segments]
                if n < len(before):
                    assert after == before[n:]  # a prefix went
                    assert part.segments[-1] is active
                else:  # all went, the active one too: a new, empty one at the log end
                    assert after == [hw] and part.segments[-1] is not active and part.segments[-1].is_empty
                assert part.log_start_offset >= start  # only forward
                assert part.high_watermark == hw
            # whatever is left reads back as the tail of what was appended
            start = part.log_start_offset
            got = []
            position = start
            while position < part.high_watermark:
                for header, recs in decode_batches(part.read(position)):
                    got.extend(r.offset for r in recs)
                    position = header.next_offset
            assert got == [o for o in appended if o >= start]
