"""The engine on both transports, same test code: embedded log and a real broker process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import streamkit as sk
from streamkit.runtime import Worker
from streamkit.transport.connect import open_log_client

ROOT = Path(__file__).resolve().parents[2]


async def read_all(url: str, topic: str, serde: sk.Serde | None = None) -> list[Any]:
    """Every value in ``topic``, read with a throw-away group."""
    client = open_log_client(url)
    await client.start()
    consumer = client.consumer(f"reader-{time.monotonic_ns()}")

    class Quiet:
        async def on_partitions_revoked(self, revoked: set[sk.TopicPartition]) -> None: ...
        async def on_partitions_assigned(self, assigned: set[sk.TopicPartition]) -> None: ...

    consumer.subscribe([topic], Quiet())
    await consumer.start()
    values: list[Any] = []
    idle = 0
    try:
        while idle < 6:
            fetched = await consumer.getmany(300, 100_000)
            if not fetched:
                idle += 1 if consumer.assignment() else 0
                continue
            idle = 0
            for records in fetched.values():
                values.extend(r.value for r in records)
    finally:
        await consumer.aclose()
        await client.aclose()
    return [serde.loads(v) for v in values] if serde else values


async def settle(worker: Worker, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < 3:
        if time.monotonic() > deadline:
            raise TimeoutError("worker did not settle")
        quiet = quiet + 1 if await worker.settle() else 0
        await asyncio.sleep(0.05)
    await worker.commit()


def pipeline(app_id: str, url: str) -> tuple[sk.App, sk.Topic, sk.Topic]:
    app = sk.App(app_id, broker=url)
    src = app.topic(f"{app_id}-src", key_type=str, value_type=int, partitions=3)
    dst = app.topic(f"{app_id}-dst", key_type=str, value_type=int, partitions=2)

    @app.agent(src, sink=[dst])
    async def square(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream.filter(lambda v: v % 3 != 0):
            yield v * v

    return app, src, dst


async def test_pipeline_processes_everything_and_commits(log_url: str, unique: str) -> None:
    app, src, dst = pipeline(unique, log_url)
    async with Worker(app) as worker:
        for i in range(300):
            await src.send(key=f"k{i}", value=i)
        await settle(worker)
        committed = worker.committed
    out = await read_all(log_url, dst.name, dst.value_serde)
    assert sorted(out) == sorted(i * i for i in range(300) if i % 3 != 0)
    assert sum(committed.values()) == 300


async def test_restart_processes_only_new_records(log_url: str, unique: str) -> None:
    app, src, dst = pipeline(unique, log_url)
    async with Worker(app) as worker:
        for i in range(100):
            await src.send(key=f"k{i}", value=i)
        await settle(worker)
    app, src, dst = pipeline(unique, log_url)
    async with Worker(app) as worker:
        for i in range(100, 150):
            await src.send(key=f"k{i}", value=i)
        await settle(worker)
    out = await read_all(log_url, dst.name, dst.value_serde)
    assert Counter(out) == Counter(i * i for i in range(150) if i % 3 != 0)


async def test_settle_means_processed_even_with_empty_partitions(log_url: str, unique: str) -> None:
    app, src, dst = pipeline(unique, log_url)
    async with Worker(app) as worker:  # everything goes to partition 0; 1 and 2 stay empty
        for i in range(60):
            await src.send(key=f"k{i}", value=i, partition=0)
        await settle(worker)
    # Records waiting before the next worker starts (sent by an app without agents):
    producer_app = sk.App(f"{unique}-producer", broker=log_url)
    target = producer_app.topic(src.name, key_type=str, value_type=int, partitions=3)
    async with Worker(producer_app):
        for i in range(60, 90):
            await target.send(key=f"k{i}", value=i, partition=0)
    # settle() must not be true before they are processed (between the group join and the
    # first fetch the log's end is unknown), and must become true with partitions never read.
    app, src, dst = pipeline(unique, log_url)
    async with Worker(app) as worker:
        deadline = time.monotonic() + 60
        while not await worker.settle():
            assert time.monotonic() < deadline, "worker did not settle"
            await asyncio.sleep(0.001)
        committed = await worker.commit() or worker.committed
    assert committed.get(sk.TopicPartition(src.name, 0)) == 90
    out = await read_all(log_url, dst.name, dst.value_serde)
    assert Counter(out) == Counter(i * i for i in range(90) if i % 3 != 0)


async def test_stop_does_not_commit_a_record_cut_off_mid_processing(log_url: str, unique: str) -> None:
    """A record whose agent is cancelled at stop (it outlives the grace period) is redone."""
    app = sk.App(unique, broker=log_url)
    src = app.topic(f"{unique}-src", value_type=int, partitions=1)
    done = app.topic(f"{unique}-done", value_type=int, partitions=1)
    started = asyncio.Event()

    @app.agent(src)
    async def slow(stream: sk.Stream) -> None:
        async for value in stream:
            if value == 2:
                started.set()
                await asyncio.sleep(30)  # far past the stop grace period
            await done.send(value=value)

    async with Worker(app):
        for i in range(5):
            await src.send(value=i)
        await asyncio.wait_for(started.wait(), 30)
    positions = await committed_offsets(log_url, unique, src.name, 1)
    assert positions[0] == 2  # 0 and 1 finished; 2 was cut off; 3 and 4 were never started
    assert await read_all(log_url, done.name, done.value_serde) == [0, 1]


def start_worker(app_id: str, url: str, delay_s: float, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SAMPLE_APP_ID": app_id, "SAMPLE_BROKER": url, "SAMPLE_DELAY_S": str(delay_s),
           "PYTHONPATH": f"{ROOT / 'tests' / 'support' / 'apps'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "sample_app:app", "--progress-interval", "0"],
        env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=ROOT,
    )


async def produce_ints(url: str, topic: str, count: int) -> None:
    import tests.support.apps.sample_app  # noqa: F401  (declares nothing we need; keeps the import path honest)

    app = sk.App("producer-only", broker=url)
    target = app.topic(topic, value_type=int, partitions=4)
    async with Worker(app):
        pending = [await target.send(key=str(i), value=i) for i in range(count)]
        for p in pending:
            await p


async def committed_offsets(url: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    client = open_log_client(url)
    await client.start()
    consumer = client.consumer(group)
    try:
        out = {}
        for p in range(partitions):
            value = await consumer.committed(sk.TopicPartition(topic, p))
            out[p] = value or 0
        return out
    finally:
        await consumer.aclose()
        await client.aclose()


async def until_logged(proc: subprocess.Popen[bytes], log: Path, text: str, timeout: float = 90) -> None:
    """Wait until the worker process wrote ``text`` to its log (it must stay alive)."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"{text!r} not logged: {log.read_text()}"
        await asyncio.sleep(0.1)


