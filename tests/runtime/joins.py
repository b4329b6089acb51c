"""A windowed join after a re-key, with its input and the answers it owes (issue 22): the
left topic has 3 partitions, the right 2, both re-keyed (``map``) and joined within 2 s, grace
1 s; the model is the join (``tests/windows/test_join_model.py``) fed, per join partition, the
timestamp-merged order of the five source partitions (left ones first on a tie).

``app`` is one named ``jk``, configured from the environment (``JK_BROKER``, ``JK_GUARANTEE``),
for a ``streamkit worker -A tests.runtime.joins:app`` subprocess.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import time
from typing import Any

import streamkit as sk
from streamkit._core.partitioner import partition_for_key
from streamkit.transport import open_log_client
from tests.runtime.test_alignment import _read
from tests.windows.test_join_model import model_join

BASE = int(time.time() * 1000) // 60_000 * 60_000 - 2 * 3_600_000  # recent: no retention deletes it
PARTITIONS = {"left": 3, "right": 2}
JOINED = 3  # the repartition topics take the larger count
WITHIN_MS, GRACE_MS = 2_000, 1_000
KEYS = 7
Record = tuple[int, str, int]  # id, key, timestamp
Inputs = dict[str, list[list[Record]]]  # side -> per source partition, in offset order
Pairs = list[tuple[str, int, Any, Any]]  # key, timestamp, left id, right id
Late = list[tuple[int, str]]  # id, reason


def inputs(n: int, seed: int, *, seconds: int = 240) -> Inputs:
    """``n`` records per side over ``seconds``, each partition in arrival order: out of order by
    up to 5 s (the grace is 1 s), 3% late by 20 to 60 s; timestamps on a 100 ms grid, so that
    records of different partitions and sides tie."""
    rng = random.Random(seed)
    out: Inputs = {}
    ids = iter(range(1_000_000))
    for side, count in PARTITIONS.items():
        out[side] = []
        for _p in range(count):
            arrivals = sorted(rng.randrange(seconds * 10) * 100 for _ in range(n // count))
            part = []
            for t in arrivals:
                ts = t - rng.randrange(50) * 100
                if rng.random() < 0.03:
                    ts -= rng.randrange(20_000, 60_000)
                part.append((next(ids), f"k{rng.randrange(KEYS)}", BASE + max(0, ts)))
            out[side].append(part)
    return out


def merged(records: Inputs) -> list[tuple[str, int, int, str, int]]:
    """(side, source partition, id, key, timestamp) in the timestamp-merged order of the
    source partitions, left ones first (the aligner's order: by stage, then partition)."""
    tagged = [
        [(ts, side, p, i, key) for i, key, ts in part]
        for side in ("left", "right") for p, part in enumerate(records[side])
    ]
    return [(side, p, i, key, ts) for ts, side, p, i, key in heapq.merge(*tagged, key=lambda r: r[0])]


def expected(records: Inputs, how: str) -> tuple[Pairs, Late]:
    """The model's joined pairs and late records: one join per repartition partition, fed its
    records in the merged order."""
    per_partition: dict[int, list[tuple[str, bytes, int, int]]] = {}
    for side, _p, i, key, ts in merged(records):
        raw = json.dumps(key).encode()  # the repartition topics' key serializer
        per_partition.setdefault(partition_for_key(raw, JOINED), []).append((side, raw, ts, i))
    pairs: Pairs = []
    late: Late = []
    for fed in per_partition.values():
        model = model_join(WITHIN_MS, GRACE_MS, how, fed)
        pairs += [(json.loads(k), ts, left, right) for k, ts, left, right in model.outputs]
        late += [(fed[j][3], reason) for j, reason in model.late]
    return sorted(pairs, key=repr), sorted(late)


def make_app(name: str, broker: str, how: str, **settings: Any) -> sk.App:
    app = sk.App(name, broker=broker, **settings)
    left = app.topic(f"{name}-left", key_type=str, value_type=dict, partitions=PARTITIONS["left"])
    right = app.topic(f"{name}-right", key_type=str, value_type=dict, partitions=PARTITIONS["right"])
    out = app.topic(f"{name}-joined", key_type=str, value_type=list, partitions=1)

    def ids(a: Any, b: Any) -> list[Any]:
        return [None if a is None else a["id"], None if b is None else b["id"]]

    by_key = app.stream(right).map(lambda k, v: (v["k"], v))
    app.stream(left).map(lambda k, v: (v["k"], v)).join(
        by_key, ids, within=WITHIN_MS / 1000, grace=GRACE_MS / 1000, how=how
    ).to(out)
    return app


async def preload(url: str, name: str, records: Inputs) -> None:
    client = open_log_client(url)
    await client.start()
    try:
        producer = client.producer()
        await producer.start()
        for side, parts in records.items():
            topic = f"{name}-{side}"
            await client.ensure_topic(topic, len(parts))
            for p, part in enumerate(parts):
                for i, key, ts in part:
                    value = json.dumps({"id": i, "k": key}).encode()
                    wait = producer.send_nowait(topic, p, f"s{i}".encode(), value, ts)
                    if wait is not None:
                        await wait
        await producer.flush()
        await producer.aclose()
    finally:
        await client.aclose()


async def outputs(url: str, name: str, isolation_level: str = "read_uncommitted") -> tuple[Pairs, Late]:
    client = open_log_client(url)
    await client.start()
    try:
        pairs = [
            (r.key.decode(), r.timestamp, *json.loads(r.value))
            for r in await _read(client, f"{name}-joined", isolation_level)
        ]
        late = [
            (json.loads(r.value)["id"], dict(r.headers)["streamkit.reason"].decode())
            for r in await _read(client, f"{name}-late", isolation_level)
        ]
    finally:
        await client.aclose()
    return sorted(pairs, key=repr), sorted(late)



# The app of a ``streamkit worker -A tests.runtime.joins:app`` subprocess.
app = make_app(
    "jk", os.environ.get("JK_BROKER", "file://.streamkit"), "outer",
    processing_guarantee=os.environ.get("JK_GUARANTEE", "at_least_once"), commit_interval=0.2,
)
