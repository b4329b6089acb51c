"""Exactly-once per task: what an agent sends from its own code (``await topic.send``) while
processing a record goes into its task's transaction, so when that task's producer is fenced
before it commits, those records are aborted with its outputs and sent again by the rerun:
each is committed once. The other task commits as usual."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import streamkit as sk
from streamkit._core.types import TopicPartition
from streamkit.runtime.worker import Worker
from streamkit.transport.base import READ_COMMITTED
from streamkit.transport.embedded.client import EmbeddedLogClient


async def _settled(worker: Worker, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await worker.settle():
        assert loop.time() < deadline, "the worker did not process its input in time"
        await asyncio.sleep(0.02)


async def _committed_values(client: EmbeddedLogClient, topic: str, partitions: int) -> list[bytes]:
    reader = client.reader(isolation_level=READ_COMMITTED)
    out: list[bytes] = []
    try:
        for p in range(partitions):
            offset = 0
            while True:
                chunk = await reader.read(TopicPartition(topic, p), offset, 10_000)
                if chunk.next_offset <= offset:
                    break
                out.extend(r.value or b"" for r in chunk.records)
                offset = chunk.next_offset
    finally:
        await reader.aclose()
    return out


async def test_sends_from_agent_code_commit_with_their_task(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'log'}"
    # No periodic commit: the test commits when it wants.
    app = sk.App("eosside", broker=url, processing_guarantee="exactly_once", commit_interval=3600.0)
    src = app.topic("src", key_type=str, value_type=str, partitions=2)
    side = app.topic("side", key_type=str, value_type=str, partitions=2)

    @app.agent(src)
    async def relay(stream: sk.Stream) -> Any:
        async for key, value in stream.items():
            await side.send(key=key, value=value)

    client = EmbeddedLogClient(str(tmp_path / "log"))
    worker = Worker(app, client=client, state_dir=str(tmp_path / "state"))
    values = [f"v{i}" for i in range(400)]
    async with worker:
        producer = client.producer()
        await producer.start()
        for i, value in enumerate(values):
            producer.send_nowait("src", i % 2, f"k{i}".encode(), f'"{value}"'.encode(), 1000)
        await producer.flush()
        await _settled(worker)
        assert worker.task_producers is not None
        fenced = worker.task_producers.producers[0]
        assert fenced.transaction_open  # task 0 sent its records into its own transaction
        # Task 0's next owner takes its transactional id before task 0 commits.
        coordinator = await client.transaction_coordinator()
        await coordinator.init_producer_id(fenced.transactional_id, 60_000)
        await worker.commit()
        status = worker.guarantee_status()["transactions"]
        assert status["aborted"] == 1 and status["rewinds"] == 1
        assert worker.committed.get(TopicPartition("src", 1)) == len(values) // 2
        assert TopicPartition("src", 0) not in worker.committed
        assert worker.task_producers.producers[0] is not fenced
        await _settled(worker)  # task 0 ran its records again
        await worker.commit()
        assert worker.committed == {TopicPartition("src", 0): len(values) // 2, TopicPartition("src", 1): len(values) // 2}
        assert worker.state == "running"
        committed = await _committed_values(client, "side", 2)
    counts = Counter(v.decode().strip('"') for v in committed)
    assert set(counts) == set(values)
    assert all(n == 1 for n in counts.values()), [v for v, n in counts.items() if n > 1][:10]
