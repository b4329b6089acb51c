"""Exactly-once over the wire (``streamkit broker`` and Apache Kafka) with two workers: both
count into the table and write outputs; one is SIGKILLed mid-stream and replaced by a worker on its state directory (a
restarted pod on its volume), which takes its transactional id and so fences it: the killed
worker's open transaction is aborted at once. The group rebalances; at the end the
read_committed output holds each input's output exactly once, with the count the key had at
that input, and the changelog's committed values equal the reference. Both logs are shared, so
the app is named by the test (``EOS_ID``)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.eos.eos_log import (
    changelog_table,
    check_exactly_once,
    committed,
    outputs,
    produce,
    reference,
)
from tests.support.processes import wait_for_line

HERE = Path(__file__).resolve().parent
STREAMKIT = str(Path(sys.executable).parent / "streamkit")
KEYS = [f"k{i}" for i in range(200)]
RECORDS = 20_000


def _start(tmp: Path, env: dict[str, str], url: str, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [STREAMKIT, "worker", "-A", "eos_app:app", "--broker", url, "--state-dir", str(state),
         "--progress-interval", "0", "--processing-guarantee", "exactly_once"],
        env=env, cwd=tmp, stderr=subprocess.PIPE, text=True,
    )



def _stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.slow
async def test_two_workers_one_killed_and_replaced_no_duplicate_no_loss(
    bootstrap: str, tmp_path: Path, unique: str
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    url = f"kafka://{bootstrap}"
    env = {**os.environ, "EOS_ID": unique, "EOS_COMMIT_S": "0.2", "EOS_PAUSE_EVERY": "5", "PYTHONPATH": str(HERE)}
    pairs = [(rng.choice(KEYS), i) for i in range(RECORDS)]
    await produce(url, pairs, unique)
    seen_a: list[str] = []
    seen_b: list[str] = []
    seen_c: list[str] = []
    a = _start(tmp_path, env, url, tmp_path / "state-a")
    b = _start(tmp_path, env, url, tmp_path / "state-b")
    procs = [a, b]
    try:
        await wait_for_line(a, r"assigned ", seen_a, timeout=90)
        await wait_for_line(b, r"assigned ", seen_b, timeout=90)
        await asyncio.sleep(rng.uniform(0.3, 1.5))  # a random point of the run, not a condition
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
        before = await committed(url, unique)
        assert before < RECORDS, f"seed {seed}: the kill came after the end ({before})"
        c = _start(tmp_path, env, url, tmp_path / "state-a")
        procs.append(c)
        await wait_for_line(c, r"assigned ", seen_c, timeout=90)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 180
        while await committed(url, unique) < RECORDS:
            assert loop.time() < deadline, f"seed {seed}: not done in time ({await committed(url, unique)} of {RECORDS})"
            await asyncio.sleep(0.2)
        assert _stop(b) == 0
        assert _stop(c) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    out = await outputs(url, "read_committed", unique)
    bad = check_exactly_once(out, pairs, seed)
    assert not bad, f"seed {seed}: counts skipped or repeated, e.g. {bad[0]}"
    assert await changelog_table(url, unique) == reference(pairs), f"seed {seed}"