async def until_committed(
    url: str, group: str, topic: str, partitions: int, enough: Callable[[int], bool],
    procs: list[subprocess.Popen[bytes]], logs: list[Path], timeout: float = 120,
) -> int:
    """Wait until the group's committed total over ``topic`` satisfies ``enough`` while the
    worker processes run; returns that total."""
    deadline = time.monotonic() + timeout
    while True:
        total = sum((await committed_offsets(url, group, topic, partitions)).values())
        if enough(total):
            return total
        for proc, log in zip(procs, logs, strict=True):
            assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"committed {total}: {[log.read_text() for log in logs]}"
        await asyncio.sleep(0.2)


async def test_sigkill_restart_reprocesses_only_after_last_commit(log_url: str, unique: str, tmp_path: Path) -> None:
    total = 8000
    await produce_ints(log_url, f"{unique}-in", total)
    log = tmp_path / "worker.log"
    proc = start_worker(unique, log_url, 0.005, log)
    try:
        # Kill it once it has committed something (read through the worker itself when it
        # owns an embedded log): a slow machine only makes the wait longer.
        await until_logged(proc, log, "streamkit worker: app")  # it owns the log from here on
        await until_committed(log_url, unique, f"{unique}-in", 4, lambda n: n > 0, [proc], [log])
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    committed = await committed_offsets(log_url, unique, f"{unique}-in", 4)
    done_before = await read_all(log_url, f"{unique}-out")
    assert 0 < sum(committed.values()) < total, (committed, log.read_text())

    # Run again until everything is committed, each run ended gracefully with SIGTERM once
    # it committed more than the run before it did (or everything).
    before = sum(committed.values())
    for run in range(10):
        log = tmp_path / f"worker-{run}.log"
        proc = start_worker(unique, log_url, 0.0, log)
        try:
            await until_logged(proc, log, "streamkit worker: app")
            before = await until_committed(
                log_url, unique, f"{unique}-in", 4, lambda n, b=before: n > b or n == total, [proc], [log]
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, log.read_text()
        finally:
            proc.kill()
        if sum((await committed_offsets(log_url, unique, f"{unique}-in", 4)).values()) == total:
            break
    serde = sk.App("x").topic("x", value_type=dict).value_serde
    out = [serde.loads(v) for v in await read_all(log_url, f"{unique}-out")]
    seen = Counter((o["p"], o["o"]) for o in out)
    inputs = {(o["p"], o["o"]) for o in out}
    assert len(inputs) == total  # nothing lost
    for (partition, offset), n in seen.items():
        if n > 1:  # processed twice: only records at or after the commit before the kill
            assert offset >= committed[partition], (partition, offset, committed)
    assert len(done_before) > 0


@pytest.mark.parametrize("leave", [signal.SIGTERM, signal.SIGKILL], ids=["leaves", "dies"])
async def test_two_workers_share_partitions_and_rebalance_without_loss(
    log_url: str, unique: str, tmp_path: Path, leave: signal.Signals
) -> None:
    """Several worker processes on one broker: one joins mid-stream, one leaves (or dies)
    mid-stream; a dead member's partitions move once its session times out."""
    url = log_url
    total = 16000
    await produce_ints(url, f"{unique}-in", total)
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = start_worker(unique, url, 0.003, log_a)
    b = None
    try:
        # b joins once a is mid-stream: a committed some records, not all. (Not asked before a
        # is assigned: on the embedded log a starting worker holds the directory before it
        # serves it, and a client opened then is refused.)
        await until_logged(a, log_a, f"assigned {unique}-in-")
        done = await until_committed(url, unique, f"{unique}-in", 4, lambda n: n > 0, [a], [log_a])
        assert done < total
        b = start_worker(unique, url, 0.003, log_b)
        # a leaves once b took its share and a is still mid-stream.
        await until_logged(b, log_b, f"assigned {unique}-in-")
        done = await until_committed(url, unique, f"{unique}-in", 4, lambda n, d=done: n > d, [a, b], [log_a, log_b])
        assert done < total
        a.send_signal(leave)  # mid-stream: its partitions move to b
        code = a.wait(30)
        assert code == (0 if leave == signal.SIGTERM else -signal.SIGKILL), log_a.read_text()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if sum((await committed_offsets(url, unique, f"{unique}-in", 4)).values()) == total:
                break
            await asyncio.sleep(0.5)
        b.send_signal(signal.SIGTERM)
        assert b.wait(30) == 0, log_b.read_text()
    finally:
        a.kill()
        if b is not None:
            b.kill()
    serde = sk.App("x").topic("x", value_type=dict).value_serde
    out = [serde.loads(v) for v in await read_all(url, f"{unique}-out")]
    assert {o["v"] for o in out} == set(range(total))  # every record processed, none lost
    # b took partitions from a when it joined, and all of them when a left
    b_log = log_b.read_text()
    assert "assigned t0-in-0, t0-in-1, t0-in-2, t0-in-3".replace("t0", unique) in b_log, b_log


async def _fill(url: str, topic: str, count: int) -> None:
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic(topic, 1)
        producer = client.producer()
        await producer.start()
        for i in range(count):
            await producer.send(topic, b"k%d" % i, b"v%d" % i, partition=0)
        await producer.flush()
        await producer.aclose()
    finally:
        await client.aclose()


async def test_reader_reads_a_partition_in_chunks_each_record_once(log_url: str, unique: str) -> None:
    """How a table partition is restored: chunk after chunk, in order, no gaps, no repeats
    (max_records is a soft cap on the embedded log, which hands out whole batches)."""
    topic = f"{unique}-chunks"
    await _fill(log_url, topic, 250)
    client = open_log_client(log_url)
    await client.start()
    reader = client.reader()
    try:
        tp = sk.TopicPartition(topic, 0)
        start, end = await reader.bounds(tp)
        assert (start, end) == (0, 250)
        offsets: list[int] = []
        offset = start
        while offset < end:
            chunk = await reader.read(tp, offset, 40)
            assert chunk.records
            assert [r.value for r in chunk.records] == [b"v%d" % r.offset for r in chunk.records]
            offsets.extend(r.offset for r in chunk.records)
            offset = chunk.next_offset
        assert offsets == list(range(250))
    finally:
        await reader.aclose()
        await client.aclose()


async def test_kafka_fetch_capped_at_max_records_keeps_the_rest_for_the_next(broker: Any, unique: str) -> None:
    """A fetch capped at max_records leaves the records fetched beyond it to the next fetch
    from there (restoring a changelog in chunks used to fetch and decode them again)."""
    from streamkit.transport.kafka_tools import KafkaTools

    topic = f"{unique}-capped"
    await _fill(f"kafka://{broker.bootstrap}", topic, 100)
    async with KafkaTools(broker.bootstrap) as tools:
        first = await tools.fetch(topic, 0, 0, 1024 * 1024, max_records=30)
        assert [r.offset for r in first.records] == list(range(30))
        assert first.next_offset == 30
        second = await tools.fetch(topic, 0, 30, 1024 * 1024, max_records=30)
        assert [r.offset for r in second.records] == list(range(30, 60))
        rest = await tools.fetch(topic, 0, 60, 1024 * 1024)
        assert [r.offset for r in rest.records] == list(range(60, 100))
