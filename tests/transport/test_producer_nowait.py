"""``Producer.send_nowait``, the engine's per-record path, on both transports: back-pressure
comes back as an awaitable, and nothing is lost or reordered."""

from __future__ import annotations

import time

import pytest

import streamkit as sk
from streamkit.transport.connect import open_log_client


class _Quiet:
    async def on_partitions_revoked(self, revoked: set[sk.TopicPartition]) -> None: ...
    async def on_partitions_assigned(self, assigned: set[sk.TopicPartition]) -> None: ...


@pytest.mark.parametrize("fsync_each", [False, True], ids=["default-flush", "flush.messages=1"])
async def test_send_nowait_applies_back_pressure_and_keeps_order(log_url: str, unique: str, fsync_each: bool) -> None:
    topic = f"{unique}-nowait"
    count, value = 12_000, b"v" * 2000  # 24 MB: many times the Kafka driver's queued batches
    client = open_log_client(log_url)
    await client.start()
    try:
        await client.ensure_topic(topic, 2, {"flush.messages": "1"} if fsync_each else None)
        producer = client.producer()
        await producer.start()
        waits = 0
        for i in range(count):  # no await in between unless told to wait
            wait = producer.send_nowait(topic, i % 2, b"%d" % i, value, 1_700_000_000_000 + i)
            if wait is not None:
                waits += 1
                await wait
        await producer.flush()
        await producer.aclose()
        if log_url.startswith("kafka://") or fsync_each:
            # The Kafka driver's backlog filled up, or the embedded log fsyncs each full batch
            # off the event loop: either way the sender was held back.
            assert waits > 0

        consumer = client.consumer(f"reader-{time.monotonic_ns()}")
        consumer.subscribe([topic], _Quiet())
        await consumer.start()
        got: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for tp, records in (await consumer.getmany(500, 50_000)).items():
                for record in records:
                    assert record.value == value
                    assert record.key is not None
                    got[tp.partition].append(int(record.key))
        await consumer.aclose()
    finally:
        await client.aclose()
    assert got[0] == list(range(0, count, 2))
    assert got[1] == list(range(1, count, 2))
