"""Event-time alignment across a worker's tasks (issue 22, ``runtime/alignment.py``).

The rule itself, against ``heapq.merge``: whatever order the tasks ask in, a drift of 0 hands
the records out in the timestamp-merged order; a drift of d keeps every record within d of
the slowest task's next one.

Then issue 22's case (``pageviews.py``: four partitions of page views out of order, some late
by minutes, re-keyed by user and counted per minute with a grace smaller than the disorder,
closed windows emitted), on the embedded log and through ``streamkit broker``: records already
in the log before the worker starts, fed in real time, the worker stopped and started again
in the middle, and (exactly-once) killed in the middle. Each gives the model's late records and
closed windows exactly: the model's windowed task is fed the merged order, which is what the
backfill folds (``tests/spark/test_alignment_backfill.py`` holds the backfill to the same
model). With alignment off, the same catch-up sends most records to the late topic.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit._core.types import TopicPartition
from streamkit.runtime import Worker
from streamkit.runtime.alignment import Aligner, Member
from streamkit.transport import open_log_client
from streamkit.transport.base import LogClient
from tests.runtime.pageviews import (
    PARTITIONS,
    Closed,
    Late,
    Views,
    expected,
    make_app,
    merged,
    page_views,
)
from tests.support.processes import drain, wait_for_line

HERE = Path(__file__).resolve().parent
STREAMKIT = str(Path(sys.executable).parent / "streamkit")
_names = iter(range(1_000_000))


# -- the rule ---------------------------------------------------------------------------------


def _simulate(inputs: list[list[int]], drift: int, choices: list[int]) -> tuple[list[tuple[int, int]], list[str]]:
    """Members asking for their next record in the order ``choices`` picks (a member held
    back asks again later); what they hand out, as (member, timestamp), and broken bounds."""
    aligner = Aligner("sim", drift_ms=drift, idle_ms=0, now_ms=lambda: 0)
    at = [0] * len(inputs)
    members: list[Member] = []
    for i, records in enumerate(inputs):
        member = aligner.join(f"t[{i}]", (0, i), [], None)
        member.next_ts = (lambda i=i, records=records: records[at[i]] if at[i] < len(records) else None)  # type: ignore[misc]
        members.append(member)
    out: list[tuple[int, int]] = []
    broken: list[str] = []
    pick = iter(choices)
    turn = 0
    while any(at[i] < len(r) for i, r in enumerate(inputs)):
        live = [i for i, r in enumerate(inputs) if at[i] < len(r)]
        turn += 1  # once the choices run out, each asks in turn
        i = live[next(pick, turn) % len(live)]
        member = members[i]
        ts = inputs[i][at[i]]
        key = ts if member.stream_time is None else max(member.stream_time, ts)
        if not aligner.admit(member, key):
            continue
        others = [k for j, m in enumerate(members) if j != i and (k := m.next_key()) is not None]
        if drift and others and key > min(others) + drift:
            broken.append(f"t[{i}] handed out {key} while another waits at {min(others)}")
        member.stream_time = key
        at[i] += 1
        out.append((i, ts))
        if at[i] == len(inputs[i]):
            aligner.ran_out(member)
    return out, broken


timestamps = st.lists(st.lists(st.integers(0, 50), max_size=8), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(inputs=timestamps, choices=st.lists(st.integers(0, 3), max_size=200))
def test_a_drift_of_zero_hands_records_out_in_the_merged_order_whoever_asks(inputs: list[list[int]], choices: list[int]) -> None:
    got, _ = _simulate(inputs, 0, choices)
    want = list(heapq.merge(*[[(i, ts) for ts in records] for i, records in enumerate(inputs)], key=lambda r: r[1]))
    assert got == want


@settings(max_examples=200, deadline=None)
@given(inputs=timestamps, choices=st.lists(st.integers(0, 3), max_size=200), drift=st.integers(1, 20))
def test_a_drift_keeps_every_record_within_it_of_the_slowest_task(inputs: list[list[int]], choices: list[int], drift: int) -> None:
    got, broken = _simulate(inputs, drift, choices)
    assert not broken
    assert sorted(got) == sorted((i, ts) for i, records in enumerate(inputs) for ts in records)


# -- issue 22's case --------------------------------------------------------------------------


async def _preload(url: str, views: Views, topic: str) -> None:
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic(topic, PARTITIONS)
        producer = client.producer()
        await producer.start()
        for p, part in enumerate(views):
            for user, ts in part:
                wait = producer.send_nowait(topic, p, user.encode(), json.dumps({"user": user}).encode(), ts)
                if wait is not None:
                    await wait
        await producer.flush()  # raises what the log refused
        await producer.aclose()
    finally:
        await client.aclose()


async def _read(client: LogClient, topic: str, isolation_level: str) -> list[Any]:
    reader = client.reader(isolation_level=isolation_level)
    out: list[Any] = []
    try:
        partitions = await client.partition_count(topic) or 0
        for p in range(partitions):
            offset = 0
            while True:
                chunk = await reader.read(TopicPartition(topic, p), offset, 10_000)
                if chunk.next_offset <= offset:
                    break
                out.extend(chunk.records)
                offset = chunk.next_offset
    finally:
        await reader.aclose()
    return out


async def _outputs(url: str, app_id: str, isolation_level: str = "read_uncommitted") -> tuple[Late, Closed]:
    client = open_log_client(url)
    await client.start()
    try:
        late = [
            (json.loads(r.value)["user"], int(dict(r.headers)["streamkit.timestamp"]))
            for r in await _read(client, f"{app_id}-late", isolation_level)
        ]
        closed = []
        for r in await _read(client, f"{app_id}-closed", isolation_level):
            body = json.loads(r.value)
            closed.append((r.key.decode(), body["window_start"], body["window_end"], body["value"]))
    finally:
        await client.aclose()
    return sorted(late), sorted(closed)


async def _settled(worker: Worker, timeout: float = 120.0) -> None:
    """Until the worker processed everything: settled three times in a row, 0.1 s apart (a
    high watermark read over the wire may lag a moment behind the repartition topic), with
    no transaction open (under exactly-once, the re-key's records in one are invisible yet
    to the windowed tasks, which look caught up): a commit, then look again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        streak = 0
        while streak < 3:
            assert loop.time() < deadline, "the worker did not process its input in time"
            streak = streak + 1 if await worker.settle() else 0
            await asyncio.sleep(0.1)
        if worker.committer.open_transactions == 0:
            return
        await worker.commit()


