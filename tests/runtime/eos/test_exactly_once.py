"""Exactly-once on the embedded log, in one process: outputs, changelog records and offsets
commit together, read_committed readers see each input's output once, a task whose producer
is fenced goes back to its last commit instead of failing the worker."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streamkit.runtime.worker import Worker
from streamkit.transport.embedded.client import EmbeddedLogClient
from streamkit.web.server import WebServer
from tests.runtime.eos import eos_app
from tests.runtime.eos.eos_log import outputs, produce, reference

KEYS = [f"k{i}" for i in range(50)]


async def _until(condition: object, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def _check_exact(out: list[tuple[str, int, int]], pairs: list[tuple[str, int]]) -> None:
    ids = Counter(ident for _key, ident, _n in out)
    assert set(ids) == {ident for _key, ident in pairs}
    assert all(n == 1 for n in ids.values()), [i for i, n in ids.items() if n > 1][:10]
    # Per key, the counts the outputs carry are 1, 2, 3, ... in order: no update counted twice.
    seen: dict[str, list[int]] = {}
    for key, _ident, n in out:
        seen.setdefault(key, []).append(n)
    assert all(ns == list(range(1, len(ns) + 1)) for ns in seen.values())


@pytest.fixture
def app_env(tmp_path: Path) -> str:
    url = f"file://{tmp_path / 'log'}"
    eos_app.app.conf.processing_guarantee = "exactly_once"
    eos_app.app.conf.broker = url
    return url


async def test_outputs_changelog_and_offsets_commit_together(app_env: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    pairs = [(rng.choice(KEYS), i) for i in range(3000)]
    await produce(app_env, pairs)
    state = str(tmp_path / "state")
    client = EmbeddedLogClient(str(tmp_path / "log"))
    worker = Worker(eos_app.app, client=client, state_dir=state)
    async with worker, WebServer(worker, port=0) as web, aiohttp.ClientSession() as http:
        await _until(lambda: sum(worker.committed.values()) >= len(pairs))
        async with http.get(f"{web.url}/status") as response:
            status = await response.json()
        assert status["processing_guarantee"] == "exactly_once"
        assert status["transactions"]["committed"] >= 1
        assert status["transactions"]["aborted"] == 0
        assert status["transactions"]["open"] in (0, 1)
        table = {k: eos_app.counts[k] for k in set(KEYS)}
    committed_out = await outputs(app_env, "read_committed")
    _check_exact(committed_out, pairs)
    assert {k: v for k, v in table.items() if v} == reference(pairs)


async def test_a_fenced_producer_rewinds_to_the_last_commit_and_goes_on(app_env: str, tmp_path: Path) -> None:
    rng = random.Random(8)
    first = [(rng.choice(KEYS), i) for i in range(2000)]
    second = [(rng.choice(KEYS), 2000 + i) for i in range(2000)]
    await produce(app_env, first)
    client = EmbeddedLogClient(str(tmp_path / "log"))
    worker = Worker(eos_app.app, client=client, state_dir=str(tmp_path / "state"))
    async with worker:
        await _until(lambda: sum(worker.committed.values()) >= len(first))
        # A zombie's successor takes task 0's transactional id: its running producer is fenced.
        coordinator = await client.transaction_coordinator()
        assert worker.task_producers is not None
        fenced = worker.task_producers.producers[0]
        await coordinator.init_producer_id(fenced.transactional_id, 60_000)
        producer = client.producer()
        await producer.start()
        from streamkit._core.partitioner import partition_for_key

        for key, ident in second:
            raw = key.encode()
            await producer.send("events", raw, str(ident).encode(), partition=partition_for_key(raw, 3))
        await producer.flush()
        await _until(lambda: sum(worker.committed.values()) >= len(first) + len(second))
        status = worker.guarantee_status()["transactions"]
        assert status["aborted"] >= 1 and status["rewinds"] >= 1
        assert worker.state == "running"
        # The task was opened again with a new producer; the other tasks kept theirs.
        assert worker.task_producers.producers[0] is not fenced
        assert sorted(worker.task_producers.producers) == [0, 1, 2]
        table = {k: eos_app.counts[k] for k in set(KEYS)}
    _check_exact(await outputs(app_env, "read_committed"), first + second)
    assert {k: v for k, v in table.items() if v} == reference(first + second)


async def test_a_group_by_hop_commits_with_the_transaction(tmp_path: Path) -> None:
    """The repartition topic is written inside the transaction and read committed: records
    reach the second stage after the commit that holds them, each once."""
    import streamkit as sk
    from streamkit.transport.base import READ_COMMITTED

    url = f"file://{tmp_path / 'log'}"
    app = sk.App("eoshop", broker=url, processing_guarantee="exactly_once", commit_interval=0.05)
    src = app.topic("src", key_type=str, value_type=int, partitions=2)
    out = app.topic("out", key_type=str, value_type=int, partitions=2)
    totals = app.Table("totals", default=int, key_type=str, value_type=int)

    @app.agent(src, sink=[out])
    async def regroup(stream: sk.Stream) -> Any:
        async for value in stream.group_by(lambda v: f"g{v % 5}", name="mod5"):
            totals[f"g{value % 5}"] += value
            yield value

    values = list(range(1, 1001))
    client = EmbeddedLogClient(str(tmp_path / "log"))
    worker = Worker(app, client=client, state_dir=str(tmp_path / "state"))
    async with worker:
        producer = client.producer()
        await producer.start()
        for v in values:
            producer.send_nowait("src", v % 2, f"k{v}".encode(), str(v).encode(), 1000)
        await producer.flush()
        reader = client.reader(isolation_level=READ_COMMITTED)

        async def committed_out() -> int:
            total = 0
            for p in range(2):
                offset = 0
                while True:
                    chunk = await reader.read(sk.TopicPartition("out", p), offset, 10_000)
                    if chunk.next_offset <= offset:
                        break
                    total += len(chunk.records)
                    offset = chunk.next_offset
            return total

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while await committed_out() < len(values):
            assert loop.time() < deadline, "the hop's outputs were not committed in time"
            await asyncio.sleep(0.05)
        assert await committed_out() == len(values)
        table = {k: totals[k] for k in (f"g{i}" for i in range(5))}
        await reader.aclose()
    expected: dict[str, int] = {}
    for v in values:
        expected[f"g{v % 5}"] = expected.get(f"g{v % 5}", 0) + v
    assert table == expected


async def test_outputs_changelog_and_offsets_commit_together_on_the_broker(
    broker: Any, tmp_path: Path
) -> None:
    url = f"kafka://{broker.bootstrap}"
    eos_app.app.conf.processing_guarantee = "exactly_once"
    rng = random.Random(9)
    pairs = [(rng.choice(KEYS), i) for i in range(3000)]
    await produce(url, pairs)
    worker = Worker(eos_app.app, broker=url, state_dir=str(tmp_path / "state"))
    async with worker:
        await _until(lambda: sum(worker.committed.values()) >= len(pairs))
        status = worker.guarantee_status()["transactions"]
        assert status["committed"] >= 1 and status["aborted"] == 0
        table = {k: eos_app.counts[k] for k in set(KEYS)}
    _check_exact(await outputs(url, "read_committed"), pairs)
    assert {k: v for k, v in table.items() if v} == reference(pairs)
