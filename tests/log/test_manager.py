"""The data directory: topics and their configs, the lock, upkeep, reopening."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamkit._core.clock import ManualClock
from streamkit._core.types import TopicPartition
from streamkit.log.config import TopicConfig
from streamkit.log.errors import (
    DataDirLockedError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogClosedError,
    TopicExistsError,
    UnknownTopicError,
)
from streamkit.log.manager import LogManager
from streamkit.log.offsets import OFFSETS_TOPIC
from streamkit.log.records import NewRecord, decode_batches

OpenLog = Callable[..., LogManager]
REPO = Path(__file__).resolve().parents[2]


def values(log: LogManager, topic: str, partition: int = 0) -> list[bytes | None]:
    part = log.partition(topic, partition)
    data = part.read(part.log_start_offset, 1 << 24)
    return [r.value for _h, recs in decode_batches(data) for r in recs]


def test_topics_create_list_describe_delete_persist(open_log: OpenLog) -> None:
    log = open_log()
    assert log.list_topics() == []
    assert log.list_topics(include_internal=True) == [OFFSETS_TOPIC]
    desc = log.create_topic("orders", 3, {"retention.ms": "1000", "cleanup.policy": "compact,delete"})
    assert (desc.name, desc.partitions, desc.internal) == ("orders", 3, False)
    assert desc.config.retention_ms == 1000 and desc.config.compact and desc.config.delete
    log.create_topic("users")  # the default partition count
    assert log.describe_topic("users").partitions == 1
    assert log.list_topics() == ["orders", "users"]
    assert log.has_topic("orders") and not log.has_topic("nope")
    log.partition("orders", 2).append_records([NewRecord(b"k", b"v", 0)])
    infos = log.partition_infos("orders")
    assert [(i.partition, i.high_watermark) for i in infos] == [(0, 0), (1, 0), (2, 1)]
    log.close()

    log = open_log()
    assert log.list_topics() == ["orders", "users"]
    assert log.describe_topic("orders").config.retention_ms == 1000
    assert values(log, "orders", 2) == [b"v"]
    log.delete_topic("users")
    assert log.list_topics() == ["orders"]
    log.close()

    log = open_log()
    assert log.list_topics() == ["orders"]
    assert not any(p.name.startswith("users") for p in log.data_dir.iterdir())


def test_alter_topic_config_is_persisted_and_applied(open_log: OpenLog) -> None:
    log = open_log()
    log.create_topic("t", 2, {"retention.ms": "5000"})
    desc = log.alter_topic_config("t", {"segment.bytes": "100"})
    assert desc.config.segment_bytes == 100 and desc.config.retention_ms == 5000
    part = log.partition("t", 1)
    assert part.config.segment_bytes == 100
    for _ in range(3):
        part.append_records([NewRecord(None, b"x" * 50, 0)])
    assert len(part.segments) == 3  # the new segment.bytes rolls at once
    with pytest.raises(InvalidTopicError):
        log.alter_topic_config("t", {"segment.bytes": "lots"})
    with pytest.raises(UnknownTopicError):
        log.alter_topic_config("nope", {"retention.ms": "1"})
    log.close()
    again = open_log()
    assert again.describe_topic("t").config.segment_bytes == 100
    assert again.describe_topic("t").config.retention_ms == 5000


@pytest.mark.parametrize(
    "name", ["", "a/b", "..", ".", "x" * 250, "with space", "ünï", "__mine", "a\nb"]
)
def test_invalid_topic_names_are_rejected(tmp_log: LogManager, name: str) -> None:
    with pytest.raises(InvalidTopicError):
        tmp_log.create_topic(name)
    assert tmp_log.list_topics() == []


@pytest.mark.parametrize(
    "config",
    [
        {"no.such.config": "1"},
        {"retention.ms": "soon"},
        {"retention.ms": "-2"},
        {"cleanup.policy": "sometimes"},
        {"cleanup.policy": ""},
        {"segment.bytes": "10"},
        {"segment.ms": "0"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "nan"},
        {"delete.retention.ms": "-1"},
        {"min.compaction.lag.ms": "-1"},
        {"flush.messages": "-1"},
        {"max.message.bytes": "x"},
    ],
)
def test_invalid_topic_configs_are_rejected(tmp_log: LogManager, config: dict[str, str]) -> None:
    with pytest.raises(InvalidTopicError):
        tmp_log.create_topic("t", 1, config)
    assert not tmp_log.has_topic("t")
    assert not (tmp_log.data_dir / "t-0").exists()


@pytest.mark.parametrize("partitions", [0, -1, 10_001])
def test_partition_counts_are_checked(tmp_log: LogManager, partitions: int) -> None:
    with pytest.raises(InvalidTopicError):
        tmp_log.create_topic("t", partitions)


def test_config_round_trips_through_kafka_names() -> None:
    config = TopicConfig.from_kafka({"cleanup.policy": "delete,compact", "retention.ms": "-1"})
    assert config.cleanup_policy == "compact,delete"
    assert TopicConfig.from_kafka(config.to_kafka()).to_kafka() == config.to_kafka()


def test_topic_errors(tmp_log: LogManager) -> None:
    tmp_log.create_topic("t", 2)
    with pytest.raises(TopicExistsError):
        tmp_log.create_topic("t", 2)
    with pytest.raises(UnknownTopicError):
        tmp_log.describe_topic("nope")
    with pytest.raises(UnknownTopicError):
        tmp_log.delete_topic("nope")
    with pytest.raises(UnknownTopicError, match="no partition 2"):
        tmp_log.partition("t", 2)
    with pytest.raises(UnknownTopicError, match="unknown topic"):
        tmp_log.partition("nope", 0)
    with pytest.raises(InvalidTopicError):
        tmp_log.delete_topic(OFFSETS_TOPIC)


def test_partitions_are_added_never_removed_and_persist(open_log: OpenLog) -> None:
    log = open_log()
    log.create_topic("grow", 2)
    log.partition("grow", 1).append_records([NewRecord(None, b"kept", 0)])
    assert log.add_partitions("grow", 5).partitions == 5
    log.partition("grow", 4).append_records([NewRecord(None, b"new", 0)])
    for total in (5, 3, 10_001):
        with pytest.raises(InvalidPartitionsError, match="has 5 partitions"):
            log.add_partitions("grow", total)
    with pytest.raises(UnknownTopicError):
        log.add_partitions("nope", 3)
    with pytest.raises(InvalidTopicError, match="internal"):
        log.add_partitions(OFFSETS_TOPIC, 100)
    log.close()
    log = open_log()
    assert log.describe_topic("grow").partitions == 5
    assert (values(log, "grow", 1), values(log, "grow", 4)) == ([b"kept"], [b"new"])


def test_partitions_left_by_a_growth_cut_short_are_not_served(open_log: OpenLog) -> None:
    """Directories made for new partitions before a crash (the metadata still says 1) are
    ignored, and a later growth starts those partitions empty."""
    log = open_log()
    log.create_topic("t", 1)
    log.add_partitions("t", 2)
    log.partition("t", 1).append_records([NewRecord(None, b"orphan", 0)])
    log.close()
    meta = log.data_dir / ".meta" / "topics" / "t.json"
    meta.write_text(meta.read_text().replace('"partitions":2', '"partitions":1'))
    log = open_log()
    assert log.describe_topic("t").partitions == 1
    log.add_partitions("t", 2)
    assert values(log, "t", 1) == []


def test_a_recreated_topic_starts_empty(open_log: OpenLog) -> None:
    log = open_log()
    log.create_topic("t")
    log.partition("t", 0).append_records([NewRecord(None, b"old", 0)])
    log.delete_topic("t")
    log.create_topic("t")
    assert log.partition("t", 0).high_watermark == 0


def test_a_delete_cut_short_by_a_crash_does_not_resurrect_data(open_log: OpenLog) -> None:
    """The topic's metadata went but its directories stayed: a new topic of that name is empty."""
    log = open_log()
    log.create_topic("t")
    log.partition("t", 0).append_records([NewRecord(None, b"old", 0)])
    log.close()
    (log.data_dir / ".meta" / "topics" / "t.json").unlink()
    log = open_log()
    assert not log.has_topic("t")
    log.create_topic("t")
    assert log.partition("t", 0).high_watermark == 0
    assert values(log, "t") == []


