"""One segment: append, read, reopen trusting or rebuilding its indexes, damage on disk."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit.log.errors import CorruptRecordError
from streamkit.log.index import OFFSET_ENTRY
from streamkit.log.records import (
    BatchHeader,
    NewRecord,
    build_batch,
    check_batch,
    decode_batches,
    iter_batches,
)
from streamkit.log.segment import FileRange, Segment, VerifiedRanges, segment_name

BASE = 100


def batch(n: int, *, ts: int = 1_000, value_size: int = 10, tag: int = 0) -> bytes:
    return build_batch(
        [NewRecord(b"k%d" % i, bytes([(tag + i) % 256]) * value_size, ts + i) for i in range(n)]
    )


def append(seg: Segment, data: bytes) -> BatchHeader:
    header = check_batch(data)
    seg.append(header, data, seg.next_offset)
    return header


def offsets_in(data: bytes) -> list[int]:
    return [r.offset for _h, records in decode_batches(data) for r in records]


def fill(directory: Path, sizes: list[int], *, interval: int = 0) -> tuple[Segment, list[tuple[int, int]]]:
    """A segment at BASE with batches of ``sizes`` records; returns it and (first, last) offsets."""
    seg = Segment.create(directory, BASE, interval)
    ranges = []
    for i, n in enumerate(sizes):
        first = seg.next_offset
        append(seg, batch(n, ts=1_000 + 10 * i, tag=i))
        ranges.append((first, seg.next_offset - 1))
    return seg, ranges


def test_files_are_named_by_base_offset(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, BASE, 4096)
    assert segment_name(BASE) == "00000000000000000100"
    assert seg.log_path.name == "00000000000000000100.log"
    assert seg.index_path.exists() and seg.timeindex_path.exists()
    assert seg.is_empty and seg.next_offset == BASE


def test_append_stamps_offsets_and_tracks_timestamps(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, BASE, 4096)
    h1 = append(seg, batch(3, ts=5_000))
    append(seg, batch(2, ts=4_000))
    assert seg.next_offset == BASE + 5
    assert seg.first_batch_timestamp == h1.max_timestamp == 5_002
    assert seg.max_timestamp == 5_002
    assert seg.offset_of_max_timestamp == BASE + 2
    data = seg.read(BASE, 1 << 20)
    assert offsets_in(data) == list(range(BASE, BASE + 5))
    assert [h.base_offset for _p, h in iter_batches(data)] == [BASE, BASE + 3]


def test_read_returns_whole_batches_from_the_one_holding_the_offset(tmp_path: Path) -> None:
    seg, ranges = fill(tmp_path, [5, 5, 5, 5])
    for first, last in ranges:
        for offset in range(first, last + 1):
            data = seg.read(offset, 1 << 20)
            assert offsets_in(data)[0] == first  # a read that starts mid-batch gets that batch
            assert offsets_in(data)[-1] == ranges[-1][1]
    assert seg.read(ranges[-1][1] + 1, 1 << 20) == b""


def test_read_respects_max_bytes_but_returns_at_least_one_batch(tmp_path: Path) -> None:
    seg, _ranges = fill(tmp_path, [5, 5, 5])
    one = len(batch(5))
    assert offsets_in(seg.read(BASE, one)) == list(range(BASE, BASE + 5))
    assert offsets_in(seg.read(BASE, 2 * one - 1)) == list(range(BASE, BASE + 5))
    assert offsets_in(seg.read(BASE, 2 * one)) == list(range(BASE, BASE + 10))
    assert offsets_in(seg.read(BASE, 1)) == list(range(BASE, BASE + 5))  # bigger than max_bytes
    assert seg.read(BASE, 1, min_one=False) == b""
    assert seg.read(BASE, 0) != b""


def test_clean_reopen_trusts_indexes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seg, _ = fill(tmp_path, [3] * 50, interval=200)
    seg.seal()
    before = (seg.size, seg.next_offset, seg.max_timestamp, seg.first_batch_timestamp,
              seg.offset_of_max_timestamp, len(seg.index), len(seg.time_index))

    def no_recovery(self: Segment, reason: str) -> None:
        raise AssertionError(f"recovered although the indexes are intact: {reason}")

    monkeypatch.setattr(Segment, "_recover", no_recovery)
    again, report = Segment.open(tmp_path, BASE, 200, recover=False)
    assert report is None
    after = (again.size, again.next_offset, again.max_timestamp, again.first_batch_timestamp,
             again.offset_of_max_timestamp, len(again.index), len(again.time_index))
    assert after == before
    assert again.read(BASE + 77, 1 << 20) == seg.read(BASE + 77, 1 << 20)


def test_reopen_with_unflushed_index_tail_walks_the_rest(tmp_path: Path) -> None:
    seg, _ = fill(tmp_path, [3] * 10, interval=200)
    seg.flush()
    append(seg, batch(4, ts=9_999))  # its index entry stays in memory only
    seg.log_path.stat()
    again, report = Segment.open(tmp_path, BASE, 200, recover=False)
    assert report is None
    assert again.next_offset == seg.next_offset
    assert again.max_timestamp == 10_002


@pytest.mark.parametrize("damage", ["missing", "garbage", "odd-size", "past-end"])
def test_a_bad_offset_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    seg, ranges = fill(tmp_path, [3] * 40, interval=150)
    seg.seal()
    expected = seg.read(BASE, 1 << 20)
    if damage == "missing":
        seg.index_path.unlink()
    elif damage == "garbage":
        seg.index_path.write_bytes(bytes(range(200, 248)))
    elif damage == "odd-size":
        seg.index_path.write_bytes(seg.index_path.read_bytes()[:-3])
    else:
        seg.index_path.write_bytes(seg.index_path.read_bytes() + OFFSET_ENTRY.pack(10_000, 10**6))
    again, report = Segment.open(tmp_path, BASE, 150, recover=False)
    assert report is not None and report.indexes_rebuilt and report.truncated_bytes == 0
    assert again.next_offset == seg.next_offset
    assert again.read(BASE, 1 << 20) == expected
    for first, last in ranges:
        assert offsets_in(again.read(last, 1 << 20))[0] == first
    # the rebuilt files are trusted on the next open
    third, report = Segment.open(tmp_path, BASE, 150, recover=False)
    assert report is None and len(third.index) == len(again.index) > 1


def test_an_index_entry_pointing_inside_a_batch_is_not_trusted(tmp_path: Path) -> None:
    """A damaged entry that still looks sorted must not send reads to the wrong bytes."""
    seg, ranges = fill(tmp_path, [3] * 40, interval=100)
    seg.seal()
    raw = bytearray(seg.index_path.read_bytes())
    n = len(raw) // OFFSET_ENTRY.size
    mid = n // 2
    rel, pos = OFFSET_ENTRY.unpack_from(raw, mid * OFFSET_ENTRY.size)
    OFFSET_ENTRY.pack_into(raw, mid * OFFSET_ENTRY.size, rel, pos + 1)
    seg.index_path.write_bytes(bytes(raw))
    again, _report = Segment.open(tmp_path, BASE, 100, recover=False)
    for first, last in ranges:
        for offset in (first, last):
            assert offsets_in(again.read(offset, 1))[0] == first


@pytest.mark.parametrize("damage", ["missing", "garbage", "beyond-last-offset"])
def test_a_bad_time_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    seg, _ = fill(tmp_path, [3] * 20, interval=100)
    seg.seal()
    if damage == "missing":
        seg.timeindex_path.unlink()
    elif damage == "garbage":
        seg.timeindex_path.write_bytes(b"\xff" * 24)
    else:
        # an entry naming the offset just past the segment's last one
        seg.timeindex_path.write_bytes(
            seg.timeindex_path.read_bytes()
            + (10**9).to_bytes(8, "big")
            + (seg.next_offset - BASE).to_bytes(4, "big")
        )
    again, report = Segment.open(tmp_path, BASE, 100, recover=False)
    assert report is not None and report.indexes_rebuilt
    assert again.max_timestamp == seg.max_timestamp
    assert again.time_index.max_timestamp == seg.max_timestamp


def test_recovery_truncates_a_torn_tail_and_reports_it(tmp_path: Path) -> None:
    seg, ranges = fill(tmp_path, [4, 4, 4])
    full = seg.size
    with open(seg.log_path, "ab") as f:
        f.write(batch(4)[:30])  # half a batch
    again, report = Segment.open(tmp_path, BASE, 0, recover=True)
    assert report is not None
    assert report.truncated_bytes == 30
    assert report.from_offset == ranges[-1][1] + 1
    assert "truncated 30 bytes" in str(report)
    assert again.size == full == seg.log_path.stat().st_size
    append(again, batch(2))
    assert offsets_in(again.read(ranges[-1][1] + 1, 1 << 20)) == [BASE + 12, BASE + 13]


def test_recovery_of_an_intact_segment_reports_nothing(tmp_path: Path) -> None:
    seg, _ = fill(tmp_path, [4, 4, 4])
    seg.flush()
    again, report = Segment.open(tmp_path, BASE, 0, recover=True)
    assert report is None
    assert again.next_offset == seg.next_offset and again.size == seg.size


def test_recovery_truncates_at_a_corrupt_batch(tmp_path: Path) -> None:
    seg, ranges = fill(tmp_path, [4, 4, 4, 4])
    positions = [p for p, _h in iter_batches(seg.log_path.read_bytes())]
    raw = bytearray(seg.log_path.read_bytes())
    raw[positions[2] + 70] ^= 0xFF
    seg.log_path.write_bytes(bytes(raw))
    again, report = Segment.open(tmp_path, BASE, 0, recover=True)
    assert report is not None and report.from_offset == ranges[2][0]
    assert report.truncated_bytes == len(raw) - positions[2]
    assert "CRC" in report.reason
    assert again.next_offset == ranges[2][0]


def test_a_corrupt_byte_in_a_sealed_segment_is_never_served(tmp_path: Path) -> None:
    seg, ranges = fill(tmp_path, [4] * 6, interval=0)
    seg.seal()
    positions = [p for p, _h in iter_batches(seg.log_path.read_bytes())]
    raw = bytearray(seg.log_path.read_bytes())
    raw[positions[3] + 65] ^= 0x01  # inside batch 3's records
    seg.log_path.write_bytes(bytes(raw))
    again, report = Segment.open(tmp_path, BASE, 0, recover=False)
    assert report is None  # a clean open does not read every byte ...
    assert offsets_in(again.read(ranges[2][0], 1 << 20)) == list(range(ranges[2][0], ranges[2][1] + 1))
    with pytest.raises(CorruptRecordError):  # ... but a read does
        again.read(ranges[3][0], 1 << 20)
    assert offsets_in(again.read(ranges[4][0], 1 << 20))[0] == ranges[4][0]


@pytest.mark.parametrize("field_offset", [8, 9, 10, 11, 16])  # length field bytes, magic
def test_a_damaged_batch_header_in_a_sealed_segment_is_detected(
    tmp_path: Path, field_offset: int
) -> None:
    seg, ranges = fill(tmp_path, [4] * 6, interval=0)
    seg.seal()
    positions = [p for p, _h in iter_batches(seg.log_path.read_bytes())]
    raw = bytearray(seg.log_path.read_bytes())
    raw[positions[3] + field_offset] ^= 0x40
    seg.log_path.write_bytes(bytes(raw))
    again, _report = Segment.open(tmp_path, BASE, 0, recover=False)
    assert offsets_in(again.read(ranges[1][0], 1))[0] == ranges[1][0]
    for offset in (ranges[3][0], ranges[3][1], ranges[4][0]):
        try:
            data = again.read(offset, 1 << 20)
        except CorruptRecordError:
            continue
        # whatever is served is intact data of the right offsets, never silence
        assert data != b""
        for pos, header in iter_batches(data):
            check_batch(memoryview(data)[pos : pos + header.size])
        assert offsets_in(data)[0] <= offset <= offsets_in(data)[-1] or offsets_in(data)[0] > offset


def test_truncate_to_removes_batches_from_an_offset(tmp_path: Path) -> None:
    seg, ranges = fill(tmp_path, [3, 3, 3, 3], interval=0)
    seg.truncate_to(ranges[2][0])
    assert seg.next_offset == ranges[2][0]
    assert offsets_in(seg.read(BASE, 1 << 20)) == list(range(BASE, ranges[1][1] + 1))
    assert len(seg.index) == 2
    append(seg, batch(1))
    assert offsets_in(seg.read(ranges[2][0], 1 << 20)) == [ranges[2][0]]


def test_delete_removes_all_three_files(tmp_path: Path) -> None:
    seg, _ = fill(tmp_path, [3])
    seg.seal()
    seg.delete()
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=40),
    value_size=st.integers(min_value=0, max_value=120),
    interval=st.integers(min_value=0, max_value=600),
    data=st.data(),
)
def test_find_position_equals_a_linear_scan(
    sizes: list[int], value_size: int, interval: int, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        seg = Segment.create(Path(tmp), BASE, interval)
        batches: list[tuple[int, BatchHeader]] = []  # (position, header) as appended
        for i, n in enumerate(sizes):
            raw = build_batch(
                [NewRecord(None, bytes([i % 256]) * value_size, 1_000 + i) for _ in range(n)]
            )
            position = seg.size
            append(seg, raw)
            batches.append((position, check_batch(seg.read_batch_at(position, len(raw)))))
        targets = data.draw(
            st.lists(st.integers(min_value=BASE - 3, max_value=seg.next_offset + 3), min_size=1, max_size=25)
        )
        for reopened in (False, True):
            if reopened:
                seg.seal()
                seg, _ = Segment.open(Path(tmp), BASE, interval, recover=False)
            for target in targets:
                expected = next(((p, h) for p, h in batches if h.last_offset >= target), None)
                found = seg.find_position(target)
                assert found == expected
                read = seg.read(target, 1)
                if expected is None:
                    assert read == b""
                else:
                    assert check_batch(read).base_offset == expected[1].base_offset


def test_a_failed_write_leaves_no_partial_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk mid-batch: the part written is removed, so later appends stay aligned."""
    import errno
    import os

    seg, _ = fill(tmp_path, [3, 3])
    real_writev = os.writev

    def full_disk(fd: int, buffers: list[bytes | memoryview]) -> int:
        os.write(fd, bytes(buffers[0]) + bytes(buffers[1])[:20])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", full_disk)
    with pytest.raises(OSError):
        append(seg, batch(3))
    monkeypatch.setattr(os, "writev", real_writev)
    assert seg.log_path.stat().st_size == seg.size
    append(seg, batch(2))
    assert offsets_in(seg.read(BASE, 1 << 20)) == list(range(BASE, BASE + 8))
    seg.seal()
    again, report = Segment.open(tmp_path, BASE, 0, recover=True)
    assert report is None and again.next_offset == BASE + 8


