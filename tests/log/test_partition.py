"""A partition: offsets, rolling, reads, timestamps, reopening and flush policies."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit._core.clock import ManualClock
from streamkit._core.types import TopicPartition
from streamkit.log.config import TopicConfig
from streamkit.log.errors import (
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from streamkit.log.partition import Partition
from streamkit.log.records import NewRecord, build_batch, decode_batches, iter_batches

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000


def open_partition(
    directory: Path, clock: ManualClock | None = None, *, clean: bool = True, **config: int | str
) -> Partition:
    part = Partition(directory, TP, replace(TopicConfig(), **config), clock or ManualClock(T0))  # type: ignore[arg-type]
    part.open(clean_shutdown=clean)
    return part


def records(n: int, *, ts: int = T0, tag: str = "v", key: bytes | None = None) -> list[NewRecord]:
    return [NewRecord(key, f"{tag}{i}".encode(), ts) for i in range(n)]


def read_all(part: Partition, offset: int | None = None) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record from ``offset`` (default: the log start) to the end."""
    out: list[tuple[int, bytes | None]] = []
    position = part.log_start_offset if offset is None else offset
    while position < part.high_watermark:
        data = part.read(position, 300)
        assert data, f"no data at {position} below the high watermark {part.high_watermark}"
        for header, recs in decode_batches(data):
            out.extend((r.offset, r.value) for r in recs)
            position = header.next_offset
    return out


def test_offsets_are_dense_and_in_append_order(tmp_path: Path) -> None:
    part = open_partition(tmp_path)
    assert (part.log_start_offset, part.high_watermark) == (0, 0)
    r1 = part.append_records(records(3))
    r2 = part.append_records(records(1))
    r3 = part.append(build_batch(records(2), base_offset=999))  # a client's base offset is ignored
    assert [(r.base_offset, r.last_offset) for r in (r1, r2, r3)] == [(0, 2), (3, 3), (4, 5)]
    assert r3.log_start_offset == 0
    assert part.high_watermark == part.log_end_offset == 6
    assert [o for o, _ in read_all(part)] == list(range(6))


def test_append_rejects_bad_and_oversized_batches(tmp_path: Path) -> None:
    part = open_partition(tmp_path, max_message_bytes=200)
    good = build_batch(records(2))
    damaged = bytearray(good)
    damaged[-1] ^= 1
    with pytest.raises(InvalidRecordError):
        part.append(bytes(damaged))
    with pytest.raises(InvalidRecordError):
        part.append(good + good)
    with pytest.raises(RecordTooLargeError):
        part.append(build_batch([NewRecord(None, b"x" * 300, T0)]))
    assert part.high_watermark == 0
    part.close()
    with pytest.raises(LogClosedError):
        part.append(good)


def test_segments_roll_by_size(tmp_path: Path) -> None:
    one = len(build_batch(records(1)))
    part = open_partition(tmp_path, segment_bytes=3 * one)
    for _ in range(7):
        part.append_records(records(1))
    assert [s.base_offset for s in part.segments] == [0, 3, 6]
    assert all(s.size <= 3 * one for s in part.segments)
    names = sorted(p.name for p in tmp_path.iterdir() if p.name != "recovery-point")
    assert names == [f"{b:020d}.{ext}" for b in (0, 3, 6) for ext in ("index", "log", "timeindex")]


def test_a_batch_larger_than_segment_bytes_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    part = open_partition(tmp_path, segment_bytes=100)
    for _ in range(3):
        part.append_records(records(5))
    assert [s.base_offset for s in part.segments] == [0, 5, 10]


def test_segments_roll_by_age_of_the_first_batch(tmp_path: Path) -> None:
    part = open_partition(tmp_path, segment_ms=1000)
    part.append_records(records(1, ts=T0))
    part.append_records(records(1, ts=T0 + 1000))  # exactly segment.ms later: no roll yet
    part.append_records(records(1, ts=T0 + 500))
    assert len(part.segments) == 1
    part.append_records(records(1, ts=T0 + 1001))  # compared with the first batch's timestamp
    assert [s.base_offset for s in part.segments] == [0, 3]
    part.append_records(records(1, ts=T0 + 1500))
    assert len(part.segments) == 2
    part.close()
    again = open_partition(tmp_path, segment_ms=1000)  # the first batch's time survives reopening
    again.append_records(records(1, ts=T0 + 2002))
    assert [s.base_offset for s in again.segments] == [0, 3, 5]


