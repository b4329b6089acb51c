"""The worker under faults: failing agents, dying loops, probe side effects, partition counts
that differ from the declaration, a topic deleted under a running worker, typed sends."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import streamkit as sk
from streamkit._core.serde import SerdeError
from streamkit.runtime import tasks as runtime_tasks
from streamkit.runtime.tasks import AgentFailedError
from streamkit.runtime.worker import Worker
from streamkit.testing import AppDriver
from streamkit.transport.embedded.client import EmbeddedLogClient
from streamkit.transport.embedded.consumer import EmbeddedConsumer
from streamkit.web import WebServer

ROOT = Path(__file__).resolve().parents[2]


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait, turning the event loop, until ``condition()`` holds (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def get_json(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, await r.json()


# -- an agent that fails before its first read ---------------------------------------------------


async def test_an_agent_failing_before_its_first_read_backs_off_and_stops_the_worker_at_the_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = sk.App("fragile", max_agent_failures=3)
    src = app.topic("src", value_type=int)
    calls: list[int] = []

    @app.agent(src)
    async def needs_a_database(stream: sk.Stream) -> None:
        calls.append(1)
        raise ConnectionError("database unreachable")
        async for _ in stream:  # pragma: no cover - never reached
            pass

    caplog.set_level(logging.INFO, logger="streamkit")
    async with AppDriver(app) as driver:
        with pytest.raises(AgentFailedError, match=r"needs_a_database\[0\] failed 3 times in a row") as info:
            await asyncio.wait_for(driver.worker.wait(), 30)
        assert driver.worker.state == "failed"
    assert "database unreachable" in str(info.value)
    assert isinstance(info.value.__cause__, ConnectionError)
    assert len(calls) == 1 + 3  # the topology probe, then three runs
    backoffs = [r for r in caplog.records if "failed outside a record" in r.getMessage()]
    assert [r.levelno for r in backoffs] == [logging.ERROR, logging.ERROR]  # once per back-off
    assert backoffs[0].exc_info is not None and backoffs[1].exc_info is None  # one traceback


async def test_a_failing_agent_shows_on_health_and_status_and_does_not_hold_up_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = sk.App("backoff", max_agent_failures=1000)
    src = app.topic("src", value_type=int)
    runs: list[int] = []
    seen: list[int] = []

    @app.agent(src)
    async def flaky(stream: sk.Stream) -> None:
        runs.append(1)
        if len(runs) <= 3:  # the probe and the first two runs fail
            raise ConnectionError("not yet")
        async for v in stream:
            seen.append(v)

    driver = AppDriver(app)
    async with driver, WebServer(driver.worker, port=0) as web:
        await until(lambda: bool(driver.worker.failing_agents()))
        status, health = await get_json(f"{web.url}/health")
        assert status == 503 and health["status"] == "degraded"
        assert health["failing_agents"][0]["agent"] == "flaky"
        assert "ConnectionError: not yet" in health["failing_agents"][0]["error"]
        _, body = await get_json(f"{web.url}/status")
        assert body["state"] == "running" and body["failing_agents"][0]["partition"] == 0
        # It recovers: once a record is handed out, the failure is history.
        await driver.send(src, 7)
        await until(lambda: seen == [7])
        status, health = await get_json(f"{web.url}/health")
        assert status == 200 and health == {"status": "running"}

    # A back-off far longer than the test: stop ends it at once (no wait for it to run out).
    monkeypatch.setattr(runtime_tasks, "BACKOFF_FIRST_S", 3600.0)
    runs.clear()
    app2 = sk.App("backoff2")
    src2 = app2.topic("src", value_type=int)

    @app2.agent(src2)
    async def broken(stream: sk.Stream) -> None:
        runs.append(1)
        raise ConnectionError("down")

    driver2 = AppDriver(app2)
    await driver2.__aenter__()
    await until(lambda: len(runs) == 2)  # probe + first run: now in a one-hour back-off
    await asyncio.wait_for(driver2.__aexit__(None, None, None), 60)
    assert driver2.worker.state == "stopped"


# -- background loops ----------------------------------------------------------------------------


class _BrokenConsumer(EmbeddedConsumer):
    """A fault we cannot cause for real: ``getmany`` raises an unexpected exception."""

    async def getmany(self, timeout_ms: int, max_records: int) -> Mapping[sk.TopicPartition, Sequence[Any]]:
        raise KeyError("a bug in the fetch path")


class _BrokenClient(EmbeddedLogClient):
    def consumer(self, group_id: str, *, auto_offset_reset: str = "earliest") -> EmbeddedConsumer:
        consumer = _BrokenConsumer(self, group_id, auto_offset_reset)
        self._consumers.append(consumer)
        return consumer


async def test_a_background_loop_that_raises_fails_the_worker_with_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = sk.App("loops")
    src = app.topic("src", value_type=int)

    @app.agent(src)
    async def idle(stream: sk.Stream) -> None:
        async for _ in stream:
            pass

    async with Worker(app, client=_BrokenClient(str(tmp_path))) as worker:
        with pytest.raises(KeyError, match="a bug in the fetch path"):
            await asyncio.wait_for(worker.wait(), 10)
        assert worker.state == "failed" and not worker.healthy
    logged = [r for r in caplog.records if "streamkit:fetch failed" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


# -- the topology probe --------------------------------------------------------------------------


async def test_a_send_before_the_agents_loop_is_written_once() -> None:
    app = sk.App("probe")
    src = app.topic("src", value_type=int)
    hello = app.topic("hello", value_type=str)

    @app.agent(src)
    async def greets(stream: sk.Stream) -> None:
        ack = await hello.send(value="started")
        await ack  # the probe's discarded send also resolves
        async for v in stream.group_by(lambda v: v % 2, name="parity"):
            await hello.send(value=f"got {v}")

    async with AppDriver(app) as driver:
        await driver.send(src, 1)
        await driver.process()
        assert "probe-greets-parity-repartition" in app.topics  # the probe still found the hop
        out = [e.value for e in await driver.read(hello)]
    assert out == ["started", "got 1"]


# -- declared partitions -------------------------------------------------------------------------


async def test_partition_counts_that_differ_from_the_declaration_are_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Topics a producer auto-created first, with one partition each.
    client = EmbeddedLogClient(str(tmp_path))
    await client.start()
    for name in ("orders", "plain", "report"):
        await client.ensure_topic(name, 1)
    await client.aclose()

    app = sk.App("parts")
    orders = app.topic("orders", value_type=int, partitions=4)
    plain = app.topic("plain", value_type=int, partitions=2)
    report = app.topic("report", value_type=int, partitions=3)

    @app.agent(orders)
    async def regroup(stream: sk.Stream) -> None:
        async for _ in stream.group_by(lambda v: v, name="same"):
            pass

    @app.agent(plain, sink=[report])
    async def copy(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream:
            yield v

    async with AppDriver(app, data_dir=str(tmp_path)) as driver:
        mismatches = dict(driver.worker.partition_mismatches)
        async with WebServer(driver.worker, port=0) as web:
            _, status = await get_json(f"{web.url}/status")
    assert set(mismatches) == {"orders", "report", "plain"}
    assert status["partition_mismatches"] == mismatches
    said = {r.getMessage().split("'")[1]: r for r in caplog.records if "but is declared with" in r.getMessage()}
    assert said["orders"].levelno == logging.ERROR  # co-partitioned with its repartition topic
    assert "parts-regroup-same-repartition" in said["orders"].getMessage()
    assert said["report"].levelno == logging.WARNING  # a sink
    assert said["plain"].levelno == logging.WARNING  # the only input of an agent without hops
    assert "has 1 partition(s) but is declared with 4" in mismatches["orders"]


async def test_matching_partition_counts_are_not_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = sk.App("parts-ok")
    src = app.topic("src", value_type=int, partitions=3)

    @app.agent(src)
    async def regroup(stream: sk.Stream) -> None:
        async for _ in stream.group_by(lambda v: v, name="k"):
            pass

    for _ in range(2):  # created, then found as declared
        async with AppDriver(app, data_dir=str(tmp_path)) as driver:
            assert driver.worker.partition_mismatches == {}
    assert not [r for r in caplog.records if "but is declared with" in r.getMessage()]


# -- an input topic deleted and recreated ----------------------------------------------------------


async def test_an_input_topic_deleted_and_recreated_stalls_then_resets(caplog: pytest.LogCaptureFixture) -> None:
    app = sk.App("recreate")
    src = app.topic("src", value_type=int)
    seen: list[int] = []

    @app.agent(src)
    async def collect(stream: sk.Stream) -> None:
        async for v in stream:
            seen.append(v)

    driver = AppDriver(app)
    async with driver, WebServer(driver.worker, port=0) as web:
        for i in range(5):
            await driver.send(src, i)
        await driver.process()
        log = driver.client.log
        await asyncio.to_thread(log.delete_topic, "src")
        await until(lambda: bool(driver.worker.stalled()))
        status, health = await get_json(f"{web.url}/health")
        assert status == 503 and "src-0" in health["stalled"]
        assert "unknown topic" in health["stalled"]["src-0"]

        await asyncio.to_thread(log.create_topic, "src", 1)
        for i in range(10, 13):
            await driver.send(src, i)
        await driver.process()
        status, health = await get_json(f"{web.url}/health")
        assert status == 200, health
        assert driver.worker.committed[sk.TopicPartition("src", 0)] == 3
    assert seen == [0, 1, 2, 3, 4, 10, 11, 12]
    resets = [r.getMessage() for r in caplog.records if "out of range" in r.getMessage()]
    assert len(resets) == 1 and "resetting to the earliest offset 0" in resets[0]


# -- typed sends ---------------------------------------------------------------------------------


class Order(sk.Record):
    order_id: str
    amount: float


async def test_send_checks_the_declared_types() -> None:
    app = sk.App("typed")
    counts = app.topic("counts", key_type=str, value_type=int)
    prices = app.topic("prices", value_type=float)
    orders = app.topic("orders", value_type=Order)
    lists = app.topic("lists", value_type=list[int])

    async with AppDriver(app) as driver:
        with pytest.raises(SerdeError, match=r"topic 'counts' takes values of type int, not str: 'abc'"):
            await counts.send(value="abc")
        with pytest.raises(SerdeError, match=r"takes values of type int, not bool"):
            await counts.send(value=True)
        with pytest.raises(SerdeError, match=r"topic 'counts' takes keys of type str, not int"):
            await counts.send(key=1, value=1)
        with pytest.raises(SerdeError, match=r"topic 'orders' takes values of type Order, not dict"):
            await orders.send(value={"order_id": "o1", "amount": 1.0})
        with pytest.raises(SerdeError, match=r"topic 'lists' takes values of type"):
            await lists.send(value=["a"])
        await driver.send(counts, 3, key="k")
        await driver.send(counts, None, key="gone")  # a tombstone is not a wrong type
        await driver.send(prices, 2)  # an int is a valid float, as the decoders agree
        await driver.send(orders, Order("o1", 1.0))
        await driver.send(lists, [1, 2])
        assert [e.value for e in await driver.read(counts)] == [3, None]
        assert [e.value for e in await driver.read(prices)] == [2.0]
        assert [e.value for e in await driver.read(lists)] == [[1, 2]]


# -- the same, as a process ----------------------------------------------------------------------


def _start_failing_worker(tmp_path: Path, max_failures: int) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "worker.log"
    env = {**os.environ, "FAILING_APP_BROKER": f"file://{tmp_path / 'data'}", "FAILING_APP_MAX": str(max_failures),
           "PYTHONPATH": f"{ROOT / 'tests' / 'support' / 'apps'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "failing_app:app", "--progress-interval", "0"],
        env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=ROOT,
    )
    return proc, log


async def test_a_worker_process_with_a_failing_agent_stops_on_sigterm(tmp_path: Path) -> None:
    proc, log = _start_failing_worker(tmp_path, 1000)
    try:
        await until(lambda: log.read_text().count("failed outside a record") >= 2, timeout=60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        proc.kill()
    text = log.read_text()
    assert text.count("Traceback") == 1, text  # the first failure's; then one line per back-off
    assert "the database is unreachable" in text


async def test_a_worker_process_stops_with_a_clear_message_after_the_failure_limit(tmp_path: Path) -> None:
    proc, log = _start_failing_worker(tmp_path, 2)
    try:
        code = await asyncio.to_thread(proc.wait, 60)
    finally:
        proc.kill()
    text = log.read_text()
    assert code == 1, text  # a runtime failure, not a usage error (2)
    assert "streamkit: error: agent fail_early[0] failed 2 times in a row without processing a record" in text
    assert "ConnectionError: the database is unreachable" in text


async def test_an_input_topic_deleted_and_recreated_on_a_broker_resets_and_goes_on(
    broker: object, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On Kafka the client's metadata refresh brings the topic back at once (the broker
    auto-creates it) and aiokafka resets the out-of-range position per auto_offset_reset."""
    from streamkit.transport.kafka_tools import KafkaTools

    caplog.set_level(logging.INFO, logger="aiokafka")
    bootstrap = broker.bootstrap  # type: ignore[attr-defined]
    app = sk.App(unique, broker=f"kafka://{bootstrap}", commit_interval=0.1)
    src = app.topic(f"{unique}-src", value_type=int, partitions=1)
    seen: list[int] = []

    @app.agent(src)
    async def collect(stream: sk.Stream) -> None:
        async for v in stream:
            seen.append(v)

    tp = sk.TopicPartition(src.name, 0)
    async with Worker(app) as worker:
        for i in range(5):
            await src.send(value=i)
        await until(lambda: worker.committed.get(tp) == 5, timeout=60)
        async with KafkaTools(bootstrap) as tools:
            await tools.delete_topic(src.name)
        for i in range(10, 13):
            await (await src.send(value=i))
        await until(lambda: worker.committed.get(tp) == 3, timeout=60)
        assert worker.healthy
    assert seen == [0, 1, 2, 3, 4, 10, 11, 12]
    assert any("out of range" in r.getMessage() and "resetting" in r.getMessage() for r in caplog.records)


