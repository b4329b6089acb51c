"""SIGKILL a worker counting into a table at random points, restart it each time, and check:

* each restart replays exactly the changelog tail past what its local state recorded (read from
  the RocksDB state, read-only, while the worker is dead);
* at the end every update is there: at-least-once, so each count is at least the reference
  and the changelog's latest values equal the table.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streamkit._core.types import TopicPartition
from streamkit.transport.connect import open_log_client
from tests.support.processes import drain, wait_for_line
from tests.tables.counting_log import PARTITIONS, committed, local_offsets, local_table, produce

HERE = Path(__file__).resolve().parent
STREAMKIT = str(Path(sys.executable).parent / "streamkit")
KEYS = [f"k{i}" for i in range(300)]
RECORDS = 30_000
RESTORED = re.compile(r"table counts partition (\d+): restored (\d+) records \(offsets (\d+)\.\.(\d+)\)")


async def _preload(url: str, rng: random.Random) -> dict[str, int]:
    pairs = [(rng.choice(KEYS), 1) for _ in range(RECORDS)]
    await produce(url, pairs)
    model: dict[str, int] = {}
    for key, _ in pairs:
        model[key] = model.get(key, 0) + 1
    return model


async def _bounds(url: str, topic: str) -> dict[int, tuple[int, int]]:
    client = open_log_client(url)
    await client.start()
    reader = client.reader()
    try:
        return {p: await reader.bounds(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        await reader.aclose()
        await client.aclose()




def _start(tmp: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [STREAMKIT, "worker", "-A", "counting_app:app", "--progress-interval", "0"],
        env=env, cwd=tmp, stderr=subprocess.PIPE, text=True,
    )




@pytest.mark.slow
async def test_sigkill_at_random_points_loses_nothing_and_replays_only_the_tail(tmp_path: Path) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    url = f"file://{tmp_path / 'log'}"
    state = tmp_path / ".streamkit-state" / "tcount"
    env = {**os.environ, "TCOUNT_BROKER": url, "TCOUNT_COMMIT_S": "0.2", "PYTHONPATH": str(HERE)}
    model = await _preload(url, rng)
    kills = 0
    replays = 0
    for round_ in range(4):
        before = local_offsets(state)
        changelog = await _bounds(url, "tcount-counts-changelog") if round_ else {}
        seen: list[str] = []
        proc = _start(tmp_path, env)
        try:
            await wait_for_line(proc, r"assigned ", seen)
            await asyncio.sleep(rng.uniform(0.05, 1.0))  # a random point of the run, not a condition
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            kills += 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        drain(proc, seen)
        # Each partition's restore started where its local state stood and ran to the
        # changelog's end: only the tail was replayed.
        for match in RESTORED.finditer("".join(seen)):
            p, records, start, end = (int(g) for g in match.groups())
            local = before.get(p) or 0  # no offset yet: the state reflects nothing of the changelog
            assert start == local, f"seed {seed}: partition {p} replayed from {start}, state was at {local}"
            expected_end = changelog.get(p, (0, 0))[1]
            assert end == expected_end, f"seed {seed}: partition {p} replayed to {end}, changelog ends at {expected_end}"
            assert records <= end - start
            replays += 1
    assert kills == 4
    assert replays >= 3 * PARTITIONS, f"seed {seed}: restarts restored {replays} partitions"

    # Now let it finish and stop cleanly.
    seen = []
    proc = _start(tmp_path, env)
    try:
        await wait_for_line(proc, r"assigned ", seen)
        for _ in range(600):
            if await committed(url) >= RECORDS:
                break
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    table = local_table(state)
    assert set(table) == set(model), f"seed {seed}"
    short = {k: (table[k], v) for k, v in model.items() if table[k] < v}
    assert not short, f"seed {seed}: counts below the reference (lost updates): {short}"
    # After a clean stop the local state is exactly the changelog's end.
    offsets = local_offsets(state)
    ends = await _bounds(url, "tcount-counts-changelog")
    assert offsets == {p: ends[p][1] for p in range(PARTITIONS)}
    shutil.rmtree(tmp_path / "log", ignore_errors=True)
