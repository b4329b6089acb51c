"""The reference models of ``test_reference_model.py`` against a real ``streamkit worker``
subprocess that is stopped in the middle of the input: cleanly (SIGTERM) or by SIGKILL.

The app below (also the module the subprocess runs, ``-A test_restart_windows:app``) aggregates the
ids of the records into each window, for each window type, emits every window once when it
closes, and routes late records to ``wrestart-late``. The first part of the input is produced
and the worker started; it is stopped (SIGTERM once it committed everything, or SIGKILL at a
random moment); the rest is produced and a new worker runs to the end and stops cleanly.

* Clean stop: the emitted windows (in order), the late records (in order) and the windows still
  stored at the end are exactly the model's.
* SIGKILL: at-least-once, so records past the last commit are processed again. The aggregate
  is a set of ids, so a record seen twice changes nothing: the windows stored at the end are
  exactly the model's, every window the model closes is emitted with the model's value (a
  window emitted twice carries the same value), and nothing else; the late topic holds every
  record the model calls late, plus at most records processed again after the restored state
  had moved past them.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_reference_model import Model, model_session, model_sliding, model_time

import streamkit as sk
from streamkit._core.types import TopicPartition
from streamkit.testing import AppDriver
from streamkit.transport.connect import open_log_client
from streamkit.windows import Hopping, Session, Sliding, Tumbling
from tests.support.processes import finish, wait_until_assigned

HERE = Path(__file__).resolve().parent
STREAMKIT = str(Path(sys.executable).parent / "streamkit")
BASE = 1_700_000_040_000  # a round minute (ms)
APP_ID = "wrestart"
SIZE, STEP, GAP, D, GRACE = 10_000, 4_000, 5_000, 6_000, 2_000  # ms
TIMEOUT_S = 60.0
# The models align windows to time 0 and clip them there (no window starts before 0); the
# engine aligns them to the epoch. BASE is a multiple of SIZE and STEP, and every record is
# at least ORIGIN after BASE, so no window reaches back before BASE and the two agree.
ORIGIN = 3 * SIZE

app = sk.App(
    APP_ID,
    broker=os.environ.get("WRESTART_BROKER", "file://.streamkit"),
    commit_interval=float(os.environ.get("WRESTART_COMMIT_S", "0.2")),
)
clicks = app.topic("clicks", key_type=str, value_type=int, partitions=1)
SPECS: dict[str, Any] = {
    "tumbling": Tumbling(SIZE / 1000, grace=GRACE / 1000),
    "hopping": Hopping(SIZE / 1000, STEP / 1000, grace=GRACE / 1000),
    "session": Session(GAP / 1000, grace=GRACE / 1000),
    "sliding": Sliding(D / 1000, grace=GRACE / 1000),
}
outputs: dict[str, sk.Topic] = {}
tables: dict[str, Any] = {}
for _kind, _spec in SPECS.items():
    outputs[_kind] = app.topic(f"closed-{_kind}", key_type=str, value_type=dict, partitions=1)
    tables[_kind] = (
        app.stream(clicks).group_by_key(name=_kind).window(_spec).aggregate(
            f"ids-{_kind}", list,
            lambda _key, i, ids: sorted({*ids, i}),
            merger=lambda _key, a, b: sorted({*a, *b}),
            key_type=str,
        )
    )
    tables[_kind].to_stream(emit="close").to(outputs[_kind])

Input = list[tuple[str, int]]  # key, ms after BASE


def models(records: Input) -> dict[str, Model]:
    plain = [(k.encode(), ts) for k, ts in records]
    return {
        "tumbling": model_time(SIZE, SIZE, GRACE, plain),
        "hopping": model_time(SIZE, STEP, GRACE, plain),
        "session": model_session(GAP, GRACE, plain),
        "sliding": model_sliding(D, GRACE, plain),
    }


# -- around the subprocess ----------------------------------------------------------------------


async def produce(url: str, records: Input, first_id: int) -> None:
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic("clicks", 1)
        producer = client.producer()
        await producer.start()
        for i, (key, ts) in enumerate(records, start=first_id):
            await producer.send("clicks", key.encode(), str(i).encode(), partition=0, timestamp_ms=BASE + ts)
        await producer.aclose()
    finally:
        await client.aclose()


async def caught_up(url: str) -> bool:
    """The group committed every record of the input and of each internal windows topic."""
    client = open_log_client(url)
    await client.start()
    reader = client.reader()
    consumer = client.consumer(APP_ID)
    try:
        sources = ["clicks", *(f"{APP_ID}-ids-{kind}-windows" for kind in SPECS)]
        for topic in sources:
            tp = TopicPartition(topic, 0)
            try:
                _start, end = await reader.bounds(tp)
            except Exception:  # a windows topic not created yet: nothing was emitted
                continue
            if (await consumer.committed(tp) or 0) < end:
                return False
        return True
    finally:
        await consumer.aclose()
        await reader.aclose()
        await client.aclose()


def start_worker(tmp: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [STREAMKIT, "worker", "-A", "test_restart_windows:app", "--progress-interval", "0",
         "--state-dir", str(tmp / "state")],
        env=env, cwd=tmp, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )


async def wait_for(condition: Any, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not await condition():
        if proc.poll() is not None:
            assert proc.stderr is not None
            raise AssertionError(f"the worker exited ({proc.returncode}) before {what}:\n{proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {TIMEOUT_S} s")
        await asyncio.sleep(0.05)


async def run_with_restart(records: Input, cut: int, kill: bool, rng: random.Random) -> dict[str, Any]:
    """Run the worker over ``records``, stopped after ``cut`` of them; what it wrote."""
    with tempfile.TemporaryDirectory(prefix="windows-restart-") as tmp_name:
        tmp = Path(tmp_name)
        url = f"file://{tmp / 'log'}"
        # The repository too: the worker imports this module, and this module tests.support.
        env = {**os.environ, "WRESTART_BROKER": url, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parents[1])])}
        await produce(url, records[:cut], 0)
        proc = start_worker(tmp, env)
        try:
            await wait_until_assigned(proc, TIMEOUT_S)
            if kill:
                # A random moment of the first run, not a condition: sometimes before the
                # worker read anything, sometimes past some commits, sometimes between two.
                await asyncio.sleep(rng.uniform(0.0, 1.5))
                finish(proc, signal.SIGKILL, TIMEOUT_S)
            else:
                await wait_for(lambda: caught_up(url), proc, "the first part processed")
                finish(proc, signal.SIGTERM, TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        await produce(url, records[cut:], cut)
        proc = start_worker(tmp, env)
        try:
            await wait_until_assigned(proc, TIMEOUT_S)
            await wait_for(lambda: caught_up(url), proc, "the whole input processed")
            finish(proc, signal.SIGTERM, TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # Read back on the same log and state, the worker gone (nothing is left to process).
        async with AppDriver(app, data_dir=str(tmp / "log"), state_dir=str(tmp / "state")) as driver:
            result: dict[str, Any] = {}
            for kind in SPECS:
                result[f"closed-{kind}"] = [
                    (e.key.encode(), e.value["window_start"] - BASE, e.value["window_end"] - BASE, e.value["value"])
                    for e in await driver.read(outputs[kind])
                ]
                result[f"final-{kind}"] = {
                    (k.encode(), s - BASE, e - BASE): v for (k, (s, e)), v in tables[kind].items()
                }
            late = await driver.read(app.topics[f"{APP_ID}-late"])
            for kind in SPECS:
                result[f"late-{kind}"] = [
                    (e.value, dict(e.headers)["streamkit.reason"].decode())
                    for e in late if dict(e.headers)["streamkit.table"] == f"ids-{kind}".encode()
                ]
        return result


# -- the tests ----------------------------------------------------------------------------------


@st.composite
def inputs(draw: st.DrawFn) -> tuple[Input, int, int]:
    """Out-of-order, late and duplicate timestamps over about a minute; where to stop; a seed."""
    n = draw(st.integers(2, 40))
    t, records = 0, []
    for _ in range(n):
        t += draw(st.integers(0, 3_000))
        ts = ORIGIN + max(0, t - draw(st.sampled_from([0, 0, 0, 1_000, 3_000, 12_000])))
        records.append((draw(st.sampled_from(["ann", "bob", "cy"])), ts))
    return records, draw(st.integers(1, n - 1)), draw(st.integers(0, 1 << 30))


def check_exact(result: dict[str, Any], expected: dict[str, Model]) -> None:
    for kind, model in expected.items():
        assert result[f"closed-{kind}"] == model.closes, kind
        assert result[f"late-{kind}"] == model.late, kind
        assert result[f"final-{kind}"] == model.final, kind


def check_at_least_once(result: dict[str, Any], expected: dict[str, Model]) -> None:
    for kind, model in expected.items():
        assert result[f"final-{kind}"] == model.final, kind
        emitted = result[f"closed-{kind}"]
        assert {(k, s, e): ids for k, s, e, ids in emitted} == {(k, s, e): ids for k, s, e, ids in model.closes}, kind
        assert len(set(map(repr, emitted))) == len({(k, s, e) for k, s, e, _ in emitted}), f"{kind}: two values for a window"
        late = result[f"late-{kind}"]
        assert set(model.late) <= set(late), kind
        accepted = {i for ids in [*model.final.values(), *(c[3] for c in model.closes)] for i in ids}
        assert {i for i, _reason in late} - {i for i, _ in model.late} <= accepted, kind


# Each example runs three workers: few examples, and no shrinking (minutes per step).
SETTINGS = settings(
    max_examples=3, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


@SETTINGS
@given(case=inputs())
def test_a_clean_stop_in_the_middle_changes_nothing(case: tuple[Input, int, int]) -> None:
    records, cut, seed = case
    result = asyncio.run(run_with_restart(records, cut, kill=False, rng=random.Random(seed)))
    check_exact(result, models(records))


@SETTINGS
@given(case=inputs())
def test_a_sigkill_in_the_middle_loses_nothing_and_adds_nothing(case: tuple[Input, int, int]) -> None:
    records, cut, seed = case
    result = asyncio.run(run_with_restart(records, cut, kill=True, rng=random.Random(seed)))
    check_at_least_once(result, models(records))