async def test_an_agent_instance_dying_past_its_supervisor_fails_the_worker(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = sk.App("deadletter-fails")
    src = app.topic("src", value_type=int)

    @app.agent(src)
    async def fragile(stream: sk.Stream) -> None:
        async for _ in stream:
            raise ValueError("bad record")

    async def dlq_down(*args: object) -> None:  # a fault we cannot make for real here
        raise sk.StreamkitError("the dead-letter topic cannot be written")

    async with AppDriver(app) as driver:
        monkeypatch.setattr(driver.worker, "dead_letter", dlq_down)
        await driver.send(src, 1)
        with pytest.raises(sk.StreamkitError, match="dead-letter topic cannot be written"):
            await asyncio.wait_for(driver.worker.wait(), 10)
        assert driver.worker.state == "failed"
    logged = [r for r in caplog.records if "fragile[0]#0 failed, stopping the worker" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


async def test_an_input_with_another_partition_count_is_an_error_when_the_app_has_tables(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = EmbeddedLogClient(str(tmp_path))
    await client.start()
    await client.ensure_topic("clicks", 1)  # auto-created by a producer that came first
    await client.aclose()

    app = sk.App("parts-tables")
    clicks = app.topic("clicks", key_type=str, value_type=int, partitions=4)
    counts = app.Table("counts", default=int, store="memory")

    @app.agent(clicks)
    async def count(stream: sk.Stream) -> None:
        async for key, _ in stream.items():
            counts[key] += 1

    async with AppDriver(app, data_dir=str(tmp_path)) as driver:
        mismatch = driver.worker.partition_mismatches["clicks"]
    said = [r for r in caplog.records if "but is declared with 4" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.ERROR
    assert "co-partitioned with table counts" in mismatch


async def test_a_yielded_value_of_the_wrong_type_is_dead_lettered_with_the_sinks_name() -> None:
    app = sk.App("typed-yield")
    src = app.topic("src", value_type=int)
    numbers = app.topic("numbers", value_type=int)
    words = app.topic("words", key_type=str, value_type=str)

    @app.agent(src, sink=[numbers])
    async def one_sink(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream:
            yield "seven" if v == 7 else v

    @app.agent(app.topic("src2", value_type=int), sink=[numbers, words])
    async def two_sinks(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream:
            yield str(v)

    async with AppDriver(app) as driver:
        for v in (6, 7, 8):
            await driver.send(src, v)
        await driver.send(app.topics["src2"], 1)
        await driver.process()
        assert [e.value for e in await driver.read(numbers)] == [6, 8]
        assert await driver.read(words) == []  # nothing of a refused value went anywhere
        dead = await driver.dead_letters()
    errors = sorted(dict(e.headers)["streamkit.error"].decode() for e in dead)
    assert errors == [
        "SerdeError: topic 'numbers' takes values of type int, not str: '1'",
        "SerdeError: topic 'numbers' takes values of type int, not str: 'seven'",
    ]