# -- verified ranges and file-range reads (the broker's sendfile path) ----------------------


def range_bytes(got: bytes | FileRange) -> bytes:
    return got.read() if isinstance(got, FileRange) else got


def test_verified_ranges_merge_and_cover() -> None:
    ranges = VerifiedRanges()
    ranges.add(100, 200)
    ranges.add(300, 400)
    assert ranges.as_list() == [(100, 200), (300, 400)]
    assert ranges.covers(120, 200) and not ranges.covers(150, 250) and not ranges.covers(0, 10)
    ranges.add(200, 300)  # touching both neighbours: one range
    assert ranges.as_list() == [(100, 400)]
    ranges.add(0, 50)
    ranges.add(40, 120)
    assert ranges.as_list() == [(0, 400)]
    ranges.add(500, 500)  # empty: nothing
    assert ranges.as_list() == [(0, 400)] and ranges.covers(0, 400)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=12),
    st.integers(0, 80),
    st.integers(1, 20),
)
def test_verified_ranges_cover_exactly_what_was_added(
    adds: list[tuple[int, int]], start: int, length: int
) -> None:
    ranges = VerifiedRanges()
    added: set[int] = set()
    for at, n in adds:
        ranges.add(at, at + n)
        added.update(range(at, at + n))
    assert ranges.covers(start, start + length) == added.issuperset(range(start, start + length))
    listed = ranges.as_list()
    assert all(a < b for a, b in listed) and all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(listed))


