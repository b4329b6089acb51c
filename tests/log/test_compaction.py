"""Compaction keeps exactly the latest record per key; tombstones go after delete.retention.ms."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit._core.clock import ManualClock
from streamkit._core.types import TopicPartition
from streamkit.log import compaction
from streamkit.log.compaction import compact, keep_record
from streamkit.log.config import TopicConfig
from streamkit.log.errors import CorruptRecordError
from streamkit.log.partition import Partition
from streamkit.log.records import NewRecord, Record, control_batch, decode_batches, iter_batches

TP = TopicPartition("c", 0)
T0 = 1_700_000_000_000
DELETE_RETENTION_MS = 1_000


def open_partition(directory: Path, clock: ManualClock, *, clean: bool = True, **config: object) -> Partition:
    base = TopicConfig(
        cleanup_policy="compact", segment_bytes=300, delete_retention_ms=DELETE_RETENTION_MS
    )
    part = Partition(directory, TP, replace(base, **config), clock)  # type: ignore[arg-type]
    part.open(clean_shutdown=clean)
    return part


Row = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp


def read_log(part: Partition) -> list[Row]:
    out: list[Row] = []
    position = part.log_start_offset
    while position < part.high_watermark:
        data = part.read(position, 1 << 20)
        if not data:
            break
        for header, recs in decode_batches(data):
            out.extend((r.offset, r.key, r.value, r.timestamp) for r in recs)
            position = header.next_offset
    return out


def test_keep_record_rules() -> None:
    latest = {b"a": 5, b"b": 9}
    now = T0 + 10_000

    def rec(offset: int, key: bytes | None, value: bytes | None, ts: int = now) -> Record:
        return Record(offset, ts, key, value)

    assert keep_record(rec(1, None, b"x"), latest, now, 100)  # no key: kept
    assert not keep_record(rec(1, b"a", b"x"), latest, now, 100)  # superseded
    assert keep_record(rec(5, b"a", b"x"), latest, now, 100)  # latest
    assert keep_record(rec(9, b"b", None, now - 100), latest, now, 100)  # fresh tombstone
    assert not keep_record(rec(9, b"b", None, now - 101), latest, now, 100)  # expired tombstone
    assert keep_record(rec(3, b"zzz", b"x"), latest, now, 100)  # unknown key: kept


def append(part: Partition, clock: ManualClock, rows: list[tuple[bytes | None, bytes | None]]) -> None:
    part.append_records([NewRecord(k, v, clock.now_ms()) for k, v in rows])


def test_compaction_keeps_latest_per_key_and_offsets(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock)
    for i in range(30):
        append(part, clock, [(b"k%d" % (i % 3), b"v%d" % i), (None, b"n%d" % i)])
    hw, start = part.high_watermark, part.log_start_offset
    before = read_log(part)
    active_base = part.segments[-1].base_offset
    report = compact(part, clock.now_ms(), force=True)
    assert report is not None and report.records_removed > 0 and report.segments_cleaned > 0
    assert report.bytes_after < report.bytes_before
    after = read_log(part)
    assert (part.high_watermark, part.log_start_offset) == (hw, start)
    assert [r for r in before if r[0] >= active_base] == [r for r in after if r[0] >= active_base]
    closed = [r for r in after if r[0] < active_base]
    keyed = [r[1] for r in closed if r[1] is not None]
    assert len(keyed) == len(set(keyed))  # at most one record per key among closed segments
    assert [r for r in before if r[1] is None] == [r for r in after if r[1] is None]
    offsets = [r[0] for r in after]
    assert offsets == sorted(set(offsets))
    # a second run finds nothing more to remove
    again = compact(part, clock.now_ms(), force=True)
    assert again is not None and again.records_removed == 0


def test_only_compact_topics_are_compacted(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock, cleanup_policy="delete")
    for i in range(20):
        append(part, clock, [(b"k", b"v%d" % i)])
    assert compact(part, clock.now_ms(), force=True) is None


def test_min_compaction_lag_protects_recent_segments(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock, min_compaction_lag_ms=5_000)
    for i in range(20):
        append(part, clock, [(b"k", b"v%d" % i)])
    assert compact(part, clock.now_ms(), force=True) is None
    clock.advance(5_000)
    report = compact(part, clock.now_ms(), force=True)
    assert report is not None and report.records_removed > 0


def test_dirty_ratio_decides_when_compaction_is_due(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock, min_cleanable_dirty_ratio=0.5)
    for i in range(20):
        append(part, clock, [(b"k%d" % i, b"v%d" % i)])  # distinct keys: all of it survives
    assert len(part.segments) > 3
    assert compact(part, clock.now_ms()) is not None  # never cleaned: all dirty
    assert compact(part, clock.now_ms()) is None  # nothing new
    segments = len(part.segments)
    while len(part.segments) < segments + 2:  # a small dirty tail with a newer k0 in it
        append(part, clock, [(b"k0", b"again")])
    assert compact(part, clock.now_ms()) is None  # below the ratio
    report = compact(part, clock.now_ms(), force=True)
    assert report is not None and report.records_removed >= 1  # at least the first k0
    assert next(r[2] for r in read_log(part) if r[1] == b"k0") == b"again"


def test_tombstones_go_only_after_delete_retention(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock, min_cleanable_dirty_ratio=0.99)
    append(part, clock, [(b"gone", b"v1")])
    append(part, clock, [(b"gone", None)])
    tombstone_offset = part.high_watermark - 1
    for i in range(10):  # push the tombstone out of the active segment
        append(part, clock, [(b"other", b"v%d" % i)])
    compact(part, clock.now_ms(), force=True)
    rows = read_log(part)
    assert [r[0] for r in rows if r[1] == b"gone"] == [tombstone_offset]
    clock.advance(DELETE_RETENTION_MS)
    compact(part, clock.now_ms(), force=True)
    assert any(r[1] == b"gone" for r in read_log(part))  # exactly delete.retention.ms: kept
    clock.advance(1)
    # due by the checkpointed deadline even though nothing new is dirty
    report = compact(part, clock.now_ms())
    assert report is not None and report.records_removed == 1
    assert not any(r[1] == b"gone" for r in read_log(part))


def test_control_batches_survive(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock)
    append(part, clock, [(b"k", b"1")])
    part.append(control_batch(commit=True, producer_id=7, producer_epoch=0, timestamp=T0))
    for i in range(10):
        append(part, clock, [(b"k", b"%d" % i)])
    compact(part, clock.now_ms(), force=True)
    data = part.read(0)
    headers = [h for _p, h in iter_batches(data)]
    assert headers[0].is_control or any(h.is_control for h in headers)


def test_a_corrupt_batch_is_not_rewritten_as_valid(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock)
    for i in range(20):
        append(part, clock, [(b"k%d" % (i % 4), b"value-%d" % i)])
    first = part.segments[0]
    raw = bytearray(first.log_path.read_bytes())
    raw[-3] ^= 0x20  # inside the last record's value: the CRC fails, the structure holds
    first.log_path.write_bytes(bytes(raw))
    with pytest.raises(CorruptRecordError):
        compact(part, clock.now_ms(), force=True)
    with pytest.raises(CorruptRecordError):
        part.read(first.next_offset - 1)


def test_compaction_runs_on_closed_segments_while_appends_go_on(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock)
    for i in range(30):
        append(part, clock, [(b"k%d" % (i % 3), b"v%d" % i)])

    real_swap = compaction._swap_in
    appended: list[int] = []

    def swap_with_an_append_first(partition: Partition, old: object, data: bytes) -> bool:
        appended.append(partition.append_records([NewRecord(b"k0", b"during", clock.now_ms())]).base_offset)
        return real_swap(partition, old, data)  # type: ignore[arg-type]

    compaction._swap_in = swap_with_an_append_first  # type: ignore[assignment]
    try:
        compact(part, clock.now_ms(), force=True)
    finally:
        compaction._swap_in = real_swap
    rows = read_log(part)
    assert [r[0] for r in rows if r[2] == b"during"] == appended
    assert part.high_watermark == appended[-1] + 1


# -- the reference model ------------------------------------------------------------------------


@dataclass
class Appended:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


def model_compact(live: list[Appended], active_base: int, now: int) -> list[Appended]:
    closed = [r for r in live if r.offset < active_base]
    latest: dict[bytes, int] = {}
    for r in closed:
        if r.key is not None:
            latest[r.key] = r.offset
    kept = []
    for r in live:
        if r.offset >= active_base or r.key is None or (latest[r.key] == r.offset and not (
            r.value is None and now - r.timestamp > DELETE_RETENTION_MS
        )):
            kept.append(r)
    return kept


keys = st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e"]))
values = st.one_of(st.none(), st.binary(min_size=0, max_size=40))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.tuples(keys, values), min_size=1, max_size=5),
                  st.sampled_from([0, 1])),
        st.tuples(st.just("advance"), st.integers(min_value=0, max_value=700)),
        st.tuples(st.just("compact")),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(steps=steps)
def test_compaction_matches_a_latest_per_key_model(steps: list[tuple[object, ...]]) -> None:
    clock = ManualClock(T0)
    live: list[Appended] = []
    everything: list[Appended] = []
    with tempfile.TemporaryDirectory() as tmp:
        part = open_partition(Path(tmp), clock, segment_bytes=250)
        for step in steps:
            if step[0] == "append":
                rows, codec = step[1], step[2]
                assert isinstance(rows, list) and isinstance(codec, int)
                now = clock.now_ms()
                result = part.append_records(
                    [NewRecord(k, v, now) for k, v in rows], compression_codec=codec
                )
                for i, (k, v) in enumerate(rows):
                    record = Appended(result.base_offset + i, k, v, now)
                    live.append(record)
                    everything.append(record)
            elif step[0] == "advance":
                assert isinstance(step[1], int)
                clock.advance(step[1])
            else:
                active_base = part.segments[-1].base_offset
                hw = part.high_watermark
                compact(part, clock.now_ms(), force=True)
                live = model_compact(live, active_base, clock.now_ms())
                assert part.high_watermark == hw
            assert read_log(part) == [(r.offset, r.key, r.value, r.timestamp) for r in live]

        # What a consumer reading from 0 ends up with: each key's latest value, or nothing
        # when that value was a tombstone that has gone.
        seen: dict[bytes, bytes | None] = {}
        for _o, k, v, _t in read_log(part):
            if k is not None:
                seen[k] = v
        latest = {r.key: r.value for r in everything if r.key is not None}
        for key, value in latest.items():
            if key in seen:
                assert seen[key] == value
            else:
                assert value is None

        for clean in (True, False):
            part.close()
            part = open_partition(Path(tmp), clock, clean=clean, segment_bytes=250)
            assert read_log(part) == [(r.offset, r.key, r.value, r.timestamp) for r in live]
        part.close()


def test_appends_are_not_stalled_while_a_cleaned_segment_is_scanned(tmp_path: Path) -> None:
    """The scan of a cleaned segment (a CRC check of all of it) happens outside the lock."""
    import threading

    from streamkit.log.segment import Segment

    clock = ManualClock(T0)
    part = open_partition(tmp_path, clock)
    for i in range(20):
        append(part, clock, [(b"k%d" % (i % 3), b"v%d" % i)])
    scanning, release = threading.Event(), threading.Event()
    real_recover = Segment._recover

    def slow_recover(self: Segment, reason: str, **kwargs: bool) -> object:
        if reason == "compacted" or "unclean" in reason:
            scanning.set()
            assert release.wait(10)
        return real_recover(self, reason, **kwargs)

    Segment._recover = slow_recover  # type: ignore[assignment,method-assign]
    try:
        cleaner = threading.Thread(target=compact, args=(part, clock.now_ms()), kwargs={"force": True})
        cleaner.start()
        assert scanning.wait(10)
        appended = threading.Event()
        appender = threading.Thread(
            target=lambda: (append(part, clock, [(b"x", b"during")]), appended.set())
        )
        appender.start()
        assert appended.wait(5), "an append waited for the cleaner's scan"
        release.set()
        cleaner.join(10)
        appender.join(10)
    finally:
        release.set()
        Segment._recover = real_recover  # type: ignore[method-assign]
    assert read_log(part)[-1][2] == b"during"
