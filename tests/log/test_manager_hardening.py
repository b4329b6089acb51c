"""A data directory under stress: read-only opens, damaged metadata, failed creations, long
names, out-of-range configs, many partitions."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from streamkit.log.config import TopicConfig
from streamkit.log.errors import (
    DataDirLockedError,
    InvalidTopicError,
    LogClosedError,
    TopicExistsError,
)
from streamkit.log.inspect import BatchEntry, read_segment
from streamkit.log.manager import LogManager
from streamkit.log.partition import Partition
from streamkit.log.records import NewRecord

SEGMENT = "00000000000000000000"


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _damaged_log(data: Path, records: int = 100, damaged_batch: int = 10) -> None:
    with LogManager(data, background=False) as log:
        log.create_topic("t", 1)
        part = log.partition("t", 0)
        for i in range(records):
            part.append_records([NewRecord(b"k", b"v%d" % i, 1000 + i)])
    log_file = data / "t-0" / f"{SEGMENT}.log"
    pos = [b for b in read_segment(log_file) if isinstance(b, BatchEntry)][damaged_batch].position
    raw = bytearray(log_file.read_bytes())
    raw[pos + 70] ^= 0xFF  # inside the records: only the CRC tells
    log_file.write_bytes(bytes(raw))
    (data / "t-0" / f"{SEGMENT}.index").unlink()


# -- read-only -----------------------------------------------------------------------------


def test_read_only_open_reports_damage_and_changes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _damaged_log(data)
    before = _files(data)
    warnings: list[str] = []
    with LogManager(data, background=False, read_only=True, warn=warnings.append) as log:
        part = log.partition("t", 0)
        assert part.high_watermark == 100  # nothing cut, nothing hidden
        assert len(part.read(0, 10_000)) > 0
        with pytest.raises(LogClosedError):
            part.append_records([NewRecord(b"k", b"v", 0)])
        with pytest.raises(LogClosedError):
            log.create_topic("other", 1)
        with pytest.raises(LogClosedError):
            log.delete_topic("t")
        [report] = log.recovery_reports
        assert report.damaged and not report.repaired and not report.data_loss
        assert "[10]" in report.reason
    assert _files(data) == before
    assert len(warnings) == 1 and "damage" in warnings[0] and "t-0" in warnings[0]


def test_read_only_open_after_a_crash_recovers_in_memory_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _damaged_log(data)
    (data / ".clean_shutdown").unlink()
    with (data / "t-0" / f"{SEGMENT}.log").open("ab") as f:
        f.write(b"\x00\x01torn")  # half a batch at the end
    before = _files(data)
    with LogManager(data, background=False, read_only=True) as log:
        assert log.partition("t", 0).high_watermark == 100
        [report] = log.recovery_reports
        assert report.truncated_bytes == 6 and not report.repaired
    assert _files(data) == before


def test_readers_share_the_lock_and_exclude_a_writer(tmp_path: Path) -> None:
    data = tmp_path / "data"
    LogManager(data, background=False).open().close()
    with (
        LogManager(data, background=False, read_only=True),
        LogManager(data, background=False, read_only=True),
        pytest.raises(DataDirLockedError, match="being read by another streamkit command"),
    ):
        LogManager(data, background=False).open()


def test_a_writer_reports_a_cut_as_data_loss_with_the_offsets(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _damaged_log(data)
    with LogManager(data, background=False) as log:
        assert log.partition("t", 0).high_watermark == 10
        [report] = log.recovery_reports
    assert report.data_loss
    assert "DATA LOSS" in str(report) and "offsets 10..99 lost" in str(report)


# -- topic metadata ------------------------------------------------------------------------


@pytest.mark.parametrize("read_only", [False, True])
def test_a_corrupt_topic_metadata_file_skips_that_topic_only(tmp_path: Path, read_only: bool) -> None:
    data = tmp_path / "data"
    with LogManager(data, background=False) as log:
        for name in ("a", "b", "c"):
            log.create_topic(name, 2)
        log.partition("c", 1).append_records([NewRecord(b"k", b"v", 0)])
    bad = data / ".meta" / "topics" / "b.json"
    bad.write_bytes(b'{"name": "b", "partit')
    warnings: list[str] = []
    with LogManager(data, background=False, read_only=read_only, warn=warnings.append) as log:
        assert log.list_topics() == ["a", "c"]
        assert log.partition("c", 1).high_watermark == 1
        assert len(warnings) == 1 and str(bad) in warnings[0]
        if not read_only:
            with pytest.raises(TopicExistsError, match="cannot be read"):
                log.create_topic("b", 1)
    assert bad.read_bytes() == b'{"name": "b", "partit'  # left for a person to look at


# -- creation is all or nothing ------------------------------------------------------------


def test_a_creation_that_fails_part_way_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fault (running out of descriptors at partition 150) is injected: with descriptors
    # opened lazily a real creation no longer runs out of them.
    data = tmp_path / "data"
    real_open = Partition.open

    def failing_open(self: Partition, *, clean_shutdown: bool) -> list[object]:
        if self.tp.topic == "m" and self.tp.partition == 150:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(self, clean_shutdown=clean_shutdown)  # type: ignore[return-value]

    with LogManager(data, background=False) as log:
        log.create_topic("keep", 1)
        monkeypatch.setattr(Partition, "open", failing_open)
        with pytest.raises(OSError, match="Too many open files"):
            log.create_topic("m", 300)
        monkeypatch.undo()
        assert log.list_topics() == ["keep"]
        assert not (data / ".meta" / "topics" / "m.json").exists()
        assert not [p for p in data.iterdir() if p.name.startswith("m-") or p.name.endswith("-delete")]
        log.create_topic("m", 3)  # and the name is free again
    with LogManager(data, background=False) as log:
        assert log.list_topics() == ["keep", "m"]
        log.delete_topic("m")


def test_partitions_hold_no_descriptor_until_used(tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    with LogManager(tmp_path / "data", background=False) as log:
        start = open_fds()
        log.create_topic("many", 300)
        assert open_fds() - start < 10
        log.partition("many", 7).append_records([NewRecord(b"k", b"v", 0)])
        assert open_fds() - start < 10
    with LogManager(tmp_path / "data", background=False) as log:
        start = open_fds()
        assert len(log.partition_infos("many")) == 300
        assert log.partition("many", 7).read(0)
        assert open_fds() - start < 10


# -- names and configs checked up front ----------------------------------------------------


@pytest.mark.parametrize("length", [247, 248, 249])
def test_the_longest_legal_topic_names_work_end_to_end(tmp_path: Path, length: int) -> None:
    name = "n" * length
    data = tmp_path / "data"
    with LogManager(data, background=False) as log:
        log.create_topic(name, 2)
        log.partition(name, 1).append_records([NewRecord(b"k", b"v", 0)])
        log.alter_topic_config(name, {"retention.ms": "1000"})
        log.add_partitions(name, 3)
    with LogManager(data, background=False) as log:
        assert log.partition(name, 1).high_watermark == 1
        log.delete_topic(name)
        assert log.list_topics() == []
    # The longest name a topic makes: a partition directory of the largest partition number.
    assert len(f"{name}-9999") <= 255


def test_a_topic_name_past_249_characters_is_refused(tmp_path: Path) -> None:
    with LogManager(tmp_path / "data", background=False) as log, pytest.raises(InvalidTopicError):
        log.create_topic("n" * 250, 1)


@pytest.mark.parametrize(
    "value", ["0", "-1", "2147483648", "99999999999999999999", "-99999999999999999999"]
)
def test_max_message_bytes_out_of_range_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidTopicError, match=r"max\.message\.bytes"):
        TopicConfig.from_kafka({"max.message.bytes": value})
    with LogManager(tmp_path / "data", background=False) as log:
        with pytest.raises(InvalidTopicError):
            log.create_topic("t", 1, {"max.message.bytes": value})
        assert log.list_topics() == []
        assert not (tmp_path / "data" / "t-0").exists()


def test_longs_out_of_range_are_refused() -> None:
    with pytest.raises(InvalidTopicError, match="Not a number of type LONG"):
        TopicConfig.from_kafka({"retention.ms": str(2**63)})
    assert TopicConfig.from_kafka({"retention.ms": str(2**63 - 1)}).retention_ms == 2**63 - 1
    assert TopicConfig.from_kafka({"max.message.bytes": "1"}).max_message_bytes == 1
    assert TopicConfig.from_kafka({"max.message.bytes": "2147483647"}).max_message_bytes == 2**31 - 1


def test_a_reader_of_a_segment_the_compactor_replaced_still_reads_the_old_file(tmp_path: Path) -> None:
    # Descriptors open lazily: the old segment's must be open before the cleaned file is
    # renamed over its name, or a reader holding the old segment would read the new file.
    data = tmp_path / "data"
    with LogManager(data, background=False) as log:
        log.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "400"})
        part = log.partition("c", 0)
        for i in range(40):
            part.append_records([NewRecord(b"k%d" % (i % 2), b"v%d" % i, 1000 + i)])
    with LogManager(data, background=False) as log:
        part = log.partition("c", 0)
        old = part.segments[0]
        before = old.read(old.base_offset, 1 << 20)
        old_segments = list(part.segments)
        # Forget the descriptor the read opened, as a segment nobody read yet has none.
        old._file.close()
        assert log.run_upkeep(force_compaction=True).segments_compacted >= 1
        assert part.segments[0] is not old_segments[0]
        assert old.read(old.base_offset, 1 << 20) == before
