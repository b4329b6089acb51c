"""The table partitions' write-back cache as the exactly-once write batch: taken changes stay
readable until stored, uncommitted writes can be discarded; and the log's read-committed
helpers over real transactional batches."""

from __future__ import annotations

import pytest

from streamkit._core.serde import RawSerde
from streamkit.log.producers import (
    AbortedTransaction,
    committed_records,
    last_stable_offset,
    scan_state,
)
from streamkit.log.records import BatchBuilder, control_batch
from streamkit.tables import partition as partition_module
from streamkit.tables.partition import MISSING, TablePartition
from streamkit.tables.store import MemoryStore
from tests.conftest import OpenLog

RAW = RawSerde()


def test_a_change_on_its_way_to_the_store_survives_cache_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_module, "CACHE_LIMIT", 4)
    store = MemoryStore()
    store.apply([(b"k", b"old"), *((f"o{i}".encode(), b"x") for i in range(10))], 11)
    state = TablePartition(0, store, RAW, RAW)
    state.set(b"k", b"new", 1)
    taken = state.take_changes()  # sent to the changelog; the store has not got it yet
    assert taken == [(b"k", b"new", 1)]
    for i in range(10):  # reads fill the cache past its limit: clean entries are evicted
        state.get(f"o{i}".encode())
    assert state.get(b"k") == b"new"
    store.apply([(b"k", b"new")], 12)
    state.stored(taken)
    assert state.get(b"k") == b"new"


def test_discarding_uncommitted_writes_reads_the_store_again() -> None:
    store = MemoryStore()
    store.apply([(b"a", b"1")], 1)
    state = TablePartition(0, store, RAW, RAW)
    state.set(b"a", b"2", 5)
    state.take_changes()
    state.set(b"b", b"3", 6)
    state.discard_uncommitted()
    assert state.get(b"a") == b"1"
    assert state.get(b"b") is MISSING
    assert state.dirty == 0


def _batch(values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    builder = BatchBuilder()
    for v in values:
        builder.append(None, v, 1000)
    return builder.build(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def test_read_committed_skips_aborted_and_open_transactions(open_log: OpenLog) -> None:
    log = open_log()
    log.create_topic("t", 1)
    part = log.partition("t", 0)
    part.append(_batch([b"plain"]))  # 0
    part.append(_batch([b"c1", b"c2"], pid=7, epoch=0, seq=0, txn=True))  # 1-2
    part.append(control_batch(commit=True, producer_id=7, producer_epoch=0, timestamp=1000))  # 3
    part.append(_batch([b"a1"], pid=8, epoch=0, seq=0, txn=True))  # 4
    part.append(control_batch(commit=False, producer_id=8, producer_epoch=0, timestamp=1000))  # 5
    part.append(_batch([b"after"]))  # 6
    part.append(_batch([b"open"], pid=7, epoch=0, seq=2, txn=True))  # 7: not ended
    part.append(_batch([b"late"]))  # 8
    state = scan_state(part)
    assert state.aborted == [AbortedTransaction(8, 4, 5)]
    stable = last_stable_offset(state, part.high_watermark, part.log_start_offset)
    assert stable == 7
    records, next_offset = committed_records(part.read(0, 1 << 20), 0, stable, state.aborted, 100)
    assert [r.value for r in records] == [b"plain", b"c1", b"c2", b"after"]
    assert next_offset == 7
    # From the middle of a batch, and with a record budget.
    records, next_offset = committed_records(part.read(2, 1 << 20), 2, stable, state.aborted, 1)
    assert [r.value for r in records] == [b"c2"] and next_offset == 3
