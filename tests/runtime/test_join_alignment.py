"""A windowed join after a re-key gives the same answers however its input reached it (issue 22).

Both sides are re-keyed (``map``), so the DSL writes each to a repartition topic and one join
task per partition reads both (``dsl/plan.py``). The case (``joins.py``): the left topic has 3
partitions, the right 2; each partition is out of order by more than the grace, and a few
records are late by far more. The reference is a model: the join
(``tests/windows/test_join_model.py``) fed, per join partition, the records of the
timestamp-merged order of the five source partitions (left partitions first on a tie), the
order the aligner hands them out in (``runtime/alignment.py``). A worker must give the model's
joined pairs and late records when the records were in the log before it started, when they are
fed in real time, when it is stopped in the middle and started again (at-least-once and
exactly-once), on the embedded log and through ``streamkit broker``, and when (exactly-once) it
is killed in the middle. The join task then merges its two inputs in the writers' order and
waits for an empty input its own worker can still write (``runtime/merge.py``); the rule itself
is checked first, against the merged order, whatever the order records reach the inboxes in.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import random
import signal
import subprocess
from collections import Counter
from pathlib import Path

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
from tests.runtime.joins import (
    BASE,
    GRACE_MS,
    JOINED,
    PARTITIONS,
    WITHIN_MS,
    Late,
    Pairs,
    expected,
    inputs,
    make_app,
    merged,
    outputs,
    preload,
)
from tests.runtime.test_alignment import HERE, STREAMKIT, _settled, _state
from tests.support.processes import drain, wait_for_line
from tests.windows.test_join_model import model_join

_names = iter(range(1_000_000))

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
        stamps.sending(("LR"[side], 0), key)
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
        [group] = worker.alignment()
    got = await outputs(log_url, name)
    assert (len(got[0]), len(got[1])) == (len(want[0]), len(want[1]))
    assert got == want
    # The case has pairs to get right; that their order matters is the next test's point (a
    # join that merges by timestamp alone answers differently). Late records are few since
    # joins follow Kafka Streams 4.4 (a record pairs with whatever the other side still keeps).
    assert len(want[0]) > 100
    # /status shows the five source tasks of both re-keys in one group, and the three join
    # tasks merging what they write.
    assert len(group["tasks"]) == sum(PARTITIONS.values())
    assert [r["task"] for r in group["readers"]] == [f"{name}-joined[{p}]" for p in range(JOINED)], group


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
                # Under exactly-once the writers' last records become visible to the join
                # (read_committed) only with their transaction's commit: a worker may look
                # settled in between. Give it the commits it needs, then compare.
                for _ in range(100):
                    if await outputs(log_url, name, isolation) == want:
                        break
                    await asyncio.sleep(0.1)
    got = await outputs(log_url, name, isolation)
    assert got == want, _differences(got, want)


async def test_exactly_once_killed_in_the_middle_gives_the_same_answers(tmp_path: Path) -> None:
    """A ``streamkit worker`` subprocess SIGKILLed after its first commits, then run to the
    end: its open transactions are aborted, and the restart (a new nonce, nothing of its own in
    flight) takes what the killed one committed from the log."""
    url = f"file://{tmp_path / 'log'}"
    records = inputs(N, seed=3)
    want = expected(records, "outer")
    await preload(url, "jk", records)  # the subprocess's app (``joins.app``)
    env = {**os.environ, "JK_BROKER": url, "JK_GUARANTEE": "exactly_once", "PYTHONPATH": f"{HERE.parent.parent}"}
    rng = random.Random()
    for run in range(2):
        seen: list[str] = []
        proc = subprocess.Popen(
            [STREAMKIT, "worker", "-A", "tests.runtime.joins:app", "--progress-interval", "0"],
            env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
        )
        try:
            await wait_for_line(proc, r"assigned ", seen)
            if run == 0:
                await asyncio.sleep(rng.uniform(0.3, 0.8))
                proc.send_signal(signal.SIGKILL)
            else:
                for _ in range(600):
                    if await outputs(url, "jk", "read_committed") == want:
                        break
                    await asyncio.sleep(0.1)
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        drain(proc, seen)
    assert await outputs(url, "jk", "read_committed") == want


async def test_silent_partitions_do_not_hold_a_live_join_back(tmp_path: Path) -> None:
    """With the default ``max_task_idle_ms=0``, source partitions with nothing to say (here four
    of five) are idle at once: the join task does not wait for them, and pairs a left and a
    right record as they come, well before the poll and fetch timeouts add up to seconds."""
    url = f"file://{tmp_path / 'log'}"
    name = "jsilent"
    app = make_app(name, url, "inner")
    left, right = app.topics[f"{name}-left"], app.topics[f"{name}-right"]
    loop = asyncio.get_running_loop()
    async with Worker(app, state_dir=_state(tmp_path, name)) as worker:
        await _settled(worker)
        for i in range(3):
            ts = BASE + 10_000 * i
            started = loop.time()
            await (await left.send(key=f"s{2 * i}", value={"id": 2 * i, "k": "k1"}, partition=0, timestamp=ts))
            await (await right.send(key=f"s{2 * i + 1}", value={"id": 2 * i + 1, "k": "k1"}, partition=0, timestamp=ts))
            while len((await outputs(url, name))[0]) < i + 1:
                assert loop.time() - started < 2.0, f"pair {i} not joined within 2 s"
                await asyncio.sleep(0.01)
    pairs, late = await outputs(url, name)
    assert [(key, left_id, right_id) for key, _ts, left_id, right_id in pairs] == [("k1", 0, 1), ("k1", 2, 3), ("k1", 4, 5)]
    assert late == []


def _differences(got: tuple[Pairs, Late], want: tuple[Pairs, Late]) -> str:
    """What a run wrote that the model does not, and the reverse (pairs, then late records)."""
    out = []
    for what, a, b in (("pairs", got[0], want[0]), ("late", got[1], want[1])):
        extra, missing = Counter(map(repr, a)) - Counter(map(repr, b)), Counter(map(repr, b)) - Counter(map(repr, a))
        out.append(f"{what}: {sum(extra.values())} extra {sorted(extra)[:6]}, {sum(missing.values())} missing {sorted(missing)[:6]}")
    return "; ".join(out)
