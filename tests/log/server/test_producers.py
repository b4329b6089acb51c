"""Idempotent and transactional producer state (``streamkit.log.producers``), in process.

Lives beside the broker tests because the broker is its only user.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamkit.log.manager import LogManager
from streamkit.log.partition import Partition
from streamkit.log.producers import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerIdAllocator,
    ProducerStates,
    UnknownProducerIdError,
)
from streamkit.log.records import NewRecord, build_batch, check_batch, control_batch


def append(states: ProducerStates, partition: Partition, *values: bytes, pid: int = 7, epoch: int = 0,
           seq: int = 0, transactional: bool = False) -> int:
    data = build_batch([NewRecord(None, v, 1) for v in values], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, transactional=transactional)
    return states.append(partition, check_batch(data), data).base_offset


@pytest.fixture
def log(tmp_path: Path) -> LogManager:
    manager = LogManager(tmp_path / "data", background=False).open()
    manager.create_topic("t", 1)
    yield manager  # type: ignore[misc]
    manager.close()


def test_sequences_duplicates_and_gaps(log: LogManager, tmp_path: Path) -> None:
    states = ProducerStates(log.data_dir, trust_snapshots=False)
    p = log.partition("t", 0)
    assert append(states, p, b"a", b"b", seq=0) == 0
    assert append(states, p, b"a", b"b", seq=0) == 0  # a retry
    assert p.high_watermark == 2
    assert append(states, p, b"c", seq=2) == 2
    with pytest.raises(OutOfOrderSequenceError):
        append(states, p, b"x", seq=9)
    with pytest.raises(UnknownProducerIdError):
        append(states, p, b"x", pid=99, seq=4)
    assert append(states, p, b"d", epoch=1, seq=0) == 3  # a new epoch restarts at 0
    with pytest.raises(InvalidProducerEpochError):
        append(states, p, b"x", epoch=0, seq=3)
    with pytest.raises(OutOfOrderSequenceError):
        append(states, p, b"x", epoch=2, seq=5)
    assert p.high_watermark == 4


def test_only_the_last_five_batches_are_remembered(log: LogManager) -> None:
    states = ProducerStates(log.data_dir, trust_snapshots=False)
    p = log.partition("t", 0)
    for seq in range(7):
        append(states, p, b"v%d" % seq, seq=seq)
    assert append(states, p, b"v2", seq=2) == 2  # among the last five: a retry
    with pytest.raises(OutOfOrderSequenceError):
        append(states, p, b"v0", seq=0)  # too old to tell


def test_sequence_wraps_at_int32_max(log: LogManager) -> None:
    states = ProducerStates(log.data_dir, trust_snapshots=False)
    p = log.partition("t", 0)
    append(states, p, b"a", seq=0)
    state = states.state(p)
    state.producers[7].batches[-1].last_sequence = 2**31 - 1
    assert append(states, p, b"b", seq=0) == 1


@pytest.mark.parametrize("clean", [True, False])
def test_state_is_rebuilt_after_reopening(tmp_path: Path, clean: bool) -> None:
    data = tmp_path / "data"
    with LogManager(data, background=False) as log:
        log.create_topic("t", 1)
        states = ProducerStates(data, trust_snapshots=False)
        p = log.partition("t", 0)
        append(states, p, b"a", seq=0)
        append(states, p, b"b", b"c", seq=1)
        log.partition("t", 0).append(build_batch([NewRecord(None, b"plain", 1)]))
        if clean:
            states.write_snapshots()
    with LogManager(data, background=False) as log:
        states = ProducerStates(data, trust_snapshots=clean and log.clean_shutdown)
        p = log.partition("t", 0)
        assert append(states, p, b"b", b"c", seq=1) == 1  # recognised as a retry either way
        assert append(states, p, b"d", seq=3) == 4
    assert not list((data / ".producer-state").glob("*.json"))  # consumed on load


def test_transactions_lso_and_aborted_ranges(log: LogManager) -> None:
    states = ProducerStates(log.data_dir, trust_snapshots=False)
    p = log.partition("t", 0)
    append(states, p, b"plain", pid=1, seq=0)
    append(states, p, b"t1", b"t2", pid=2, seq=0, transactional=True)
    state = states.state(p)
    assert state.first_unstable_offset() == 1
    marker = control_batch(commit=False, producer_id=2, producer_epoch=0, timestamp=1)
    states.append(p, check_batch(marker), marker)
    assert state.first_unstable_offset() is None
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in state.aborted_between(0, 10)] == [(2, 1, 3)]
    assert state.aborted_between(4, 10) == []
    # Rebuilt from the log's batch headers (and the marker's control record).
    rebuilt = ProducerStates(log.data_dir, trust_snapshots=False)
    again = rebuilt.state(p)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in again.aborted] == [(2, 1, 3)]


def test_producer_ids_are_never_reused(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(tmp_path)
    first = [allocator.allocate() for _ in range(3)]
    assert first == [0, 1, 2]
    again = ProducerIdAllocator(tmp_path)  # as after a crash: the rest of the block is skipped
    assert again.allocate() >= ProducerIdAllocator.BLOCK