def test_read_returns_whole_batches_and_at_least_one(tmp_path: Path) -> None:
    part = open_partition(tmp_path, segment_bytes=400)
    for i in range(10):
        part.append_records(records(4, tag=f"b{i}-"))
    batch_size = len(build_batch(records(4, tag="b0-")))
    for offset in range(40):
        data = part.read(offset, max_bytes=1)
        (header,) = [h for _p, h in iter_batches(data)]
        assert header.base_offset == offset - offset % 4  # mid-batch reads get that batch
        assert len(data) == batch_size
    data = part.read(5, max_bytes=3 * batch_size)
    assert [h.base_offset for _p, h in iter_batches(data)] == [4, 8, 12][: len(list(iter_batches(data)))]
    assert len(data) <= 3 * batch_size
    assert part.read(40) == b""


def test_read_honours_max_offset(tmp_path: Path) -> None:
    part = open_partition(tmp_path)
    for _ in range(5):
        part.append_records(records(3))
    offsets = lambda data: [r.offset for _h, rs in decode_batches(data) for r in rs]  # noqa: E731
    assert offsets(part.read(0, max_offset=6)) == list(range(6))
    assert offsets(part.read(0, max_offset=7)) == list(range(9))  # the batch holding 6 is whole
    assert part.read(6, max_offset=6) == b""
    assert offsets(part.read(0, max_offset=100)) == list(range(15))


def test_reads_outside_the_log_raise_offset_out_of_range(tmp_path: Path) -> None:
    part = open_partition(tmp_path, segment_bytes=150, retention_ms=1000)
    for i in range(6):  # the last batch is new: retention below keeps it
        part.append_records(records(2, ts=T0 + (10_000 if i == 5 else i)))
    assert part.read(12) == b""  # the high watermark itself is in range, and empty
    with pytest.raises(OffsetOutOfRangeError) as info:
        part.read(13)
    assert (info.value.log_start_offset, info.value.high_watermark) == (0, 12)
    with pytest.raises(OffsetOutOfRangeError):
        part.read(-1)
    assert part.apply_retention(T0 + 10_000) > 0
    start = part.log_start_offset
    assert start > 0
    with pytest.raises(OffsetOutOfRangeError):
        part.read(start - 1)
    assert part.read(start) != b""


def test_offset_for_timestamp(tmp_path: Path) -> None:
    part = open_partition(tmp_path, segment_bytes=250, index_interval_bytes=1)
    stamps = [10, 20, 20, 15, 30, 50, 40, 60]
    for ts in stamps:
        part.append_records([NewRecord(None, b"v", T0 + ts)])
    assert len(part.segments) > 2
    for target in range(0, 70):
        expected = next(((o, T0 + t) for o, t in enumerate(stamps) if t >= target), None)
        assert part.offset_for_timestamp(T0 + target) == expected
    part.close()
    again = open_partition(tmp_path, segment_bytes=250, index_interval_bytes=1)
    assert again.offset_for_timestamp(T0 + 35) == (5, T0 + 50)


def test_clean_reopen_restores_offsets_and_timestamps(tmp_path: Path) -> None:
    part = open_partition(tmp_path, segment_bytes=300, retention_ms=50)
    for i in range(12):
        part.append_records(records(2, ts=T0 + 100 * i))
    part.apply_retention(T0 + 400)
    state = (part.log_start_offset, part.high_watermark,
             [(s.base_offset, s.size, s.max_timestamp) for s in part.segments])
    assert state[0] > 0
    part.close()
    again = open_partition(tmp_path, segment_bytes=300, retention_ms=50)
    assert (again.log_start_offset, again.high_watermark,
            [(s.base_offset, s.size, s.max_timestamp) for s in again.segments]) == state
    assert again.append_records(records(1)).base_offset == state[1]


