"""Windowed stream-stream joins in a real ``streamkit worker`` subprocess that is SIGKILLed in
the middle of the input, against the reference model of ``test_join_model.py``.

The app (``join_kill_app.py``) joins one topic with itself, filtered by side, inner, left and
outer at once. The input is appended record by record through a running worker (which
processes them as they come and commits every 0.2 s); at two random cuts the worker is
SIGKILLed a random moment after the cut's last record (often with a transaction open over the
latest ones) and a new worker started; the last one runs to the end and stops cleanly.

* ``exactly_once``: the outputs read ``read_committed`` are exactly the model's, in order
  (joined pairs and unpaired emissions), and so are the late records: the killed runs'
  outputs, join-state changes and offsets were aborted together, and the restarted run redid
  them once from the committed state.
* ``at_least_once``, same kills: nothing the model emits is lost and every record the model
  calls late is routed late, but the records past the last commit are processed again
  against a join state that already holds them, so pairs are emitted twice and a record
  seen again once stream time moved past it is also routed late: the difference the setting
  makes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from join_kill_app import GRACE_MS, HOWS, WITHIN_MS
from test_join_model import model_join

from streamkit._core.types import TopicPartition
from streamkit.transport.connect import open_log_client
from tests.support.processes import finish, wait_until_assigned

HERE = Path(__file__).resolve().parent
STREAMKIT = str(Path(sys.executable).parent / "streamkit")
APP_ID = "jkill"
BASE = 1_700_000_000_000
TIMEOUT_S = 60.0
PAUSE_S = 0.01  # between two input records while a worker runs
COMMIT_S = 0.2  # the workers' commit interval: a kill finds some of a part committed, often not all

Input = list[tuple[str, str, int]]  # side, key, timestamp (ms after BASE)
Out = tuple[str, int, Any, Any]  # key, timestamp (ms after BASE), left id, right id


async def produce(url: str, records: Input, first_id: int, pause_s: float = 0.0) -> None:
    """Append ``records`` to ``events``, numbered from ``first_id``, each acknowledged before
    the next, ``pause_s`` apart (so that a running worker takes them a few at a time)."""
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic("events", 1)
        producer = client.producer()
        await producer.start()
        for i, (side, key, ts) in enumerate(records, start=first_id):
            value = json.dumps({"side": side, "id": i}).encode()
            await producer.send("events", key.encode(), value, partition=0, timestamp_ms=BASE + ts)
            if pause_s:
                await asyncio.sleep(pause_s)
        await producer.aclose()
    finally:
        await client.aclose()


async def read_topic(url: str, topic: str, isolation_level: str) -> list[Any]:
    """Every record of ``topic`` (partition 0) in offset order, empty if it does not exist."""
    client = open_log_client(url)
    await client.start()
    reader = client.reader(isolation_level=isolation_level)
    out: list[Any] = []
    try:
        tp = TopicPartition(topic, 0)
        try:
            offset, end = await reader.bounds(tp)
        except Exception:  # never created: the worker wrote nothing there
            return out
        while offset < end:
            chunk = await reader.read(tp, offset, 10_000)
            if chunk.next_offset <= offset:
                break
            out.extend(chunk.records)
            offset = chunk.next_offset
    finally:
        await reader.aclose()
        await client.aclose()
    return out


async def client_ready(url: str) -> None:
    """Create ``events`` before any worker runs (the worker subscribes to it)."""
    await produce(url, [], 0)


async def committed(url: str) -> int:
    client = open_log_client(url)
    await client.start()
    consumer = client.consumer(APP_ID)
    try:
        return await consumer.committed(TopicPartition("events", 0)) or 0
    finally:
        await consumer.aclose()
        await client.aclose()


def start_worker(tmp: Path, env: dict[str, str], guarantee: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [STREAMKIT, "worker", "-A", "join_kill_app:app", "--progress-interval", "0",
         "--processing-guarantee", guarantee, "--state-dir", str(tmp / "state")],
        env=env, cwd=tmp, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )


async def wait_for_commit(url: str, proc: subprocess.Popen[str], offset: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while await committed(url) < offset:
        assert proc.poll() is None, f"the worker exited ({proc.returncode}) before committing offset {offset}"
        assert time.monotonic() < deadline, f"offset {offset} not committed in {TIMEOUT_S} s"
        await asyncio.sleep(0.02)


async def run_with_kills(records: Input, cuts: tuple[int, int], guarantee: str, rng: random.Random) -> dict[str, Any]:
    """Feed ``records`` to running workers; SIGKILL the worker a random moment after the
    record before each cut was appended, start a new one, and let the last one finish. The
    outputs and late records (read committed under ``exactly_once``), and the committed
    offset of the input after each kill."""
    with tempfile.TemporaryDirectory(prefix="join-kill-") as tmp_name:
        tmp = Path(tmp_name)
        url = f"file://{tmp / 'log'}"
        env = {**os.environ, "JKILL_BROKER": url, "JKILL_GUARANTEE": guarantee, "JKILL_COMMIT_S": str(COMMIT_S),
               # The tree under test first: the venv's own streamkit may be another checkout's.
               "PYTHONPATH": f"{HERE}{os.pathsep}{HERE.parent.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        await client_ready(url)
        lo = 0
        at_kill: list[int] = []
        for hi in (*cuts, len(records)):
            proc = start_worker(tmp, env, guarantee)
            try:
                await wait_until_assigned(proc, TIMEOUT_S)
                # Through the running worker, a few records per fetch: it processes and commits
                # as they come, so a kill finds a transaction open over the latest ones.
                await produce(url, records[lo:hi], lo, PAUSE_S)
                if hi < len(records):
                    await asyncio.sleep(rng.uniform(0.0, 0.1))  # a random moment, not a condition
                    finish(proc, signal.SIGKILL, TIMEOUT_S)
                else:
                    await wait_for_commit(url, proc, len(records))
                    finish(proc, signal.SIGTERM, TIMEOUT_S)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if hi < len(records):
                at_kill.append(await committed(url))
            lo = hi
        isolation = "read_committed" if guarantee == "exactly_once" else "read_uncommitted"
        result: dict[str, Any] = {"at_kill": at_kill}
        for how in HOWS:
            result[how] = [
                ((r.key or b"").decode(), r.timestamp - BASE, *json.loads(r.value))
                for r in await read_topic(url, f"joined-{how}", isolation)
            ]
            result[f"written-{how}"] = len(await read_topic(url, f"joined-{how}", "read_uncommitted"))
        late = await read_topic(url, f"{APP_ID}-late", isolation)
        for how in HOWS:
            table = f"joined-{how}-join-{how}".encode()
            result[f"late-{how}"] = [
                (json.loads(r.value)["id"], dict(r.headers)["streamkit.reason"].decode())
                for r in late
                if dict(r.headers)["streamkit.table"] == table
            ]
        return result


def expected(records: Input, how: str) -> tuple[list[Out], list[tuple[int, str]]]:
    model = model_join(WITHIN_MS, GRACE_MS, how, [(s, k.encode(), ts, i) for i, (s, k, ts) in enumerate(records)])
    return [(k.decode(), ts, left, right) for k, ts, left, right in model.outputs], model.late


@st.composite
def inputs(draw: st.DrawFn) -> tuple[Input, tuple[int, int], int]:
    """About 100 records over a few hundred ms, mostly in order, some late; two cuts; a seed."""
    n = draw(st.integers(80, 120))
    t, records = 0, []
    for _ in range(n):
        t += draw(st.integers(0, 4))
        ts = max(0, t - draw(st.sampled_from([0, 0, 0, 0, 3, 9, 20])))
        records.append((draw(st.sampled_from(["left", "right"])), draw(st.sampled_from(["a", "b", "c"])), ts))
    first = draw(st.integers(30, n // 2))
    return records, (first, draw(st.integers(first + 30, n - 5))), draw(st.integers(0, 1 << 30))


# Each example runs three workers: few examples, and no shrinking (seconds per step).
SETTINGS = settings(
    max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


@SETTINGS
@given(case=inputs())
def test_exactly_once_joins_match_the_model_across_sigkills(case: tuple[Input, tuple[int, int], int]) -> None:
    records, cuts, seed = case
    result = asyncio.run(run_with_kills(records, cuts, "exactly_once", random.Random(seed)))
    for how in HOWS:
        outputs, late = expected(records, how)
        assert result[how] == outputs, f"{how}, committed at the kills {result['at_kill']}"
        assert result[f"late-{how}"] == late, how


@SETTINGS
@given(case=inputs())
def test_at_least_once_joins_lose_nothing_across_sigkills(case: tuple[Input, tuple[int, int], int]) -> None:
    records, cuts, seed = case
    result = asyncio.run(run_with_kills(records, cuts, "at_least_once", random.Random(seed)))
    for how in HOWS:
        outputs, late = expected(records, how)
        got = Counter(result[how])
        missing = Counter(outputs) - got
        assert not missing, f"{how}: lost {sorted(missing.elements())}, committed at the kills {result['at_kill']}"
        assert set(late) <= set(result[f"late-{how}"]), how
