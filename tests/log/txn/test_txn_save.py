"""The transaction coordinator's file writes stay one at a time even when the request that
started one is cancelled (a worker stopping in the middle of a commit): the write thread runs
on, and a second write sharing its temporary file failed with ``FileNotFoundError``."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from streamkit.log.manager import LogManager
from streamkit.log.producers import ProducerIdAllocator, ProducerStates
from streamkit.log.txn.coordinator import TransactionCoordinator


async def _shielded_thread(fn: Any, *args: Any) -> Any:
    # As the broker's run_blocking: the thread goes on when the caller is cancelled.
    return await asyncio.shield(asyncio.ensure_future(asyncio.to_thread(fn, *args)))


async def test_a_cancelled_save_keeps_the_next_one_waiting_for_its_thread(tmp_path: Path) -> None:
    log = LogManager(tmp_path)
    await asyncio.to_thread(log.open)
    try:
        coordinator = TransactionCoordinator(
            log, ProducerStates(tmp_path, trust_snapshots=False), ProducerIdAllocator(tmp_path), _shielded_thread
        )
        real_write = coordinator._file.write
        started = threading.Event()
        active, most = [0], [0]
        lock = threading.Lock()

        def slow_write(data: bytes) -> None:  # a slow disk: the fault this test needs
            with lock:
                active[0] += 1
                most[0] = max(most[0], active[0])
            started.set()
            time.sleep(0.2)
            try:
                real_write(data)
            finally:
                with lock:
                    active[0] -= 1

        coordinator._file.write = slow_write  # type: ignore[method-assign]
        first = asyncio.create_task(coordinator._save())
        await asyncio.to_thread(started.wait, 10)
        first.cancel()
        second = asyncio.create_task(coordinator._save())
        await second
        await asyncio.gather(first, return_exceptions=True)
        assert first.cancelled()
        assert most[0] == 1
        assert (tmp_path / ".broker" / "transactions.json").exists()
    finally:
        await asyncio.to_thread(log.close)
