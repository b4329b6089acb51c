"""Committed group offsets: durable, restored on open, forgotten with their group or topic."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from streamkit._core.clock import ManualClock
from streamkit._core.types import TopicPartition
from streamkit.log.manager import LogManager
from streamkit.log.offsets import OFFSETS_TOPIC
from streamkit.log.records import control_batch

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)
OpenLog = Callable[..., LogManager]


def test_commit_and_fetch(open_log: OpenLog, clock: ManualClock) -> None:
    log = open_log()
    log.create_topic("a", 2)
    offsets = log.offsets
    assert offsets.fetch("g") == {}
    offsets.commit("g", {A0: (5, "meta"), A1: (7, "")})
    clock.advance(10)
    offsets.commit("g", {A0: (6, "later")})
    offsets.commit("h", {B0: (1, "")})
    offsets.commit("empty", {})
    assert offsets.fetch("g") == {A0: (6, "later"), A1: (7, "")}
    assert offsets.fetch("g", [A1, B0]) == {A1: (7, "")}
    detailed = offsets.fetch_detailed("g")
    assert detailed[A0].commit_timestamp_ms == clock.now_ms()
    assert detailed[A1].commit_timestamp_ms == clock.now_ms() - 10
    assert offsets.groups() == ["g", "h"]


def test_commits_survive_a_clean_and_an_unclean_reopen(
    open_log: OpenLog, data_dir: Path, tmp_path: Path
) -> None:
    log = open_log()
    log.offsets.commit("g", {A0: (5, "m")})
    log.offsets.commit("g", {A0: (9, "n"), B0: (3, "")})
    crashed = tmp_path / "crashed"
    shutil.copytree(data_dir, crashed)  # taken while open: as a crash leaves it
    log.close()
    again = open_log()
    assert again.offsets.fetch("g") == {A0: (9, "n"), B0: (3, "")}
    recovered = open_log(crashed)
    assert not recovered.clean_shutdown
    assert recovered.offsets.fetch("g") == {A0: (9, "n"), B0: (3, "")}


def test_a_commit_is_fsynced_before_it_returns(open_log: OpenLog, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log()
    fsyncs: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd))[1])
    log.offsets.commit("g", {A0: (1, "")})
    active = log.partition(OFFSETS_TOPIC, 0).segments[-1]
    assert active._fd in fsyncs


def test_delete_group(open_log: OpenLog) -> None:
    log = open_log()
    log.offsets.commit("g", {A0: (5, ""), B0: (1, "")})
    log.offsets.commit("keep", {A0: (2, "")})
    log.offsets.delete_group("g")
    log.offsets.delete_group("never-existed")
    assert log.offsets.fetch("g") == {}
    assert log.offsets.groups() == ["keep"]
    log.close()
    again = open_log()
    assert again.offsets.fetch("g") == {}
    assert again.offsets.fetch("keep") == {A0: (2, "")}


def test_deleting_a_topic_forgets_its_offsets(open_log: OpenLog) -> None:
    log = open_log()
    log.create_topic("a", 2)
    log.create_topic("b", 1)
    log.offsets.commit("g", {A0: (5, ""), A1: (6, ""), B0: (1, "")})
    log.delete_topic("a")
    assert log.offsets.fetch("g") == {B0: (1, "")}
    log.create_topic("a", 2)
    assert log.offsets.fetch("g", [A0, A1]) == {}
    log.close()
    again = open_log()
    assert again.offsets.fetch("g") == {B0: (1, "")}


def test_commits_survive_compaction_of_the_offsets_topic(open_log: OpenLog) -> None:
    log = open_log()
    log.alter_topic_config(OFFSETS_TOPIC, {"segment.bytes": "300"})
    for i in range(60):
        log.offsets.commit(f"g{i % 3}", {A0: (i, ""), TopicPartition("a", i % 2): (i, "x")})
    expected = {g: log.offsets.fetch(g) for g in log.offsets.groups()}
    before = log.partition(OFFSETS_TOPIC, 0).size_bytes
    log.run_upkeep(force_compaction=True)
    assert log.partition(OFFSETS_TOPIC, 0).size_bytes < before
    log.close()
    again = open_log()
    assert {g: again.offsets.fetch(g) for g in again.offsets.groups()} == expected


@pytest.mark.timeout(20)
def test_loading_skips_control_batches(open_log: OpenLog) -> None:
    """Transaction markers in the offsets topic (transactional commits) do not stall loading."""
    log = open_log()
    log.offsets.commit("g", {A0: (5, "")})
    log.partition(OFFSETS_TOPIC, 0).append(
        control_batch(commit=True, producer_id=1, producer_epoch=0, timestamp=0)
    )
    log.offsets.commit("g", {A0: (6, "")})
    log.partition(OFFSETS_TOPIC, 0).append(
        control_batch(commit=False, producer_id=1, producer_epoch=0, timestamp=0)
    )
    log.close()
    assert open_log().offsets.fetch("g") == {A0: (6, "")}


def test_a_foreign_record_in_the_offsets_topic_is_skipped_not_fatal(tmp_path: Path) -> None:
    from streamkit._core.types import TopicPartition
    from streamkit.log.manager import LogManager
    from streamkit.log.records import NewRecord

    with LogManager(tmp_path, background=False) as log:
        log.offsets.commit("g", {TopicPartition("t", 0): (5, "")})
        log.partition("__consumer_offsets", 0).append_records([NewRecord(b"not json", b"x", 0)])
    with LogManager(tmp_path, background=False) as log:
        assert log.offsets.skipped == 1
        assert log.offsets.fetch("g") == {TopicPartition("t", 0): (5, "")}


def test_offsets_written_before_metadata_was_used_load(open_log: OpenLog) -> None:
    """Data directories written before the runtime put stream time into commit metadata load
    unchanged: their values carry ``"metadata": ""`` (read back as ""), and a value without
    the field at all is read as "" too rather than skipped (its offset would be lost)."""
    from streamkit.log.records import NewRecord

    log = open_log()
    log.partition(OFFSETS_TOPIC, 0).append_records([
        NewRecord(b'["g","a",0]', b'{"offset":5,"metadata":"","commit_timestamp_ms":1}', 1),
        NewRecord(b'["g","a",1]', b'{"offset":7,"commit_timestamp_ms":1}', 1),
    ])
    log.close()
    again = open_log()
    assert again.offsets.skipped == 0
    assert again.offsets.fetch("g") == {A0: (5, ""), A1: (7, "")}
