"""A ``streamkit worker`` counting on the three-node Apache Kafka cluster (replication 3, min
ISR 2, ``topic_replication_factor=3``) while the test faults the cluster under it, input
flowing from an acks=all producer the whole time (issue 26's broker outages): a node SIGKILLed
and restarted, then another; the leaders of input and changelog partitions moved; the whole
cluster down for 30 s. Each ends with the counts exact and each input forwarded once
(exactly-once, read_committed) or nothing lost (at-least-once), and the worker stopping
cleanly on SIGTERM.

The cluster is the module's ``kafka_cluster``: each test leaves its three nodes running.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.interop import kafka_tool
from tests.support.kafka import KafkaCluster
from tests.support.outage import (
    Input,
    assert_counted,
    health,
    quiet,
    start_worker,
    until_counted,
    until_forwarded,
    until_health,
    web_url,
)

GUARANTEES = ["exactly_once", "at_least_once"]
FLOW_S = 3.0  # input counted between two faults
OUTAGE_S = 30.0


def _assert_replicated(cluster: KafkaCluster, app_id: str) -> None:
    """The topics the worker created have three replicas each (``topic_replication_factor``)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    topics = admin.list_topics(timeout=10).topics
    mine = {name: meta for name, meta in topics.items() if name.startswith(f"{app_id}-")}
    assert {f"{app_id}-in", f"{app_id}-counts-changelog", f"{app_id}-counts", f"{app_id}-seen"} <= set(mine), sorted(mine)
    short = {f"{n} [{p.id}]": p.replicas for n, meta in mine.items() for p in meta.partitions.values() if len(p.replicas) != 3}
    assert not short, short


async def _count_through(
    cluster: KafkaCluster, tmp_path: Path, app_id: str, guarantee: str, fault: Callable[[str], Awaitable[None]],
) -> None:
    """Run the count app on ``cluster`` with input flowing, ``fault(app_id)`` in the middle,
    then check the counts and the worker's clean stop."""
    log = tmp_path / "worker.log"
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = start_worker(cluster.bootstrap, app_id, guarantee, tmp_path, log, replication=3)
        url = await web_url(proc, log)
        _assert_replicated(cluster, app_id)
        with Input(cluster.bootstrap, f"{app_id}-in", interval_s=0.02) as records:
            await until_health(url, 200, proc, log, 60)
            await asyncio.sleep(FLOW_S)
            await fault(app_id)
            assert proc.poll() is None, f"the worker stopped under the fault:\n{log.read_text()}"
            await until_health(url, 200, proc, log, 90)
            await asyncio.sleep(FLOW_S)
            records.finish()
        got = await until_counted(cluster.bootstrap, f"{app_id}-counts", records.delivered)
        seen = await until_forwarded(cluster.bootstrap, f"{app_id}-seen", records.values)
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 40)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        await asyncio.to_thread(cluster.ensure_running)  # the next test's cluster, whatever failed
    text = log.read_text()
    assert code == 0, text[-6000:]
    quiet(text)
    assert len(records.values) > 300, f"only {len(records.values)} records flowed"
    assert_counted(guarantee, got, seen, records)


@pytest.mark.slow
@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_two_brokers_killed_in_turn_under_a_counting_worker(
    kafka_cluster: KafkaCluster, tmp_path: Path, unique: str, guarantee: str,
) -> None:
    killed: list[int] = []

    async def kill_two(app_id: str) -> None:
        # First the node leading input partition 0, then the one now leading the changelog's
        # partition 0 (or any other node, when that is the first one back).
        for topic in (f"{app_id}-in", f"{app_id}-counts-changelog"):
            node = kafka_cluster.leader(topic, 0)
            if node in killed or node < 1:
                node = next(n for n in (1, 2, 3) if n not in killed)
            kafka_cluster.kill(node - 1)
            killed.append(node)
            await asyncio.sleep(FLOW_S)  # input flowing while the node is dead
            await asyncio.to_thread(kafka_cluster.restart, node - 1)
            await asyncio.to_thread(kafka_cluster.wait_in_sync)
            await asyncio.sleep(FLOW_S)

    await _count_through(kafka_cluster, tmp_path, unique, guarantee, kill_two)
    assert len(set(killed)) == 2, killed


