"""The exactly-once app's log as the tests see it from outside a worker: inputs produced to
``events`` (value: a unique input id), the outputs read committed or not, the changelog's
bounds and the local table state (read-only, while no worker runs). ``app_id`` names the app
(``EOS_ID``) whose topics they are."""

from __future__ import annotations

import json
import time
from collections import Counter

from streamkit._core.partitioner import partition_for_key
from streamkit._core.types import TopicPartition
from streamkit.transport.connect import open_log_client
from streamkit.transport.kafka_tools import KafkaTools
from tests.runtime.eos.eos_app import DEFAULT_ID, topic_names

PARTITIONS = 3


async def produce(url: str, pairs: list[tuple[str, int]], app_id: str = DEFAULT_ID) -> None:
    events = topic_names(app_id)[0]
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic(events, PARTITIONS)
        producer = client.producer()
        await producer.start()
        now_ms = int(time.time() * 1000)
        for key, value in pairs:
            raw = key.encode()
            wait = producer.send_nowait(events, partition_for_key(raw, PARTITIONS), raw, str(value).encode(), now_ms)
            if wait is not None:
                await wait
        await producer.aclose()
    finally:
        await client.aclose()


async def outputs(url: str, isolation_level: str, app_id: str = DEFAULT_ID) -> list[tuple[str, int, int]]:
    """Every record of ``results``: (key, input id, count), per partition in offset order."""
    results = topic_names(app_id)[1]
    client = open_log_client(url)
    await client.start()
    reader = client.reader(isolation_level=isolation_level)
    out: list[tuple[str, int, int]] = []
    try:
        for p in range(PARTITIONS):
            tp = TopicPartition(results, p)
            offset, end = await reader.bounds(tp)
            while offset < end:
                chunk = await reader.read(tp, offset, 10_000)
                if chunk.next_offset <= offset:
                    break
                for r in chunk.records:
                    ident, _, n = json.loads(r.value or b'""').partition(":")
                    out.append(((r.key or b"").decode(), int(ident), int(n)))
                offset = chunk.next_offset
    finally:
        await reader.aclose()
        await client.aclose()
    return out


async def committed(url: str, app_id: str = DEFAULT_ID) -> int:
    """The offsets the group committed, summed. Over the wire, as Kafka's admin reads them (not
    stable): after a SIGKILL the dead worker's transaction holds offsets until the next owner's
    InitProducerId or the transaction timeout (60 s) aborts it, and a stable read waits for that
    (Apache Kafka answers UNSTABLE_OFFSET_COMMIT meanwhile)."""
    if url.startswith("kafka://"):
        async with KafkaTools(url.removeprefix("kafka://")) as tools:
            return sum((await tools.committed(app_id, topic_names(app_id)[0])).values())
    client = open_log_client(url)
    await client.start()
    consumer = client.consumer(app_id)
    try:
        return sum([await consumer.committed(TopicPartition(topic_names(app_id)[0], p)) or 0 for p in range(PARTITIONS)])
    finally:
        await consumer.aclose()
        await client.aclose()




def check_exactly_once(
    out: list[tuple[str, int, int]], pairs: list[tuple[str, int]], seed: int
) -> list[tuple[str, list[tuple[int, int]]]]:
    """Assert that every input has exactly one committed output; return the keys whose counts
    are not 1, 2, ... n in output order, each with its (input id, count) outputs."""
    ids = Counter(ident for _key, ident, _n in out)
    assert set(ids) == {ident for _key, ident in pairs}, f"seed {seed}: lost outputs"
    twice = [i for i, n in ids.items() if n > 1]
    assert not twice, f"seed {seed}: {len(twice)} inputs have more than one committed output"
    per_key: dict[str, list[tuple[int, int]]] = {}
    for key, ident, n in out:
        per_key.setdefault(key, []).append((ident, n))
    return [(key, seen) for key, seen in per_key.items() if [n for _i, n in seen] != list(range(1, len(seen) + 1))]


def reference(pairs: list[tuple[str, int]]) -> dict[str, int]:
    model: dict[str, int] = {}
    for key, _ident in pairs:
        model[key] = model.get(key, 0) + 1
    return model


async def changelog_table(url: str, app_id: str = DEFAULT_ID) -> dict[str, int]:
    """The latest committed value of each key of the table's changelog."""
    client = open_log_client(url)
    await client.start()
    reader = client.reader(isolation_level="read_committed")
    table: dict[str, int] = {}
    try:
        for p in range(PARTITIONS):
            tp = TopicPartition(f"{app_id}-counts-changelog", p)
            offset, end = await reader.bounds(tp)
            while offset < end:
                chunk = await reader.read(tp, offset, 10_000)
                if chunk.next_offset <= offset:
                    break
                for r in chunk.records:
                    key = (r.key or b"").decode()
                    if r.value is None:
                        table.pop(key, None)
                    else:
                        table[key] = int(r.value)
                offset = chunk.next_offset
    finally:
        await reader.aclose()
        await client.aclose()
    return table