def _differences(got: tuple[Late, Closed], want: tuple[Late, Closed]) -> str:
    """What differs, in short: the records and windows missing and extra, a few of each."""
    lines = []
    for what, g, w in (("late", got[0], want[0]), ("closed", got[1], want[1])):
        missing = sorted((Counter(w) - Counter(g)).elements())
        extra = sorted((Counter(g) - Counter(w)).elements())
        if missing or extra:
            lines.append(f"{what}: {len(g)} vs {len(w)}; missing {len(missing)} {missing[:6]}; extra {len(extra)} {extra[:6]}")
    return "\n".join(lines)


def _state(tmp_path: Path, name: str) -> str:
    return str(tmp_path / "state" / name)


N = 4000


async def test_catching_up_on_history_gives_the_merged_orders_windows_and_late_records(log_url: str, tmp_path: Path) -> None:
    views = page_views(N, seed=22)
    want_late, want_closed = expected(views)
    name = f"pv{next(_names)}"
    app, _views, _closed = make_app(name, log_url)
    await _preload(log_url, views, f"{name}-views")
    async with Worker(app, state_dir=_state(tmp_path, name)) as worker:
        await _settled(worker)
        groups = worker.alignment()
    late, closed = await _outputs(log_url, name)
    assert (len(late), len(closed)) == (len(want_late), len(want_closed))
    assert late == want_late
    assert closed == want_closed
    # Most views are on time (the input is 2% late, plus disorder past the grace), and /status
    # shows the group that was aligned: the four source tasks of the re-key. (The windowed
    # tasks write the windows topic to a stage that only forwards it: no stream time there.)
    assert len(late) < N * 0.25
    [group] = groups
    assert len(group["tasks"]) == PARTITIONS and group["drift_ms"] == 0 and group["waits"] > 0