def test_crc_checked_appends_are_read_as_file_ranges_with_the_same_bytes(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, BASE, 4096)
    for i in range(6):
        data = batch(50, tag=i)
        seg.append(check_batch(data), data, seg.next_offset, crc_checked=True)
    for offset, max_bytes in ((BASE, 10**6), (BASE + 120, 3000), (BASE + 299, 1), (BASE + 60, 10**6)):
        got = seg.read_range(offset, max_bytes)
        assert isinstance(got, FileRange)
        assert got.read() == seg.read(offset, max_bytes)
        assert [h for _p, h in got.headers()] == [h for _p, h in iter_batches(got.read())]


def test_unchecked_bytes_are_read_and_checked_first_then_served_as_ranges(tmp_path: Path) -> None:
    seg, _ = fill(tmp_path, [40, 40, 40, 40], interval=1)
    seg.close()
    reopened, report = Segment.open(tmp_path, BASE, 1, recover=False)
    assert report is None  # a trusting open checks no CRC, so nothing is verified yet
    assert reopened.verified.as_list() == []
    second = reopened.read_range(BASE + 40, 10**6)  # from the second batch on
    assert isinstance(second, bytes) and offsets_in(second)[0] == BASE + 40
    again = reopened.read_range(BASE + 40, 10**6)
    assert isinstance(again, FileRange) and again.read() == second
    first = reopened.read_range(BASE, 10**6)  # the first batch is still unchecked
    assert isinstance(first, bytes) and offsets_in(first)[0] == BASE
    assert reopened.verified.as_list() == [(0, reopened.size)]


