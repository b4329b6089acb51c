"""The counting app's input and consumer group as the table tests see them from outside a
worker: keyed records produced to ``events``, and the group's committed offsets."""

from __future__ import annotations

from streamkit._core.partitioner import partition_for_key
from streamkit._core.types import TopicPartition
from streamkit.transport.base import open_log_client

PARTITIONS = 3  # counting_app's events topic


async def produce(url: str, pairs: list[tuple[str, int]]) -> None:
    """``(key, count)`` records to ``events``, placed as producers place keys."""
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic("events", PARTITIONS)
        producer = client.producer()
        await producer.start()
        for key, value in pairs:
            raw = key.encode()
            await producer.send("events", raw, str(value).encode(), partition=partition_for_key(raw, PARTITIONS))
        await producer.aclose()
    finally:
        await client.aclose()


async def committed(url: str) -> int:
    """The offsets the app's group committed on ``events``, summed over its partitions."""
    client = open_log_client(url)
    await client.start()
    consumer = client.consumer("tcount")
    try:
        return sum([await consumer.committed(TopicPartition("events", p)) or 0 for p in range(PARTITIONS)])
    finally:
        await consumer.aclose()
        await client.aclose()
