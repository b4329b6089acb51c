"""The sparse offset index and the time index: lookup math, files, and what ``load`` rejects."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from streamkit.log.index import OFFSET_ENTRY, TIME_ENTRY, OffsetIndex, TimeIndex

BASE = 1000


def test_offset_index_lookup_finds_greatest_entry_at_or_below(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", BASE)
    for last, pos in [(BASE + 4, 0), (BASE + 9, 100), (BASE + 20, 250)]:
        index.append(last, pos)
    assert index.lookup(BASE) == (BASE - 1, 0)  # before every entry: scan from the start
    assert index.lookup(BASE + 3) == (BASE - 1, 0)
    assert index.lookup(BASE + 4) == (BASE + 4, 0)
    assert index.lookup(BASE + 15) == (BASE + 9, 100)
    assert index.lookup(BASE + 20) == (BASE + 20, 250)
    assert index.lookup(BASE + 10**6) == (BASE + 20, 250)
    assert index.last_entry() == (BASE + 20, 250)


def test_offset_index_ignores_entries_that_do_not_move_forward(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", BASE)
    index.append(BASE + 5, 0)
    index.append(BASE + 5, 10)
    index.append(BASE + 3, 20)
    assert len(index) == 1


def test_offset_index_flush_then_load_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, BASE)
    for i in range(10):
        index.append(BASE + 10 * i + 9, 500 * i)
    index.flush(fsync=False)
    assert path.stat().st_size == 10 * OFFSET_ENTRY.size
    index.append(BASE + 109, 5000)
    index.flush(fsync=True)  # appends only what is new
    assert path.stat().st_size == 11 * OFFSET_ENTRY.size
    loaded = OffsetIndex.load(path, BASE, log_size=6000)
    assert loaded is not None
    assert [loaded.lookup(BASE + 10 * i + 9) for i in range(11)] == [
        index.lookup(BASE + 10 * i + 9) for i in range(11)
    ]


def test_offset_index_load_rejects_what_cannot_be_trusted(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    assert OffsetIndex.load(path, BASE, 100) is None  # missing
    path.write_bytes(OFFSET_ENTRY.pack(4, 0) + b"\x00\x01\x02")  # not whole entries
    assert OffsetIndex.load(path, BASE, 100) is None
    path.write_bytes(OFFSET_ENTRY.pack(9, 50) + OFFSET_ENTRY.pack(4, 80))  # offsets go back
    assert OffsetIndex.load(path, BASE, 100) is None
    path.write_bytes(OFFSET_ENTRY.pack(4, 50) + OFFSET_ENTRY.pack(9, 50))  # positions stall
    assert OffsetIndex.load(path, BASE, 100) is None
    path.write_bytes(OFFSET_ENTRY.pack(4, 0) + OFFSET_ENTRY.pack(9, 100))  # past the log's end
    assert OffsetIndex.load(path, BASE, 100) is None
    path.write_bytes(OFFSET_ENTRY.pack(-1, 0))  # before the segment
    assert OffsetIndex.load(path, BASE, 100) is None
    path.write_bytes(b"")
    loaded = OffsetIndex.load(path, BASE, 0)
    assert loaded is not None and len(loaded) == 0


def test_offset_index_truncate_to_position_rewrites_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, BASE)
    for i in range(5):
        index.append(BASE + i, 100 * i)
    index.truncate_to_position(250)  # keeps the entries of batches before position 250
    assert index.last_entry() == (BASE + 2, 200)
    assert path.read_bytes() == b"".join(OFFSET_ENTRY.pack(i, 100 * i) for i in range(3))
    assert not path.with_name("x.index.tmp").exists()


def test_time_index_lookup_returns_last_offset_wholly_below(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", BASE)
    index.append(100, BASE + 4)
    index.append(100, BASE + 7)  # not a new maximum: ignored
    index.append(200, BASE + 9)
    index.append(300, BASE + 15)
    assert len(index) == 3
    assert index.max_timestamp == 300
    assert index.lookup(50) == BASE - 1
    assert index.lookup(100) == BASE - 1  # the batch up to BASE+4 may hold 100
    assert index.lookup(101) == BASE + 4
    assert index.lookup(250) == BASE + 9
    assert index.lookup(10**12) == BASE + 15


def test_time_index_load_and_truncate(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    index = TimeIndex(path, BASE)
    for i in range(6):
        index.append(1000 + i, BASE + 2 * i)
    index.flush(fsync=False)
    loaded = TimeIndex.load(path, BASE, last_relative_offset=10)
    assert loaded is not None and loaded.max_timestamp == 1005
    assert TimeIndex.load(path, BASE, last_relative_offset=9) is None  # points past the end
    index.truncate_to_offset(BASE + 5)
    assert index.max_timestamp == 1002
    assert len(path.read_bytes()) == 3 * TIME_ENTRY.size
    path.write_bytes(TIME_ENTRY.pack(5, 1) + TIME_ENTRY.pack(4, 2))  # timestamps go back
    assert TimeIndex.load(path, BASE, 10) is None
    path.write_bytes(TIME_ENTRY.pack(5, 1)[:-1])
    assert TimeIndex.load(path, BASE, 10) is None
    path.unlink()
    assert TimeIndex.load(path, BASE, 10) is None


@settings(deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=50), min_size=0, max_size=60),
    st.lists(st.integers(min_value=-5, max_value=1500), min_size=1, max_size=30),
)
def test_offset_index_lookup_equals_a_linear_scan(gaps: list[int], targets: list[int]) -> None:
    index = OffsetIndex(Path("/nonexistent/never-written.index"), 0)
    entries: list[tuple[int, int]] = []
    last = -1
    for i, gap in enumerate(gaps):
        last += gap
        entries.append((last, 64 * i))
        index.append(last, 64 * i)
    for target in targets:
        expected = (-1, 0)
        for entry in entries:
            if entry[0] <= target:
                expected = entry
        assert index.lookup(target) == expected


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(min_value=1, max_value=9)),
        max_size=60,
    ),
    st.lists(st.integers(min_value=-1, max_value=10_001), min_size=1, max_size=20),
)
def test_time_index_lookup_is_a_safe_lower_bound(
    batches: list[tuple[int, int]], targets: list[int]
) -> None:
    """Every batch up to the offset a lookup returns lies wholly before the timestamp."""
    index = TimeIndex(Path("/nonexistent/never-written.timeindex"), 0)
    max_ts, max_off, last = -1, -1, -1
    seen: list[tuple[int, int]] = []  # (last offset, max timestamp) of each batch
    for ts, n in batches:
        last += n
        seen.append((last, ts))
        if ts > max_ts:
            max_ts, max_off = ts, last
        index.append(max_ts, max_off)
    for target in targets:
        bound = index.lookup(target)
        assert all(ts < target for off, ts in seen if off <= bound)
        # and it is as far forward as the entries allow: the last batch that raised the
        # running maximum while staying below the target
        expected, running = -1, -1
        for off, ts in seen:
            if ts > running:
                running = ts
                if ts < target:
                    expected = off
        assert bound == expected


def test_records_without_timestamps_do_not_break_the_time_index(tmp_path: Path) -> None:
    from streamkit.log.manager import LogManager
    from streamkit.log.records import NewRecord

    with LogManager(tmp_path, background=False) as log:
        log.create_topic("t")
        log.partition("t", 0).append_records([NewRecord(b"k", b"v", -1)])
    for _ in range(2):
        with LogManager(tmp_path, background=False) as log:
            assert log.recovery_reports == []
            assert log.partition("t", 0).high_watermark == 1