async def test_without_alignment_catching_up_turns_most_records_late(tmp_path: Path) -> None:
    """The test above can fail: each task running through its own backlog is the bug."""
    url = f"file://{tmp_path / 'log'}"
    views = page_views(N, seed=22)
    want_late, _ = expected(views)
    name = "pvoff"
    app, _views, _closed = make_app(name, url, max_task_drift_ms=None)
    await _preload(url, views, f"{name}-views")
    async with Worker(app, state_dir=_state(tmp_path, "off")) as worker:
        await _settled(worker)
        assert worker.alignment() == []
    late, _closed_windows = await _outputs(url, "pvoff")
    assert len(late) > 3 * len(want_late)


async def test_fed_in_real_time_gives_the_same_windows_and_late_records(log_url: str, tmp_path: Path) -> None:
    """The views arrive while the worker runs, in the order the merge takes them (each
    acknowledged before the next is sent). A task that ran out holds the others back until
    its next record comes (``max_task_idle_ms``): over the wire the consumer learns only with
    its next fetch that a partition has more, so that one would look caught up."""
    views = page_views(600, seed=5)
    want = expected(views)
    name = f"pvlive{next(_names)}"
    app, source, _closed = make_app(name, log_url, max_task_idle_ms=2000)
    async with Worker(app, state_dir=_state(tmp_path, name)) as worker:
        for p, user, ts in merged(views):
            await (await source.send(key=user, value={"user": user}, partition=p, timestamp=ts))
        await _settled(worker)
    assert await _outputs(log_url, name) == want


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_worker_stopped_in_the_middle_and_started_again_gives_the_same_answers(
    log_url: str, tmp_path: Path, guarantee: str
) -> None:
    views = page_views(N, seed=11)
    want = expected(views)
    name = f"pvcut{next(_names)}"
    await _preload(log_url, views, f"{name}-views")
    isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
    cuts = []
    for _run in range(2):
        app, _views, _closed = make_app(name, log_url, processing_guarantee=guarantee, commit_interval=0.1)
        async with Worker(app, state_dir=_state(tmp_path, name)) as worker:
            if _run == 0:  # stopped once a third of the views is committed
                while sum(o for tp, o in worker.committed.items() if tp.topic == f"{name}-views") < N // 3:
                    await asyncio.sleep(0.005)
                restored = None
            else:
                # (a task's member exists once it started: after it restored its stream time)
                while len(sources := [
                    t for t in worker.tasks.values() if t.agent.topics[0].name == f"{name}-views" and t.member is not None
                ]) < PARTITIONS:
                    await asyncio.sleep(0.01)
                restored = {repr(t): t.restored_stream_time for t in sources}
                await _settled(worker)
            cuts.append(restored)
    got = await _outputs(log_url, name, isolation)
    assert got == want, _differences(got, want)
    # The second run's source tasks started from the stream times the first run committed.
    assert len(cuts[1] or ()) == PARTITIONS
    assert cuts[1] and all(ts is not None for ts in cuts[1].values()), cuts


async def test_exactly_once_killed_in_the_middle_gives_the_same_answers(tmp_path: Path) -> None:
    """A ``streamkit worker`` subprocess SIGKILLed after its first commits, then run to the
    end: its open transactions are aborted and the restart redoes them in the same order."""
    url = f"file://{tmp_path / 'log'}"
    views = page_views(N, seed=3)
    want = expected(views)
    name = "pv"  # the subprocess's app (``pageviews.app``)
    await _preload(url, views, f"{name}-views")
    env = {**os.environ, "PV_BROKER": url, "PV_GUARANTEE": "exactly_once", "PYTHONPATH": f"{HERE.parent.parent}"}
    rng = random.Random()
    for run in range(2):
        seen: list[str] = []
        proc = subprocess.Popen(
            [STREAMKIT, "worker", "-A", "tests.runtime.pageviews:app", "--progress-interval", "0"],
            env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
        )
        try:
            await wait_for_line(proc, r"assigned ", seen)
            if run == 0:
                await asyncio.sleep(rng.uniform(0.3, 0.8))
                proc.send_signal(signal.SIGKILL)
            else:
                for _ in range(600):
                    _late, closed = await _outputs(url, "pv", "read_committed")
                    if len(closed) >= len(want[1]):
                        break
                    await asyncio.sleep(0.1)
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        drain(proc, seen)
    assert await _outputs(url, "pv", "read_committed") == want


