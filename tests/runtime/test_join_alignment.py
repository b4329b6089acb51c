"""A windowed join after a re-key gives the same answers however its input reached it (issue 22).

Both sides are re-keyed (``map``), so the DSL writes each to a repartition topic and one join
task per partition reads both (``dsl/plan.py``). The left topic has 3 partitions, the right 2;
each partition is out of order by more than the grace, and a few records are late by far more.
The reference is a model: the join (``tests/windows/test_join_model.py``) fed, per join
partition, the records of the timestamp-merged order of the five source partitions (left
partitions first on a tie), the order the aligner hands them out in (``runtime/alignment.py``).
A worker must give the model's joined pairs and late records when the records were in the log
before it started, when they are fed in real time, and when it is stopped in the middle and
started again (at-least-once and exactly-once), on the embedded log and through
``streamkit broker``. The join task then merges its two inputs in the writers' order and waits
for an empty input its own worker can still write (``runtime/merge.py``).
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit._core.partitioner import partition_for_key
from streamkit._core.types import TopicPartition
from streamkit.log.records import Record as LogRecord
from streamkit.runtime import Worker
from streamkit.runtime.alignment import Aligner
from streamkit.runtime.inbox import Inbox
from streamkit.runtime.merge import InputMerge, MergePlan, Stamps
from streamkit.transport import open_log_client
from tests.runtime.test_alignment import _read, _settled, _state
from tests.windows.test_join_model import model_join

BASE = int(time.time() * 1000) // 60_000 * 60_000 - 2 * 3_600_000  # recent: no retention deletes it
PARTITIONS = {"left": 3, "right": 2}
JOINED = 3  # the repartition topics take the larger count
WITHIN_MS, GRACE_MS = 2_000, 1_000
KEYS = 7
_names = iter(range(1_000_000))

Record = tuple[int, str, int]  # id, key, timestamp
Inputs = dict[str, list[list[Record]]]  # side -> per source partition, in offset order
Pairs = list[tuple[str, int, Any, Any]]  # key, timestamp, left id, right id
Late = list[tuple[int, str]]  # id, reason


# -- the rule ---------------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    writers=st.lists(st.lists(st.integers(0, 30), max_size=8), min_size=2, max_size=4),
    steps=st.lists(st.integers(0, 3), min_size=10, max_size=120),
)
def test_the_merge_takes_the_writers_order_whenever_their_records_arrive(writers: list[list[int]], steps: list[int]) -> None:
    """Writers 0, 2, .. write the left input, 1, 3, .. the right one, handing records out in the
    timestamp-merged order (the aligner's); their records reach the reader's inboxes in
    arbitrary pieces and the reader takes whenever it likes: it takes them in the merged order."""
    aligner = Aligner("sim", drift_ms=0, idle_ms=0, now_ms=lambda: 0)
    order = sorted(range(len(writers)), key=lambda w: (w % 2, w))  # by (rank, partition)
    at = [0] * len(writers)
    members = {}
    for w in order:
        member = aligner.join(f"w[{w}]", (w % 2, w), [], None)
        member.next_ts = (lambda w=w: writers[w][at[w]] if at[w] < len(writers[w]) else None)  # type: ignore[misc]
        members[w] = member
    stamps = Stamps({"L", "R"})
    app = sk.App("merge-sim")
    inboxes = [Inbox(TopicPartition(t, 0), app.topic(t), asyncio.Event()) for t in ("L", "R")]
    for inbox in inboxes:
        inbox.on_put = stamps.count_arrivals
    merge = InputMerge(MergePlan(aligner, stamps, {"L": frozenset({0}), "R": frozenset({1})}), inboxes, "join[0]")
    handed = list(heapq.merge(*[[(ts, w) for ts in writers[w]] for w in order], key=lambda r: r[0]))
    pending: list[list[LogRecord]] = [[], []]
    offsets = [0, 0]
    taken: list[tuple[int, int]] = []

    def hand_out() -> None:
        ts, w = handed[sum(at)]
        member = members[w]
        key = ts if member.stream_time is None else max(member.stream_time, ts)
        member.stream_time = key
        at[w] += 1
        side = w % 2
        stamps.sent[("LR"[side], 0)] = stamps.sent.get(("LR"[side], 0), 0) + 1
        pending[side].append(LogRecord(offsets[side], ts, str(w).encode(), None, stamps.header(key)))
        offsets[side] += 1

    def take() -> None:
        got = merge.take()
        if got is not None:
            taken.extend((r.timestamp, int(r.key or b"")) for r in got[0])

    def deliver(side: int) -> None:
        if pending[side]:
            inboxes[side].put(pending[side])
            pending[side] = []

    for step in steps:
        if step == 0 and sum(at) < len(handed):
            hand_out()
        elif step in (1, 2):
            deliver(step - 1)
        else:
            take()
    while sum(at) < len(handed):
        hand_out()
    deliver(0)
    deliver(1)
    while len(taken) < len(handed):
        before = len(taken)
        take()
        assert len(taken) > before, "the merge waits with every record arrived and every writer done"
    assert taken == handed


# -- a worker -----------------------------------------------------------------------------------


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


N = 600  # per side


@pytest.mark.parametrize("how", ["inner", "outer"])
async def test_catching_up_on_history_gives_the_models_pairs_and_late_records(
    log_url: str, tmp_path: Path, how: str
) -> None:
    records = inputs(N, seed=22)
    want = expected(records, how)
    name = f"jc{next(_names)}"
    await preload(log_url, name, records)
    async with Worker(make_app(name, log_url, how), state_dir=_state(tmp_path, name)) as worker:
        await _settled(worker)
    got = await outputs(log_url, name)
    assert (len(got[0]), len(got[1])) == (len(want[0]), len(want[1]))
    assert got == want
    # The case is one where the order matters: pairs, and late records past the true 3%.
    assert len(want[0]) > 100 and len(want[1]) > 0.05 * 2 * N


async def test_the_model_differs_from_a_join_that_merges_by_timestamp_alone() -> None:
    """The reference is not trivially met: the same records merged per join partition by
    their own timestamps (what the join task did without the writers' order) answer
    differently, and the pages of the repartition topics hold records out of order."""
    records = inputs(N, seed=22)
    want = expected(records, "inner")
    per_partition: dict[int, dict[str, list[tuple[int, str, bytes, int, int]]]] = {}
    for side, _p, i, key, ts in merged(records):
        raw = json.dumps(key).encode()
        per_partition.setdefault(partition_for_key(raw, JOINED), {}).setdefault(side, []).append((ts, side, raw, ts, i))
    pairs: Pairs = []
    for sides in per_partition.values():
        fed = [(s, k, t, i) for _ts, s, k, t, i in heapq.merge(sides["left"], sides["right"], key=lambda r: r[0])]
        pairs += [(json.loads(k), ts, a, b) for k, ts, a, b in model_join(WITHIN_MS, GRACE_MS, "inner", fed).outputs]
    assert sorted(pairs, key=repr) != want[0]


async def test_fed_in_real_time_gives_the_same_pairs_and_late_records(log_url: str, tmp_path: Path) -> None:
    """The records arrive while the worker runs, in the order the merge takes them (each
    acknowledged before the next is sent)."""
    records = inputs(240, seed=5)
    want = expected(records, "inner")
    name = f"jl{next(_names)}"
    app = make_app(name, log_url, "inner", max_task_idle_ms=2000)
    topics = {side: app.topics[f"{name}-{side}"] for side in PARTITIONS}
    async with Worker(app, state_dir=_state(tmp_path, name)) as worker:
        for side, p, i, key, ts in merged(records):
            await (await topics[side].send(key=f"s{i}", value={"id": i, "k": key}, partition=p, timestamp=ts))
        await _settled(worker)
    assert await outputs(log_url, name) == want


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_worker_stopped_in_the_middle_and_started_again_gives_the_same_answers(
    log_url: str, tmp_path: Path, guarantee: str
) -> None:
    records = inputs(N, seed=11)
    want = expected(records, "outer")
    name = f"jr{next(_names)}"
    await preload(log_url, name, records)
    isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
    for run in range(2):
        app = make_app(name, log_url, "outer", processing_guarantee=guarantee, commit_interval=0.1)
        async with Worker(app, state_dir=_state(tmp_path, name)) as worker:
            if run == 0:  # stopped once the join committed a third of its input
                while sum(o for tp, o in worker.committed.items() if tp.topic.endswith("-repartition")) < 2 * N // 3:
                    await asyncio.sleep(0.005)
            else:
                await _settled(worker)
    assert await outputs(log_url, name, isolation) == want
