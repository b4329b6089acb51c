"""The settings a Kafka deployment needs, honoured on Apache Kafka (issue 26): replication
(and min ISR) of every topic a worker creates, producer acks and compression, static group
membership, the group's session timeout; and the embedded log and ``streamkit broker`` with
the same settings."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

import streamkit as sk
from streamkit._core.errors import ConfigError
from streamkit._core.types import TopicPartition
from streamkit.app.conf import Settings
from streamkit.runtime import Worker
from streamkit.transport.base import TransportError
from streamkit.transport.connect import open_log_client
from streamkit.transport.kafka import check_codec
from streamkit.transport.options import ClientOptions
from streamkit.web import WebServer
from tests.support.broker import BrokerProcess
from tests.support.interop import classpath
from tests.support.kafka import KafkaCluster
from tests.support.processes import free_port

HERE = Path(__file__).resolve().parent
STREAMKIT = str(Path(sys.executable).parent / "streamkit")


async def _until(check: Callable[[], Any], what: str, timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# -- the settings table to the transport's options ---------------------------------------


def test_settings_become_the_kafka_clients_options() -> None:
    conf = Settings(
        "shop", producer_acks="all", producer_compression_type="zstd", consumer_group_instance_id="shop-1",
        broker_session_timeout=30, broker_heartbeat_interval=3, broker_max_poll_interval=600,
        broker_rebalance_timeout=45, broker_request_timeout=20, topic_replication_factor=3,
    )
    assert conf.client_options() == ClientOptions(
        acks=-1, compression_type="zstd", group_instance_id="shop-1", session_timeout_ms=30_000,
        heartbeat_interval_ms=3_000, max_poll_interval_ms=600_000, rebalance_timeout_ms=45_000,
        request_timeout_ms=20_000, replication_factor=3,
    )
    # A JoinGroup waits out the rebalance: the consumer's requests may take that long and 5 s.
    assert conf.client_options().consumer_request_timeout_ms == 50_000
    assert Settings("plain").client_options() == ClientOptions()
    assert Settings("none", producer_compression_type="none").producer_compression_type is None
    assert set(Settings("x").ineffective()) == set()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"producer_acks": 2}, "producer_acks must be 0, 1, -1 or 'all'"),
        ({"producer_compression_type": "brotli"}, "producer_compression_type must be one of gzip"),
        ({"consumer_group_instance_id": ""}, "consumer_group_instance_id must be a non-empty string"),
        ({"topic_replication_factor": 0}, "topic_replication_factor must be an integer >= 1"),
        ({"broker_session_timeout": 0}, "broker_session_timeout must be above 0 seconds"),
    ],
)
def test_a_bad_value_is_a_one_line_error(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings("bad", **settings)


def test_a_heartbeat_not_below_the_session_timeout_is_refused_when_the_worker_is_made(tmp_path: Path) -> None:
    app = sk.App("hb", broker="kafka://127.0.0.1:1", broker_session_timeout=6, broker_heartbeat_interval=6)
    with pytest.raises(ConfigError, match=r"broker_heartbeat_interval \(6 s\) must be below broker_session_timeout \(6 s\)"):
        Worker(app, state_dir=str(tmp_path))


def test_exactly_once_with_acks_other_than_all_is_refused_when_the_worker_is_made(tmp_path: Path) -> None:
    app = sk.App("eos", broker="kafka://127.0.0.1:1", processing_guarantee="exactly_once", producer_acks=1)
    with pytest.raises(ConfigError, match=r"exactly_once needs producer_acks=-1 \('all'\), not 1"):
        Worker(app, state_dir=str(tmp_path))


def test_topic_config_gets_the_min_isr_of_the_rule_unless_the_topic_names_one() -> None:
    three = ClientOptions(replication_factor=3)
    assert three.topic_config({}) == {"min.insync.replicas": "2"}
    assert three.topic_config({"min.insync.replicas": "3"}) == {"min.insync.replicas": "3"}
    assert ClientOptions(replication_factor=2).topic_config({}) == {"min.insync.replicas": "1"}
    assert ClientOptions().topic_config({"retention.ms": "5"}) == {"retention.ms": "5"}


def test_a_codec_whose_library_is_missing_is_one_clear_error() -> None:
    missing = {"zstd": lambda: False, "gzip": lambda: True}
    with pytest.raises(ConfigError, match="producer_compression_type 'zstd': its library is not installed"):
        check_codec("zstd", missing)
    check_codec("gzip", missing)
    check_codec(None, missing)


def test_the_cli_refuses_a_codec_without_its_library_with_exit_2(tmp_path: Path) -> None:
    """aiokafka told it has no zstd, as where its codec library is missing (streamkit itself
    depends on cramjam, aiokafka's library for snappy, lz4 and zstd): the worker does not start."""
    (tmp_path / "zapp.py").write_text(
        "import streamkit as sk\n"
        f"app = sk.App('zapp', broker='kafka://127.0.0.1:{free_port()}', producer_compression_type='zstd')\n"
        "t = app.topic('zin')\n"
        "@app.agent(t)\n"
        "async def a(stream):\n"
        "    async for _ in stream:\n"
        "        pass\n"
    )
    code = "import aiokafka.codec as c; c.has_zstd = lambda: False; from streamkit.cli import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, "worker", "-A", "zapp:app", "--state-dir", str(tmp_path / "s")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "streamkit: error: producer_compression_type 'zstd': its library is not installed "
        "(aiokafka compresses snappy, lz4 and zstd with cramjam: pip install cramjam)"
    )
    assert "Traceback" not in done.stderr