def test_a_corrupt_byte_on_disk_is_never_served_as_a_file_range(tmp_path: Path) -> None:
    seg, ranges = fill(tmp_path, [30, 30, 30], interval=1)
    seg.seal()
    positions = [pos for pos, _h in iter_batches(seg.read(BASE, 10**6))]
    # Flip a value byte inside the second batch (covered by its CRC) behind the segment's back.
    with open(seg.log_path, "r+b") as f:
        f.seek(positions[1] + 100)
        byte = f.read(1)
        f.seek(positions[1] + 100)
        f.write(bytes([byte[0] ^ 0xFF]))
    reopened, _ = Segment.open(tmp_path, BASE, 1, recover=False)
    with pytest.raises(CorruptRecordError):
        reopened.read_range(ranges[1][0], 10**6)
    with pytest.raises(CorruptRecordError):
        reopened.read_range(ranges[1][0], 10**6)  # still refused: a failed check verifies nothing
    head = reopened.read_range(BASE, 10**6)
    assert isinstance(head, bytes) and offsets_in(head) == list(range(BASE, ranges[0][1] + 1))
    assert not reopened.verified.covers(positions[1], positions[2])
    # A recovery scan (closed segment: the damaged batch is kept) verifies all but that batch.
    recovered, report = Segment.open(tmp_path, BASE, 1, recover=True, closed=True)
    assert report is not None
    assert recovered.verified.as_list() == [(0, positions[1]), (positions[2], recovered.size)]
    assert isinstance(recovered.read_range(ranges[2][0], 10**6), FileRange)
    with pytest.raises(CorruptRecordError):
        recovered.read_range(ranges[1][0], 10**6)


def test_appends_without_a_crc_check_are_not_verified(tmp_path: Path) -> None:
    seg = Segment.create(tmp_path, BASE, 4096)
    data = batch(10)
    seg.append(check_batch(data, verify_crc=False), data, BASE)
    assert seg.verified.as_list() == []
    assert isinstance(seg.read_range(BASE, 10**6), bytes)