# -- idle partitions --------------------------------------------------------------------------


async def test_an_empty_partition_holds_the_others_back_no_longer_than_max_task_idle_ms(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'log'}"
    app = sk.App("idle", broker=url, max_task_idle_ms=600)
    source = app.topic("in", key_type=str, value_type=int, partitions=2)
    # A reduce (its answer depends on the order): the re-key's tasks align.
    counts = app.stream(source).group_by(lambda v: f"k{v}").reduce("counts", lambda a, v: a + v, key_type=str, value_type=int)
    loop = asyncio.get_running_loop()
    async with Worker(app, state_dir=_state(tmp_path, "idle")) as worker:
        await _settled(worker)
        # Partition 1 gets a record and runs out right after it; partition 0's next record,
        # stamped later, waits for partition 1 (it could still get an earlier one) for 0.6 s.
        await (await source.send(key="b", value=2, partition=1, timestamp=1_000))
        while counts.get("k2") != 2:
            await asyncio.sleep(0.005)
        ran_out = loop.time()
        await (await source.send(key="a", value=1, partition=0, timestamp=2_000))
        while counts.get("k1") != 1:
            await asyncio.sleep(0.005)
        waited = loop.time() - ran_out
        [group] = worker.alignment()
        states = {t["task"]: t["state"] for t in group["tasks"]}
        # A record for partition 1 makes it hold the others back again.
        await (await source.send(key="b", value=2, partition=1, timestamp=3_000))
        while counts.get("k2") != 4:
            await asyncio.sleep(0.005)
    assert 0.5 <= waited < 5.0, waited
    assert [state for task, state in states.items() if task.endswith("[1]")] == ["idle"], states


async def test_by_default_a_caught_up_empty_partition_holds_nobody_back(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'log'}"
    app = sk.App("idle0", broker=url)
    source = app.topic("in", key_type=str, value_type=int, partitions=2)
    # A reduce (its answer depends on the order): the re-key's tasks align.
    counts = app.stream(source).group_by(lambda v: f"k{v}").reduce("counts", lambda a, v: a + v, key_type=str, value_type=int)
    loop = asyncio.get_running_loop()
    async with Worker(app, state_dir=_state(tmp_path, "idle0")) as worker:
        await _settled(worker)
        sent = loop.time()
        await (await source.send(key="a", value=1, partition=0, timestamp=1_000))
        while counts.get("k1") != 1:
            await asyncio.sleep(0.02)
        waited = loop.time() - sent
    assert waited < 0.5, waited


async def test_only_pipelines_whose_answers_depend_on_the_order_align(tmp_path: Path) -> None:
    """A count or a sum after a re-key, and a stage that only forwards a table's stream, keep no
    stream time: their writers run unpaced (alignment costs turns between the tasks)."""
    url = f"file://{tmp_path / 'log'}"
    app = sk.App("which", broker=url)
    source = app.topic("in", key_type=str, value_type=int, partitions=2)
    app.stream(source).group_by(lambda v: f"k{v}", name="c").count("counted", key_type=str, value_type=int)
    app.stream(source).group_by(lambda v: f"k{v}", name="r").reduce("reduced", max, key_type=str, value_type=int)
    async with Worker(app, state_dir=_state(tmp_path, "which")) as worker:
        groups = worker.alignment()
    assert [g["agents"] for g in groups] == ["reduced-r"], groups