def test_unclean_reopen_recovers_from_a_copy_taken_while_open(tmp_path: Path) -> None:
    live = tmp_path / "live"
    part = open_partition(live, segment_bytes=500, flush_messages=1)
    for i in range(20):
        part.append_records(records(3, ts=T0 + i))
    expected = read_all(part)
    copy = tmp_path / "copy"
    shutil.copytree(live, copy)  # what a crash would leave: nothing closed, nothing sealed last
    with open(copy / f"{part.segments[-1].base_offset:020d}.log", "ab") as f:
        f.write(b"\x00" * 17)  # the start of a batch that never finished
    again = Partition(copy, TP, part.config, ManualClock(T0))
    reports = again.open(clean_shutdown=False)
    assert [r.truncated_bytes for r in reports] == [17]
    assert reports[0].from_offset == 60
    assert read_all(again) == expected
    assert again.append_records(records(1)).base_offset == 60


def test_append_listeners_see_the_new_high_watermark(tmp_path: Path) -> None:
    part = open_partition(tmp_path)
    seen: list[tuple[TopicPartition, int]] = []
    part.listeners.append(lambda tp, hw: seen.append((tp, hw)))
    part.append_records(records(3))
    part.append_records(records(2))
    assert seen == [(TP, 3), (TP, 5)]


def count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_flush_messages_one_fsyncs_every_append(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = open_partition(tmp_path, flush_messages=1, flush_ms=0)
    calls = count_fsyncs(monkeypatch)
    log_fd = part.segments[-1]._fd
    for n in range(1, 6):
        part.append_records(records(1))
        assert calls.count(log_fd) == n  # the log itself, once per append


def test_flush_messages_n_fsyncs_every_n_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = open_partition(tmp_path, flush_messages=5, flush_ms=0)
    calls = count_fsyncs(monkeypatch)
    log_fd = part.segments[-1]._fd
    for _ in range(4):
        part.append_records(records(1))
    assert log_fd not in calls
    part.append_records(records(1))
    assert calls.count(log_fd) == 1
    part.append_records(records(7))  # one batch past the threshold: one fsync
    assert calls.count(log_fd) == 2


def test_flush_ms_flushes_through_maybe_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock, flush_ms=1000)
    calls = count_fsyncs(monkeypatch)
    assert not part.maybe_flush()  # nothing waiting
    part.append_records(records(2))
    assert not calls
    clock.advance(999)
    assert not part.maybe_flush()
    clock.advance(1)
    assert part.maybe_flush()
    assert part.segments[-1]._fd in calls
    assert not part.maybe_flush()  # nothing new since
    calls.clear()
    clock.advance(5000)
    assert not part.maybe_flush() and not calls


