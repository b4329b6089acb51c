"""DeleteRecords in the log: moving a partition's log start offset into a segment.

Kafka's semantics (``Partition.deleteRecordsOnLeader``, ``UnifiedLog.maybeIncrementLogStartOffset``):
-1 means the high watermark, an offset past it or below -1 is out of range, the start never
moves back, reads below it fail, ListOffsets EARLIEST and the segment-file reader answer it,
segments wholly below it go, and it survives a clean or an unclean restart.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit._core.clock import ManualClock
from streamkit.log import compaction, reader
from streamkit.log.config import TopicConfig
from streamkit.log.errors import (
    InvalidTopicError,
    LogClosedError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownTopicError,
)
from streamkit.log.inspect import verify_data_dir
from streamkit.log.manager import LogManager
from streamkit.log.offsets import OFFSETS_TOPIC
from streamkit.log.partition import HIGH_WATERMARK, LOG_START_OFFSET_FILE, Partition
from streamkit.log.producers import last_stable_offset, scan_state
from streamkit.log.records import NewRecord, build_batch, decode_batches
from tests.log.test_partition import T0, TP, open_partition, read_all, records


def segment_bases(part: Partition) -> list[int]:
    return [s.base_offset for s in part.segments]


def filled(directory: Path, n: int = 30, **config: int | str) -> Partition:
    """A partition of ``n`` one-record batches in segments of about 3 batches each."""
    part = open_partition(directory, segment_bytes=250, **config)
    for i in range(n):
        part.append_records(records(1, tag=f"r{i}-"))
    return part


def test_the_start_moves_into_a_segment_and_reads_below_it_fail(tmp_path: Path) -> None:
    part = filled(tmp_path)
    assert len(part.segments) > 5
    inside = part.segments[3].base_offset + 1  # not a segment boundary
    assert part.delete_records(inside) == inside
    assert part.log_start_offset == inside
    # The segment holding the new start stays (its first record is unreadable), older ones go.
    assert segment_bases(part)[0] == inside - 1
    with pytest.raises(OffsetOutOfRangeError) as raised:
        part.read(inside - 1)
    assert (raised.value.log_start_offset, raised.value.high_watermark) == (inside, 30)
    assert [o for o, _ in read_all(part) if o >= inside] == list(range(inside, 30))
    assert not list(tmp_path.glob(f"{0:020d}.*"))  # the first segment's files are gone


def test_minus_one_is_the_high_watermark_and_the_active_segment_stays(tmp_path: Path) -> None:
    part = filled(tmp_path)
    assert part.delete_records(HIGH_WATERMARK) == 30
    assert (part.log_start_offset, part.high_watermark) == (30, 30)
    assert part.read(30) == b""
    part.append_records(records(2))
    assert read_all(part) == [(30, b"v0"), (31, b"v1")]


def test_the_start_never_moves_back_and_past_the_high_watermark_is_out_of_range(tmp_path: Path) -> None:
    part = filled(tmp_path, 10)
    assert part.delete_records(6) == 6
    assert part.delete_records(2) == 6  # as Kafka: nothing changes, the low watermark answers
    assert part.delete_records(6) == 6
    for bad in (11, -2):
        with pytest.raises(OffsetOutOfRangeError):
            part.delete_records(bad)
    assert part.log_start_offset == 6
    assert part.delete_records(10) == 10  # the high watermark itself is allowed


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
def test_the_start_survives_a_restart(tmp_path: Path, clean: bool) -> None:
    part = filled(tmp_path)
    part.delete_records(17)
    if clean:
        part.close()
    # else: the process "dies" here: nothing closed, nothing flushed after DeleteRecords answered
    again = open_partition(tmp_path, clean=clean, segment_bytes=250)
    assert (again.log_start_offset, again.high_watermark) == (17, 30)
    with pytest.raises(OffsetOutOfRangeError):
        again.read(16)
    assert [o for o, _ in read_all(again) if o >= 17] == list(range(17, 30))
    again.close()


def test_the_start_is_made_durable_with_the_records_below_it(tmp_path: Path) -> None:
    """DeleteRecords flushes first, so the recovery point is never below the start offset: a
    crash cannot leave a log that ends before its own start."""
    part = filled(tmp_path, 10)  # flush.ms/messages defaults: nothing flushed yet
    part.delete_records(8)
    assert int((tmp_path / "recovery-point").read_text()) >= 8
    assert (tmp_path / LOG_START_OFFSET_FILE).read_text() == "8\n"


def test_a_start_offset_file_past_the_end_is_capped_at_the_end(tmp_path: Path) -> None:
    part = filled(tmp_path, 10)
    part.close()
    (tmp_path / LOG_START_OFFSET_FILE).write_text("99\n")
    again = open_partition(tmp_path, segment_bytes=250)
    assert (again.log_start_offset, again.high_watermark) == (10, 10)
    again.close()


def test_read_only_partitions_see_the_start_and_refuse_to_move_it(tmp_path: Path) -> None:
    part = filled(tmp_path)
    part.delete_records(12)
    part.close()
    ro = Partition(tmp_path, TP, replace(TopicConfig(), segment_bytes=250), ManualClock(T0), read_only=True)
    ro.open(clean_shutdown=True)
    assert ro.log_start_offset == 12
    with pytest.raises(LogClosedError):
        ro.delete_records(13)
    ro.close()


def test_timestamps_below_the_start_are_not_found(tmp_path: Path) -> None:
    part = open_partition(tmp_path, segment_bytes=250)
    for i in range(10):
        part.append_records(records(1, ts=T0 + i))
    part.delete_records(4)
    assert part.offset_for_timestamp(T0) == (4, T0 + 4)
    assert part.offset_for_timestamp(T0 + 6) == (6, T0 + 6)


def test_retention_keeps_working_after_the_start_moved(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock, segment_bytes=250, retention_ms=1000)
    for _ in range(10):
        part.append_records(records(1))
    part.delete_records(4)
    clock.advance(2000)
    for _ in range(3):
        part.append_records(records(1, ts=T0 + 2000))
    assert part.apply_retention(T0 + 2000) > 0
    assert 4 < part.log_start_offset == part.segments[0].base_offset
    assert read_all(part)[-1][0] == 12


def test_the_segment_file_reader_honours_the_start(tmp_path: Path) -> None:
    with LogManager(tmp_path) as log:
        log.create_topic("t", 1, {"segment.bytes": "250"})
        part = log.partition("t", 0)
        for i in range(10):
            part.append_records(records(1, ts=T0 + i))
        assert log.delete_records("t", 0, 5) == 5
        assert reader.partition_bounds(tmp_path, "t", 0) == (5, 10)
        offsets = [r.offset for _h, data in reader.read_batches(tmp_path, "t", 0, 0)
                   for _hh, recs in decode_batches(bytes(data)) for r in recs]
        assert offsets[0] <= 5 and offsets[-1] == 9 and 4 not in offsets[offsets.index(5):]
        assert min(offsets) >= part.segments[0].base_offset
        assert reader.offset_for_timestamp(tmp_path, "t", 0, T0) == 5


def test_the_manager_refuses_what_kafka_refuses(tmp_path: Path) -> None:
    with LogManager(tmp_path) as log:
        log.create_topic("compacted", 1, {"cleanup.policy": "compact"})
        log.create_topic("both", 1, {"cleanup.policy": "compact,delete"})
        log.partition("both", 0).append_records(records(3))
        with pytest.raises(PolicyViolationError, match=r"cleanup\.policy is compact"):
            log.delete_records("compacted", 0, 0)
        assert log.delete_records("both", 0, 2) == 2
        with pytest.raises(UnknownTopicError):
            log.delete_records("missing", 0, 0)
        with pytest.raises(UnknownTopicError):
            log.delete_records("both", 1, 0)
        with pytest.raises(InvalidTopicError, match="internal"):
            log.delete_records(OFFSETS_TOPIC, 0, 0)
        assert log.partition_infos("both")[0].log_start_offset == 2


def test_the_last_stable_offset_is_never_below_the_start(tmp_path: Path) -> None:
    """Kafka lets DeleteRecords pass an open transaction's first offset and moves the first
    unstable offset up to the new start; read_committed reading then waits there."""
    part = open_partition(tmp_path)
    part.append_records(records(3))
    txn = build_batch(records(2), producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    part.append(txn)  # producer 7's transaction begins at offset 3, still open
    part.append_records(records(5))
    state = scan_state(part)
    assert last_stable_offset(state, part.high_watermark, part.log_start_offset) == 3
    part.delete_records(6)  # the producer state a broker holds in memory still has it open
    assert last_stable_offset(state, part.high_watermark, part.log_start_offset) == 6
    assert last_stable_offset(None, 10, 6) == 10


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 4)),
            st.tuples(st.just("delete"), st.integers(-3, 40)),
            st.tuples(st.just("reopen"), st.booleans()),
        ),
        max_size=25,
    )
)
def test_the_log_start_follows_a_simple_model(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, object]]) -> None:
    directory = tmp_path_factory.mktemp("model")
    part = open_partition(directory, segment_bytes=200)
    start = hw = 0
    for op, arg in ops:
        if op == "append":
            assert isinstance(arg, int)
            part.append_records(records(arg))
            hw += arg
        elif op == "delete":
            assert isinstance(arg, int)
            target = hw if arg == -1 else arg
            if 0 <= target <= hw:
                start = max(start, target)
                assert part.delete_records(arg) == start
            else:
                with pytest.raises(OffsetOutOfRangeError):
                    part.delete_records(arg)
        else:
            if arg:
                part.close()
            part = open_partition(directory, clean=bool(arg), segment_bytes=200)
        assert (part.log_start_offset, part.high_watermark) == (start, hw)
        bases = segment_bases(part)
        # The active segment stays even when wholly below (a delete up to the high watermark);
        # once another follows it, the next retention pass deletes it, as Kafka's does.
        assert bases[0] <= start and all(b > start for b in bases[2:])
        part.apply_retention(T0)
        bases = segment_bases(part)
        assert bases[0] <= start and all(b > start for b in bases[1:])  # nothing wholly below
        if start > 0:
            with pytest.raises(OffsetOutOfRangeError):
                part.read(start - 1)
        assert [o for o, _ in read_all(part) if o >= start] == list(range(start, hw))
    part.close()


def test_log_verify_accepts_the_start_and_reports_it_as_the_first_offset(tmp_path: Path) -> None:
    with LogManager(tmp_path) as log:
        log.create_topic("t", 1, {"segment.bytes": "250"})
        for _ in range(10):
            log.partition("t", 0).append_records(records(1))
        log.delete_records("t", 0, 5)
    report = verify_data_dir(tmp_path)
    assert report.clean and not report.notes
    (summary,) = [s for s in report.partitions if s.name == "t-0"]
    assert (summary.first_offset, summary.next_offset) == (5, 10)
    (tmp_path / "t-0" / LOG_START_OFFSET_FILE).write_text("99\n")
    report = verify_data_dir(tmp_path)
    assert report.clean and report.notes == [f"{tmp_path / 't-0'}: log start offset 99 lies past the log's end 10 "
                                              "(the next open takes the end)"]


def test_compaction_keeps_working_after_the_start_moved(tmp_path: Path) -> None:
    part = open_partition(tmp_path, segment_bytes=250, cleanup_policy="compact,delete", min_compaction_lag_ms=0)
    for i in range(12):
        part.append_records([NewRecord(f"k{i % 3}".encode(), f"v{i}".encode(), T0)])
    part.delete_records(5)
    report = compaction.compact(part, T0, force=True)
    assert report is not None and report.records_removed > 0
    assert part.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        part.read(4)
    # The latest value of each key survives; nothing below the start is readable.
    assert [(o, v) for o, v in read_all(part) if o >= 5][-3:] == [(9, b"v9"), (10, b"v10"), (11, b"v11")]


def test_a_damaged_start_offset_file_is_said_and_the_log_starts_at_its_first_segment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    part = open_partition(tmp_path)
    part.append_records(records(5))
    part.delete_records(3)
    part.close()
    (tmp_path / LOG_START_OFFSET_FILE).write_bytes(b"\xff\x00garbage")
    with caplog.at_level(logging.WARNING, logger="streamkit.log.partition"):
        again = open_partition(tmp_path)
    try:
        assert again.log_start_offset == 0
        assert f"{LOG_START_OFFSET_FILE} is damaged" in caplog.text
    finally:
        again.close()