def test_table_standby_replicas_is_the_default_of_tables_that_name_none() -> None:
    app = sk.App("standbys", table_standby_replicas=2)
    assert app.Table("a").standby_replicas == 2
    assert app.Table("b", standby_replicas=0).standby_replicas == 0
    assert sk.App("plain").Table("c").standby_replicas == 0


async def test_canonical_url_is_the_address_the_worker_tells_its_group(tmp_path: Path, unique: str) -> None:
    app = sk.App(unique, broker=f"file://{tmp_path / 'log'}", canonical_url="http://shop-1.internal:6066")
    src = app.topic(f"{unique}-in", partitions=2)

    @app.agent(src)
    async def read(stream: sk.Stream) -> None:
        async for _ in stream:
            pass

    async with Worker(app, state_dir=str(tmp_path / "state"), advertised_url="http://127.0.0.1:1") as worker:
        await _until(lambda: worker.owner_url(1), "the group's owners")
        assert worker.owner_url(0) == worker.owner_url(1) == "http://shop-1.internal:6066"


# -- the embedded log and streamkit broker with every setting ------------------------------


def _forwarding_app(app_id: str, url: str, **settings: Any) -> tuple[sk.App, sk.Topic, list[int]]:
    """Totals per key after a ``group_by``, yielded to a sink: a topic of each kind a worker
    creates (input, repartition, sink, changelog, dead letters)."""
    app = sk.App(app_id, broker=url, commit_interval=0.2, **settings)
    src = app.topic(f"{app_id}-src", key_type=str, value_type=int, partitions=2)
    dst = app.topic(f"{app_id}-dst", key_type=str, value_type=int, partitions=2)
    totals = app.Table("totals", default=int, key_type=str, value_type=int)
    seen: list[int] = []

    @app.agent(src, sink=[dst])
    async def total(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.group_by(lambda v: f"k{v % 3}", name="bykey").items():
            totals[key] += value
            seen.append(value)
            yield totals[key]

    return app, src, seen


EVERY_SETTING: dict[str, Any] = {
    "topic_replication_factor": 3, "producer_acks": 1, "producer_compression_type": "lz4",
    "consumer_group_instance_id": "w-1", "broker_session_timeout": 6.0, "broker_heartbeat_interval": 0.5,
    "broker_max_poll_interval": 60.0, "broker_rebalance_timeout": 8.0, "broker_request_timeout": 20.0,
    "table_standby_replicas": 1,
}


async def _total_of(src: sk.Topic, seen: list[int], n: int) -> int:
    """Send 0..n-1 and wait until the agent processed them all; their sum."""
    for i in range(n):
        await src.send(key=f"r{i}", value=i)
    await _until(lambda: len(seen) >= n, f"{n} records processed")
    return sum(seen)


async def test_the_embedded_log_runs_an_app_with_every_kafka_setting(tmp_path: Path, unique: str) -> None:
    app, src, seen = _forwarding_app(unique, f"file://{tmp_path / 'log'}", **EVERY_SETTING)
    async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
        assert await _total_of(src, seen, 30) == sum(range(30))
        assert worker.replication_mismatches == {}


async def test_streamkit_broker_refuses_more_replicas_than_its_one_node_as_kafka_does(
    broker: BrokerProcess, tmp_path: Path, unique: str
) -> None:
    app, _src, _seen = _forwarding_app(unique, f"kafka://{broker.bootstrap}", **EVERY_SETTING)
    worker = Worker(app, state_dir=str(tmp_path / "state"))
    try:
        refused = f"cannot create topic '{unique}-dlq' with topic_replication_factor=3: replication factor 3 is more than the 1 broker"
        with pytest.raises(TransportError, match=re.escape(refused)):
            await worker.start()
    finally:
        await worker.stop()
    # One replica, the same settings otherwise: it runs.
    app, src, seen = _forwarding_app(unique, f"kafka://{broker.bootstrap}", **{**EVERY_SETTING, "topic_replication_factor": 1})
    async with Worker(app, state_dir=str(tmp_path / "state2")) as worker:
        assert await _total_of(src, seen, 30) == sum(range(30))
        assert worker.replication_mismatches == {}  # streamkit broker describes its one replica


# -- Apache Kafka: replication --------------------------------------------------------------


def _replication(bootstrap: str, names: list[str]) -> dict[str, tuple[int, str]]:
    """Per topic: its replication factor and its min.insync.replicas, as Kafka describes them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=30)
    configs = admin.describe_configs([ConfigResource("topic", n) for n in names])
    out: dict[str, tuple[int, str]] = {}
    for resource, future in configs.items():
        entries = future.result(30)
        partitions = metadata.topics[resource.name].partitions
        factors = {len(p.replicas) for p in partitions.values()}
        assert len(factors) == 1, (resource.name, factors)
        out[resource.name] = (factors.pop(), entries["min.insync.replicas"].value)
    return out


async def test_every_topic_the_worker_creates_has_the_declared_replication_on_three_brokers(
    kafka_cluster: KafkaCluster, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = kafka_cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    old = f"{unique}-old"
    admin.create_topics([NewTopic(old, 1, 1)])[old].result(30)  # there before, one replica
    app, src, seen = _forwarding_app(unique, f"kafka://{bootstrap}", topic_replication_factor=3)
    app.topic(old)
    caplog.set_level(logging.WARNING, logger="streamkit.transport.kafka")
    async with Worker(app, state_dir=str(tmp_path / "state")) as worker, WebServer(worker, port=0) as web:
        assert await _total_of(src, seen, 30) == sum(range(30))
        mismatches = worker.replication_mismatches
        status = await asyncio.to_thread(_get_json, f"{web.url}/status")
    created = sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(unique) and t != old)
    # inputs, sink, the group_by's repartition topic, the table's changelog, the dead letters
    assert {f"{unique}-src", f"{unique}-dst", f"{unique}-dlq", f"{unique}-totals-changelog"} <= set(created)
    assert any("bykey" in t for t in created), created
    assert _replication(bootstrap, created) == {name: (3, "2") for name in created}
    said = f"topic {old!r} has replication factor 1 but is declared with 3"
    assert mismatches == status["replication_mismatches"] == {old: f"{said} (used as it is)"}
    assert [r.getMessage() for r in caplog.records if old in r.getMessage()] == [
        f"{said} (topic_replication_factor); it is used as it is"
    ]


# -- Apache Kafka: the producer's acks and compression ---------------------------------------


@pytest.mark.parametrize("acks", [0, 1])
async def test_producer_acks_reach_kafka(kafka: KafkaCluster, unique: str, acks: int) -> None:
    """acks=0: Kafka answers nothing, so no offset is known (-1, as Kafka's producer says);
    acks=1 (and all): the records' offsets."""
    client = open_log_client(f"kafka://{kafka.bootstrap}", options=Settings("a", producer_acks=acks).client_options())
    await client.start()
    producer = client.producer()
    try:
        await client.ensure_topic(unique, 1)
        await producer.start()
        acks_of = [await producer.send(unique, b"k", str(i).encode(), partition=0) for i in range(3)]
        offsets = [(await ack).offset for ack in acks_of]
        await producer.flush()
    finally:
        await producer.aclose()
        await client.aclose()
    assert offsets == ([-1, -1, -1] if acks == 0 else [0, 1, 2])


async def test_producer_compression_type_is_the_codec_of_the_batches_kafka_stores(
    kafka: KafkaCluster, unique: str
) -> None:
    options = Settings("z", producer_compression_type="zstd").client_options()
    client = open_log_client(f"kafka://{kafka.bootstrap}", options=options)
    await client.start()
    producer = client.producer()
    try:
        await client.ensure_topic(unique, 1)
        await producer.start()
        for i in range(50):
            await producer.send(unique, b"k", b"a compressible value " * 10 + str(i).encode(), partition=0)
        await producer.flush()
    finally:
        await producer.aclose()
        await client.aclose()
    segment = kafka.node_dir(0) / "data" / f"{unique}-0" / "00000000000000000000.log"
    dumped = subprocess.run(
        ["java", "-Xmx128m", "-cp", classpath("kafka"), "org.apache.kafka.tools.DumpLogSegments", "--files", str(segment)],
        capture_output=True, text=True, timeout=60,
    )
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    codecs = set(re.findall(r"compresscodec: (\w+)", dumped.stdout))
    assert codecs == {"zstd"}, dumped.stdout[-2000:]


# -- Apache Kafka: the group ----------------------------------------------------------------


class _Counting:
    """Counts a worker's rebalances (its listener's calls) and keeps its last assignment."""

    def __init__(self, worker: Worker) -> None:
        self.calls = 0
        rebalancer = worker.rebalancer
        assigned, revoked = rebalancer.on_partitions_assigned, rebalancer.on_partitions_revoked

        async def on_assigned(tps: set[TopicPartition]) -> None:
            self.calls += 1
            await assigned(tps)

        async def on_revoked(tps: set[TopicPartition]) -> None:
            self.calls += 1
            await revoked(tps)

        rebalancer.on_partitions_assigned = on_assigned  # type: ignore[method-assign]
        rebalancer.on_partitions_revoked = on_revoked  # type: ignore[method-assign]


def _static_app(app_id: str, url: str, instance: str) -> sk.App:
    app = sk.App(app_id, broker=url, commit_interval=0.2, consumer_group_instance_id=instance,
                 broker_session_timeout=30.0, broker_client_id="static-client")
    src = app.topic(f"{app_id}-in", key_type=str, value_type=int, partitions=4)

    @app.agent(src)
    async def read(stream: sk.Stream) -> None:
        async for _ in stream:
            pass

    return app


async def test_a_static_member_back_within_the_session_timeout_keeps_its_partitions_without_a_rebalance(
    kafka: KafkaCluster, tmp_path: Path, unique: str
) -> None:
    url = f"kafka://{kafka.bootstrap}"
    first = Worker(_static_app(unique, url, "first"), state_dir=str(tmp_path / "first"))
    await first.start()
    second = Worker(_static_app(unique, url, "second"), state_dir=str(tmp_path / "second"))
    try:
        await second.start()
        await _until(lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2, "both to hold two")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        group = (await asyncio.to_thread(admin.describe_consumer_groups([unique])[unique].result, 30))
        assert sorted((m.client_id, m.group_instance_id) for m in group.members) == [
            ("static-client", "first"), ("static-client", "second")
        ]
        held = second.assignment()
        watch = _Counting(first)
        await second.stop()  # a static member sends no LeaveGroup: its partitions wait for it
        second = Worker(_static_app(unique, url, "second"), state_dir=str(tmp_path / "second"))
        await second.start()
        await _until(lambda: second.assignment(), "the restarted member's assignment")
        await asyncio.sleep(3)  # a rebalance, had there been one, reaches the other member by now
        assert second.assignment() == held
        assert len(first.assignment()) == 2 and watch.calls == 0
    finally:
        await second.stop()
        await first.stop()


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def _assigned(url: str) -> set[str]:
    return set(_get_json(f"{url}/status")["assignment"])


async def test_a_sigkilled_worker_loses_its_partitions_within_the_session_timeout(
    kafka: KafkaCluster, tmp_path: Path, unique: str
) -> None:
    """Kafka's brokers take sessions of 6 s and more: with 6 s instead of the default 10 s,
    the survivor holds every partition about 6 s after the other's last heartbeat."""
    env = {**os.environ, "SETTINGS_APP_ID": unique, "SETTINGS_BROKER": f"kafka://{kafka.bootstrap}",
           "SETTINGS_SESSION_S": "6", "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    procs: list[subprocess.Popen[str]] = []
    urls: list[str] = []
    try:
        for name in ("a", "b"):
            log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115
            procs.append(subprocess.Popen(
                [STREAMKIT, "worker", "-A", "settings_app:app", "--web-port", "0", "--state-dir",
                 str(tmp_path / name), "--progress-interval", "0"],
                env=env, cwd=tmp_path, stderr=log, text=True,
            ))
            log.close()

            def web(name: str = name) -> str | None:
                found = re.search(r"web: (http://127\.0\.0\.1:\d+)", (tmp_path / f"{name}.log").read_text())
                return found.group(1) if found else None

            urls.append(await _until(web, f"worker {name}'s web address", 60))
        everything = {f"{unique}-events-{p}" for p in range(4)}
        await _until(lambda: len(_assigned(urls[0])) == 2 and len(_assigned(urls[1])) == 2, "both to hold two", 60)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        killed = time.monotonic()
        await _until(lambda: _assigned(urls[0]) == everything, "the survivor to hold every partition", 30)
        took = time.monotonic() - killed
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    # The session (6 s, counted from the last heartbeat up to 1 s before the kill), then a
    # rebalance: 6.0 s measured; with the default session (10 s), 10.0 s.
    assert 4.0 < took < 8.5, took
