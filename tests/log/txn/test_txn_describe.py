"""What ListTransactions and DescribeTransactions report (``kafka-transactions list|describe``):
the coordinator's transactions under Kafka's state names, filtered as Kafka's
``listTransactionStates`` filters them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from streamkit._core.clock import ManualClock
from streamkit._core.types import TopicPartition
from streamkit.log.manager import LogManager
from streamkit.log.producers import ProducerIdAllocator, ProducerStates
from streamkit.log.txn.coordinator import TransactionCoordinator, start_time_ms
from streamkit.log.txn.errors import TxnErrorCode

START_MS = 1_700_000_000_000


async def _thread(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


async def test_list_filters_by_state_producer_id_and_duration_and_describe_shows_the_open_transaction(
    tmp_path: Path,
) -> None:
    log = LogManager(tmp_path, background=False)
    await asyncio.to_thread(log.open)
    try:
        await asyncio.to_thread(log.create_topic, "t", 2)
        clock = ManualClock(START_MS)
        coordinator = TransactionCoordinator(
            log, ProducerStates(tmp_path, trust_snapshots=False), ProducerIdAllocator(tmp_path), _thread, clock=clock
        )
        ids = {}
        for tid in ("open", "done", "idle"):
            error, ids[tid], epoch = await coordinator.init_producer_id(tid, 60_000)
            assert (error, epoch) == (TxnErrorCode.NONE, 0)
        tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
        await coordinator.add_partitions("done", ids["done"], 0, tps[:1])
        assert await coordinator.end_txn("done", ids["done"], 0, True) is TxnErrorCode.NONE
        clock.advance(5_000)
        await coordinator.add_partitions("open", ids["open"], 0, tps)
        clock.advance(2_000)

        def listed(states: list[str] = [], pids: list[int] = [], duration_ms: int = -1) -> tuple[set[str], list[str]]:  # noqa: B006
            entries, unknown = coordinator.list_transactions(states, pids, duration_ms)
            return {e.transactional_id for e in entries}, unknown

        assert listed() == ({"open", "done", "idle"}, [])
        assert listed(["Ongoing", "CompleteCommit"]) == ({"open", "done"}, [])
        assert listed(["Empty", "Bogus"]) == ({"idle"}, ["Bogus"])
        assert listed(["Bogus"]) == (set(), ["Bogus"])  # a filter of unknown states only matches nothing
        assert listed(["Dead", "PrepareEpochFence"]) == (set(), [])  # Kafka's names, never entered here
        assert listed(pids=[ids["done"], 999]) == ({"done"}, [])
        assert listed(["Ongoing"], [ids["done"]]) == (set(), [])
        # Running longer than the filter: "open" began 2 s ago, "done" 7 s ago; Empty has no start.
        assert listed(duration_ms=2_000) == ({"done", "idle"}, [])
        assert listed(duration_ms=1_999) == ({"open", "done", "idle"}, [])
        assert listed(duration_ms=7_000) == ({"idle"}, [])

        opened = coordinator.describe("open")
        assert opened is not None and opened.state.value == "Ongoing" and opened.timeout_ms == 60_000
        assert opened.topic_partitions() == tps and start_time_ms(opened) == START_MS + 5_000
        done = coordinator.describe("done")
        assert done is not None and done.state.value == "CompleteCommit" and done.partitions == []
        assert start_time_ms(done) == START_MS
        idle = coordinator.describe("idle")
        assert idle is not None and idle.state.value == "Empty" and start_time_ms(idle) == -1
        assert coordinator.describe("never") is None
    finally:
        await asyncio.to_thread(log.close)