class Model:
    """The reference: every appended record, by offset, and the batches they came in."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.batches: list[range] = []

    def append(self, values: list[bytes]) -> None:
        start = len(self.values)
        self.values.extend(values)
        self.batches.append(range(start, len(self.values)))

    def from_offset(self, offset: int) -> list[tuple[int, bytes]]:
        batch = next(b for b in self.batches if offset in b)
        return [(o, self.values[o]) for o in range(batch.start, len(self.values))]


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.binary(min_size=0, max_size=60), min_size=1, max_size=8), min_size=1, max_size=30
    ),
    segment_bytes=st.integers(min_value=100, max_value=2000),
    interval=st.integers(min_value=0, max_value=500),
    data=st.data(),
)
def test_reads_match_a_list_model_before_and_after_reopen(
    batches: list[list[bytes]], segment_bytes: int, interval: int, data: st.DataObject
) -> None:
    model = Model()
    with tempfile.TemporaryDirectory() as tmp:
        config = {"segment_bytes": segment_bytes, "index_interval_bytes": interval}
        part = open_partition(Path(tmp), **config)  # type: ignore[arg-type]
        for values in batches:
            result = part.append_records([NewRecord(None, v, T0) for v in values])
            model.append(values)
            assert (result.base_offset, result.last_offset) == (
                model.batches[-1].start, model.batches[-1].stop - 1
            )
        offsets = data.draw(st.lists(st.integers(0, len(model.values) - 1), min_size=1, max_size=10))
        for clean in (None, True, False):
            if clean is not None:
                part.close()
                part = open_partition(Path(tmp), clean=clean, **config)  # type: ignore[arg-type]
            assert part.high_watermark == len(model.values)
            for offset in offsets:
                got = read_all(part, offset)
                assert [(o, v) for o, v in got] == model.from_offset(offset)


def test_reads_stay_whole_while_appends_retention_and_compaction_run(tmp_path: Path) -> None:
    """Readers take no lock: they must never see a torn batch or a mismatched segment list."""
    import threading
    import time

    from streamkit.log.compaction import compact
    from streamkit.log.records import check_batch

    clock = ManualClock(T0)
    part = open_partition(
        tmp_path, clock, segment_bytes=600, cleanup_policy="compact,delete",
        retention_bytes=6000, retention_ms=-1, index_interval_bytes=100,
    )
    stop = threading.Event()
    errors: list[BaseException] = []

    def guard(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                while not stop.is_set():
                    fn()
            except BaseException as exc:  # reported by the test below
                errors.append(exc)
                stop.set()
        return run

    counter = iter(range(10**9))

    def appender() -> None:
        i = next(counter)
        part.append_records([NewRecord(b"k%d" % (i % 7), b"v%d" % i, T0 + i), NewRecord(None, b"n", T0 + i)])

    def reader() -> None:
        start, hw = part.log_start_offset, part.high_watermark
        if hw == start:
            return
        offset = start + (next(counter) % (hw - start))
        try:
            data = part.read(offset, 700)
        except OffsetOutOfRangeError:
            assert offset < part.log_start_offset  # retention moved past it meanwhile
            return
        previous = -1
        view = memoryview(data)
        total = 0
        for pos, header in iter_batches(data):
            check_batch(view[pos : pos + header.size])
            assert header.base_offset > previous
            previous = header.last_offset
            total = pos + header.size
        assert total == len(data)
        if data:
            assert previous >= offset or part.log_start_offset > offset

    def upkeep() -> None:
        compact(part, T0 + 10**6, force=True)
        part.apply_retention(T0 + 10**6)

    threads = [threading.Thread(target=guard(f)) for f in (appender, reader, reader, upkeep)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert part.high_watermark > 100


def test_new_segment_files_are_made_durable_in_their_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsynced append is lost anyway if the directory entry of its file is not."""
    import streamkit.log.partition as partition_module

    synced: list[Path] = []
    real = partition_module.fsync_dir
    monkeypatch.setattr(partition_module, "fsync_dir", lambda d: (synced.append(Path(d)), real(d))[1])
    one = len(build_batch(records(1)))
    part = open_partition(tmp_path / "p", segment_bytes=one)
    assert synced == [tmp_path / "p"]  # the first segment
    part.append_records(records(1))
    part.append_records(records(1))  # rolls: the new file's entry is made durable by the flush
    assert synced == [tmp_path / "p"]
    part.flush()
    assert synced == [tmp_path / "p"] * 2


def test_rolled_segments_are_fsynced_by_the_flush_and_recovered_after_a_crash(tmp_path: Path) -> None:
    """Rolling does not fsync on the appending thread; the recovery point says what a crash
    must re-check, and a segment cut by recovery drops the (never durable) ones after it."""
    one = len(build_batch(records(1)))
    live = tmp_path / "live"
    part = open_partition(live, segment_bytes=2 * one)
    for _ in range(3):
        part.append_records(records(1))
    part.flush()  # offsets 0..2 durable: recovery point 3
    for _ in range(4):
        part.append_records(records(1))  # offsets 3..6, segments [0, 2, 4, 6]
    assert [s.base_offset for s in part.segments] == [0, 2, 4, 6]
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    # tear the middle of segment 4 (never flushed): 5 and 6 must not survive it
    seg4 = crashed / f"{4:020d}.log"
    seg4.write_bytes(seg4.read_bytes()[: one + 10])
    again = Partition(crashed, TopicPartition("t", 0), part.config, ManualClock(0))
    reports = again.open(clean_shutdown=False)
    assert again.high_watermark == 5
    assert [s.base_offset for s in again.segments] == [0, 2, 4]
    assert any("dropped" in r.reason for r in reports)
    assert any(r.truncated_bytes == 10 for r in reports)
    data = again.read(0, 10**6)
    assert [r.offset for _h, rs in decode_batches(data) for r in rs][:2] == [0, 1]
    part.close()
