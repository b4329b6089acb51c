"""A transaction's end is the coordinator's to finish: a requester cancelled in the middle of
an EndTxn (a worker stopping mid-commit, a client gone) must not leave the transaction
half-ended (PREPARE_COMMIT, markers written to some partitions), or every later request of
its transactional id is refused with CONCURRENT_TRANSACTIONS (a worker's next commit then
aborts a task alone, and its redone records come late to the tasks it feeds)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from streamkit._core.types import TopicPartition
from streamkit.log.manager import LogManager
from streamkit.log.producers import ProducerIdAllocator, ProducerStates
from streamkit.log.txn import TxnErrorCode
from streamkit.log.txn.coordinator import TransactionCoordinator
from streamkit.log.txn.txn_log import TxnState


async def _shielded_thread(fn: Any, *args: Any) -> Any:
    # As the broker's run_blocking: the thread goes on when the caller is cancelled.
    return await asyncio.shield(asyncio.ensure_future(asyncio.to_thread(fn, *args)))


async def test_a_cancelled_end_txn_is_finished_all_the_same(tmp_path: Path) -> None:
    log = LogManager(tmp_path)
    await asyncio.to_thread(log.open)
    try:
        await asyncio.to_thread(log.create_topic, "t", 3)
        coordinator = TransactionCoordinator(
            log, ProducerStates(tmp_path, trust_snapshots=False), ProducerIdAllocator(tmp_path), _shielded_thread
        )
        error, pid, epoch = await coordinator.init_producer_id("tid", 30_000)
        assert error is TxnErrorCode.NONE
        tps = [TopicPartition("t", p) for p in range(3)]
        assert set((await coordinator.add_partitions("tid", pid, epoch, tps)).values()) == {TxnErrorCode.NONE}

        real_marker = coordinator._write_marker
        started = threading.Event()

        def slow_marker(*args: Any) -> None:  # a slow disk: the fault this test needs
            started.set()
            time.sleep(0.1)
            real_marker(*args)

        coordinator._write_marker = slow_marker  # type: ignore[method-assign]
        ending = asyncio.create_task(coordinator.end_txn("tid", pid, epoch, True))
        await asyncio.to_thread(started.wait, 10)
        ending.cancel()
        await asyncio.gather(ending, return_exceptions=True)
        assert ending.cancelled()
        # Cancelled, and finished: the next transaction of the id begins at once.
        assert coordinator._entries["tid"].state is TxnState.COMPLETE_COMMIT
        assert await coordinator.add_offsets("tid", pid, epoch, "group") is TxnErrorCode.NONE
        assert all(log.partition("t", p).high_watermark == 1 for p in range(3))
    finally:
        await asyncio.to_thread(log.close)
