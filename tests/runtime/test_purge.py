"""Repartition topics as Kafka Streams keeps them, on each backend (``log_url``): no time
retention (re-keyed history keeps its old timestamps, which a time retention would expire
before the next stage read them), and the worker deletes what its group has committed past
(Kafka Streams' purge, ``repartition_purge_interval``; ``runtime/purge.py``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import streamkit as sk
from streamkit._core.types import TopicPartition
from streamkit.runtime import Worker
from streamkit.topics.topic import REPARTITION_CONFIG
from streamkit.transport import open_log_client
from tests.runtime.test_alignment import _settled
from tests.support.workers import read_topic, until_assigned

OLD = 1_577_836_800_000  # 2020-01-01: far past any time retention
USERS = ["ann", "bob", "cid", "dee", "eve"]


def _app(url: str, name: str) -> tuple[sk.App, sk.Topic, sk.Topic]:
    app = sk.App(name, broker=url, commit_interval=0.2, repartition_purge_interval=0.2)
    views = app.topic(f"{name}-views", key_type=str, value_type=dict, partitions=2)
    out = app.topic(f"{name}-counts", key_type=str, value_type=int, partitions=3)
    app.stream(views).group_by(lambda v: v["user"], name="user").count("per_user").to_stream().to(out)
    return app, views, out


async def _send(views: sk.Topic, start: int, n: int) -> None:
    for i in range(start, start + n):
        await (await views.send(key=f"v{i}", value={"user": USERS[i % len(USERS)]}, timestamp=OLD + i))


async def _bounds(url: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    client = open_log_client(url)
    await client.start()
    try:
        reader = client.reader()
        try:
            return {p: await reader.bounds(TopicPartition(topic, p)) for p in range(partitions)}
        finally:
            await reader.aclose()
    finally:
        await client.aclose()


async def _purged(worker: Worker, topic: str) -> dict[TopicPartition, int]:
    """Commit and wait until a purge has deleted up to every committed offset of ``topic``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        await worker.commit()
        committed = {tp: o for tp, o in worker.committer.committed.items() if tp.topic == topic}
        bounds = await _bounds(worker.app.broker, topic, 2)
        if len(committed) == 2 and all(bounds[tp.partition][0] == o for tp, o in committed.items()):
            return committed
        assert loop.time() < deadline, f"not purged: committed {committed}, bounds {bounds}"
        await asyncio.sleep(0.2)


async def test_repartition_topics_are_kept_until_committed_past_then_deleted(log_url: str, tmp_path: Path, unique: str) -> None:
    app, views, out = _app(log_url, unique)
    hop = f"{unique}-per_user-user-repartition"
    assert app.topics[hop].config == REPARTITION_CONFIG  # retention.ms -1, as Kafka Streams'
    async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
        await until_assigned(worker, 2 + 2)  # views, the repartition topic
        await _send(views, 0, 40)
        await _settled(worker)
        first = await _purged(worker, hop)
        assert sum(first.values()) == 40  # every re-keyed record was read, committed and deleted
        assert worker.purger.purges >= 1
    # A second worker of the group goes on from the committed offsets: nothing it needs was deleted.
    app, views, out = _app(log_url, unique)
    async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
        await until_assigned(worker, 2 + 2)  # views, the repartition topic
        await _send(views, 40, 35)
        await _settled(worker)
        second = await _purged(worker, hop)
        assert sum(second.values()) == 75
    latest: dict[str, int] = {}
    for record in await read_topic(log_url, out.name):
        latest[record.key.decode()] = json.loads(record.value)
    assert latest == {u: sum(1 for i in range(75) if USERS[i % len(USERS)] == u) for u in USERS}
