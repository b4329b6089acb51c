"""The counting app's input and consumer group as the table tests see them from outside a
worker: keyed records produced to ``events``, and the group's committed offsets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from streamkit._core.partitioner import partition_for_key
from streamkit._core.types import TopicPartition
from streamkit.tables.store import RocksStore
from streamkit.transport.connect import open_log_client
from tests.tables.counting_app import DEFAULT_ID, events_topic

PARTITIONS = 3  # counting_app's events topic


async def produce(
    url: str,
    pairs: Sequence[tuple[Any, int]],
    encode_key: Callable[[Any], bytes] = str.encode,
    partitions: int = PARTITIONS,
    app_id: str = DEFAULT_ID,
) -> None:
    """``(key, count)`` records to app ``app_id``'s ``events`` (of ``partitions``), placed as
    producers place keys (``encode_key`` makes a key's bytes)."""
    topic = events_topic(app_id)
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic(topic, partitions)
        producer = client.producer()
        await producer.start()
        for key, value in pairs:
            raw = encode_key(key)
            await producer.send(topic, raw, str(value).encode(), partition=partition_for_key(raw, partitions))
        await producer.aclose()
    finally:
        await client.aclose()


async def committed(url: str, app_id: str = DEFAULT_ID) -> int:
    """The offsets app ``app_id``'s group committed on its ``events``, summed over its partitions."""
    client = open_log_client(url)
    await client.start()
    consumer = client.consumer(app_id)
    try:
        return sum([await consumer.committed(TopicPartition(events_topic(app_id), p)) or 0 for p in range(PARTITIONS)])
    finally:
        await consumer.aclose()
        await client.aclose()


def local_offsets(state: Path) -> dict[int, int | None]:
    """The changelog offset each local RocksDB partition of the ``counts`` table recorded
    (None: no local state), read while no worker holds it."""
    out: dict[int, int | None] = {}
    for p in range(PARTITIONS):
        path = state / "counts" / str(p)
        if not path.exists():
            out[p] = None
            continue
        store = RocksStore(str(path), read_only=True)
        try:
            out[p] = store.changelog_offset
        finally:
            store.close()
    return out


def local_table(state: Path) -> dict[str, int]:
    """The ``counts`` table as its local RocksDB partitions hold it."""
    out: dict[str, int] = {}
    for p in range(PARTITIONS):
        store = RocksStore(str(state / "counts" / str(p)), read_only=True)
        try:
            out.update((k.decode(), int(v)) for k, v in store.items())
        finally:
            store.close()
    return out