def test_a_second_manager_on_the_same_directory_is_refused(open_log: OpenLog, data_dir: Path) -> None:
    log = open_log()
    with pytest.raises(DataDirLockedError) as info:
        LogManager(data_dir, background=False).open()
    message = str(info.value)
    assert str(data_dir) in message and str(os.getpid()) in message
    log.close()
    again = LogManager(data_dir, background=False).open()  # released on close
    again.close()


LOCKER = """
import sys
from streamkit.log.manager import LogManager
from streamkit.log.errors import DataDirLockedError
try:
    log = LogManager(sys.argv[1], background=False).open()
except DataDirLockedError as exc:
    print("LOCKED:", exc, flush=True)
    sys.exit(3)
print("OPEN", flush=True)
sys.stdin.readline()
log.close()
"""


def test_a_second_process_gets_one_clear_error(open_log: OpenLog, data_dir: Path) -> None:
    log = open_log()
    result = subprocess.run(
        [sys.executable, "-c", LOCKER, str(data_dir)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert result.returncode == 3, result.stderr
    assert "LOCKED:" in result.stdout and str(os.getpid()) in result.stdout
    assert str(data_dir) in result.stdout
    log.close()


def test_a_directory_held_by_another_process_is_refused(data_dir: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(data_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "OPEN"
        with pytest.raises(DataDirLockedError, match=f"pid {holder.pid}"):
            LogManager(data_dir, background=False).open()
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    LogManager(data_dir, background=False).open().close()  # a dead owner leaves no lock


def test_clean_shutdown_marker_and_recovery_reports(open_log: OpenLog, data_dir: Path) -> None:
    log = open_log()
    assert not log.clean_shutdown  # a new directory has no marker
    log.create_topic("t")
    for i in range(5):
        log.partition("t", 0).append_records([NewRecord(None, b"v%d" % i, 0)])
    log.close()
    log = open_log()
    assert log.clean_shutdown and log.recovery_reports == []
    log.partition("t", 0).append_records([NewRecord(None, b"v5", 0)])
    segment = log.partition("t", 0).segments[-1].log_path
    log.partition("t", 0).flush()
    # a crash: no close, a torn tail; release the lock as the dying process would
    log._release_lock()
    with open(segment, "ab") as f:
        f.write(b"\x00\x00\x00\x00")
    crashed = LogManager(data_dir, background=False).open()
    try:
        assert not crashed.clean_shutdown
        assert [(r.truncated_bytes, r.from_offset) for r in crashed.recovery_reports] == [(4, 6)]
        assert values(crashed, "t") == [b"v%d" % i for i in range(6)]
    finally:
        crashed.close()


def test_closed_manager_refuses_work_and_reopens(open_log: OpenLog) -> None:
    log = open_log()
    log.create_topic("t")
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogClosedError):
        log.create_topic("u")
    with pytest.raises(LogClosedError):
        log.partition("t", 0).append_records([NewRecord(None, b"v", 0)])
    log.open()
    assert log.list_topics() == ["t"]
    log.partition("t", 0).append_records([NewRecord(None, b"v", 0)])
    log.close()


def test_append_listeners(tmp_log: LogManager) -> None:
    seen: list[tuple[TopicPartition, int]] = []
    tmp_log.create_topic("before")
    tmp_log.add_append_listener(lambda tp, hw: seen.append((tp, hw)))
    tmp_log.create_topic("after")
    tmp_log.partition("before", 0).append_records([NewRecord(None, b"v", 0)])
    tmp_log.partition("after", 0).append_records([NewRecord(None, b"v", 0)] * 2)
    assert seen == [(TopicPartition("before", 0), 1), (TopicPartition("after", 0), 2)]


def test_upkeep_flushes_per_flush_ms(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log()
    log.create_topic("t", 1, {"flush.ms": "1000"})
    log.partition("t", 0).append_records([NewRecord(None, b"v", 0)])
    assert log.run_upkeep().flushed == 0
    clock.advance(1000)
    assert log.run_upkeep().flushed == 1
    assert log.run_upkeep().flushed == 0


def test_background_upkeep_applies_retention(data_dir: Path) -> None:
    log = LogManager(
        data_dir, upkeep_interval_ms=10, retention_check_interval_ms=0, compaction_interval_ms=0
    ).open()
    try:
        log.create_topic("t", 1, {"retention.ms": "1000", "segment.bytes": "100"})
        for _ in range(5):
            log.partition("t", 0).append_records([NewRecord(None, b"x" * 50, 1_000)])  # long ago
        deadline = time.monotonic() + 10
        while len(log.partition("t", 0).segments) > 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(log.partition("t", 0).segments) == 1
        log.close()
        assert log._thread is None
        log.open()  # a reopened manager runs its upkeep again
        assert log._thread is not None and log._thread.is_alive()
    finally:
        log.close()
    assert log._thread is None
