"""The plain parts: the read-only reader's edges, the offset plan, the import boundary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamkit._core.errors import ConfigError
from streamkit.log.errors import UnknownTopicError
from streamkit.log.reader import partition_bounds, read_batches, topic_partition_count
from streamkit.spark.options import EARLIEST, LATEST, OffsetRange, parse_offsets, split_range
from streamkit.spark.source import _limit
from tests.spark.conftest import make_topic


def test_importing_streamkit_does_not_import_spark() -> None:
    code = "import sys, streamkit; assert not {'pyspark', 'pyarrow'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_append_in_progress_at_the_log_end_is_not_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 1, 20, batch=10)
    segment = data / "t-0" / f"{0:020d}.log"
    whole = segment.read_bytes()
    second = int.from_bytes(whole[8:12], "big") + 12
    with open(segment, "ab") as f:
        f.write(whole[second : second + 30])  # the start of a batch being written
    assert partition_bounds(data, "t", 0) == (0, 20)
    assert [h.base_offset for h, _ in read_batches(data, "t", 0, 0)] == [0, 10]


def test_reader_ranges_and_missing_things(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_topic(data, "t", 2, 40, batch=10, config={"segment.bytes": "400"})
    assert len(list((data / "t-0").glob("*.log"))) > 2  # ranges cross segments
    assert topic_partition_count(data, "t") == 2
    assert [h.base_offset for h, _ in read_batches(data, "t", 0, 15, 31)] == [10, 20, 30]
    assert partition_bounds(data, "t", 1) == (0, 40)
    with pytest.raises(UnknownTopicError):
        topic_partition_count(data, "missing")
    with pytest.raises(ConfigError):
        topic_partition_count(tmp_path / "nowhere", "t")


def test_offsets_options() -> None:
    assert parse_offsets(None, "t", EARLIEST, "startingOffsets") == {-1: EARLIEST}
    assert parse_offsets("latest", "t", EARLIEST, "startingOffsets") == {-1: LATEST}
    assert parse_offsets('{"t": {"0": 5, "2": -1}}', "t", EARLIEST, "startingOffsets") == {
        -1: EARLIEST, 0: 5, 2: LATEST,
    }
    with pytest.raises(ConfigError, match="not an offset"):
        parse_offsets('{"t": {"0": -3}}', "t", EARLIEST, "startingOffsets")


def test_split_range_covers_every_offset_once() -> None:
    for start, end, most in ((0, 0, 10), (0, 10, 10), (3, 250, 60), (5, 6, 1), (0, 100, 0)):
        pieces = split_range(OffsetRange(0, start, end), most)
        covered = [o for piece in pieces for o in range(piece.start, piece.end)]
        assert covered == list(range(start, end))
        assert most == 0 or all(p.end - p.start <= most for p in pieces)


def test_read_limit_shares_out_offsets() -> None:
    bounds = {0: (0, 100), 1: (0, 3), 2: (10, 50)}
    ends = _limit({0: 0, 1: 0}, bounds, 30)
    assert sum(ends[p] - max({0: 0, 1: 0}.get(p, bounds[p][0]), bounds[p][0]) for p in ends) == 30
    assert ends[1] == 3 and all(ends[p] <= bounds[p][1] for p in ends)
    assert _limit({0: 100, 1: 3, 2: 50}, bounds, 30) == {0: 100, 1: 3, 2: 50}