def _move_leaders(cluster: KafkaCluster, partitions: list[tuple[str, int]], tmp_path: Path) -> dict[tuple[str, int], int]:
    """Each partition's leader moved to another of its replicas: the replica order changed
    (Kafka's ReassignPartitionsCommand, the same replicas) so that another is preferred, then
    a preferred leader election. Returns the new leaders, checked by describing the topics."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    moves: dict[tuple[str, int], int] = {}
    plan = []
    for topic, p in partitions:
        meta = admin.list_topics(topic, timeout=10).topics[topic].partitions[p]
        replicas = list(meta.replicas)
        target = next(r for r in replicas if r != meta.leader)
        moves[(topic, p)] = target
        plan.append({"topic": topic, "partition": p, "replicas": [target] + [r for r in replicas if r != target]})
    plan_file = tmp_path / "reassign.json"
    plan_file.write_text(json.dumps({"version": 1, "partitions": plan}))
    done = kafka_tool("reassign.ReassignPartitionsCommand", "--bootstrap-server", cluster.bootstrap,
                      "--reassignment-json-file", str(plan_file), "--execute")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    deadline = time.monotonic() + 30
    while True:
        elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(t, p) for t, p in partitions]).result(15)
        leaders = {tp: cluster.leader(*tp) for tp in partitions}
        if leaders == moves:
            return leaders
        assert time.monotonic() < deadline, f"leaders {leaders}, wanted {moves}; election: {elected}"
        time.sleep(0.5)  # the new replica order not yet applied


@pytest.mark.slow
@pytest.mark.parametrize("guarantee", GUARANTEES)
async def test_input_and_changelog_leaders_moved_under_a_counting_worker(
    kafka_cluster: KafkaCluster, tmp_path: Path, unique: str, guarantee: str,
) -> None:
    moved: list[dict[tuple[str, int], int]] = []

    async def move(app_id: str) -> None:
        partitions = [(f"{app_id}-in", 0), (f"{app_id}-in", 1),
                      (f"{app_id}-counts-changelog", 0), (f"{app_id}-counts-changelog", 1)]
        before = {tp: kafka_cluster.leader(*tp) for tp in partitions}
        after = await asyncio.to_thread(_move_leaders, kafka_cluster, partitions, tmp_path)
        assert all(after[tp] != before[tp] for tp in partitions), (before, after)
        moved.append(after)
        await asyncio.sleep(FLOW_S)

    await _count_through(kafka_cluster, tmp_path, unique, guarantee, move)
    assert moved


@pytest.mark.slow
async def test_the_whole_cluster_down_under_an_exactly_once_worker(
    kafka_cluster: KafkaCluster, tmp_path: Path, unique: str,
) -> None:
    """Exactly-once only, for time (a minute a run): an at-least-once worker through a whole
    cluster's outage is ``tests/runtime/test_worker_kafka_outage.py``'s, on one node."""
    answers: list[tuple[int, dict[str, Any]]] = []

    async def outage(app_id: str) -> None:
        # All three nodes SIGKILLed at once; the producer keeps its input meanwhile.
        url = re.findall(r"web: (http://\S+)", (tmp_path / "worker.log").read_text())[0]
        for i in range(kafka_cluster.size):
            kafka_cluster.kill(i)
        down = time.monotonic()
        while time.monotonic() - down < OUTAGE_S:
            answers.append(await asyncio.to_thread(health, url))
            await asyncio.sleep(1.0)
        await asyncio.to_thread(kafka_cluster.restart_all)
        await asyncio.to_thread(kafka_cluster.wait_in_sync)

    await _count_through(kafka_cluster, tmp_path, unique, "exactly_once", outage)
    # /health said why while no node answered (once the outage was told from a restart).
    waiting = [body for status, body in answers if status == 503 and "does not answer" in body.get("waiting", "")]
    assert len(waiting) >= OUTAGE_S - 10, answers
