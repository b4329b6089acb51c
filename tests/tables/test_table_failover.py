"""Two worker processes sharing a table, on each backend (``log_url``; on the embedded log the
first worker serves the directory to the other): each answers queries for every key (a key the
other owns is routed to it); when one is SIGKILLed the survivor takes its partitions over and
still answers for every key. With a standby replica the takeover replays (almost)
nothing; without one it replays the partition's whole changelog."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from streamkit._core.partitioner import partition_for_key
from tests.tables.counting_log import PARTITIONS, committed, produce

HERE = Path(__file__).resolve().parent

STREAMKIT = str(Path(sys.executable).parent / "streamkit")
KEYS = [f"k{i}" for i in range(60)]


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


async def _until(check: Any, what: str, timeout: float = 60.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        found = await asyncio.to_thread(check)
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class WorkerProc:
    def __init__(self, tmp: Path, name: str, env: dict[str, str], app: str = "counting_app:app") -> None:
        self.stderr_path = tmp / f"{name}.stderr"
        self.proc = subprocess.Popen(
            [STREAMKIT, "worker", "-A", app, "--web-port", "0", "--state-dir", str(tmp / name),
             "--progress-interval", "0"],
            env=env, cwd=tmp, stderr=open(self.stderr_path, "w"), text=True,  # noqa: SIM115
        )
        self.url = ""

    async def started(self) -> None:
        def find() -> str | None:
            match = re.search(r"web: (http://127\.0\.0\.1:\d+)", self.stderr_path.read_text())
            return match.group(1) if match else None

        self.url = await _until(find, "the worker's web address")

    def ready(self) -> set[int]:
        """The table partitions this worker holds, restored and serving."""
        status, body = _get(f"{self.url}/tables")
        if status != 200:
            return set()
        return {p["partition"] for t in body["tables"] for p in t["held"] if p["state"] == "ready"}

    def assigned(self) -> set[int]:
        status, body = _get(f"{self.url}/status")
        if status != 200:
            return set()
        return {int(tp.rsplit("-", 1)[1]) for tp in body["assignment"] if tp.startswith("events-")}

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("standby", [0, 1])
async def test_two_workers_route_queries_and_one_takes_over_the_others_table(
    log_url: str, unique: str, tmp_path: Path, standby: int
) -> None:
    url = log_url
    env = {**os.environ, "TCOUNT_BROKER": url, "TCOUNT_ID": unique, "TCOUNT_COMMIT_S": "0.2",
           "TCOUNT_STANDBY": str(standby), "PYTHONPATH": str(HERE)}
    await produce(url, [], app_id=unique)  # the input topic exists before the workers join
    # Both join at the same moment (a group that once rebalanced forever that way:
    # tests/log/server/test_group_join_storm.py).
    first = WorkerProc(tmp_path, "a", env)
    second: WorkerProc | None = WorkerProc(tmp_path, "b", env)
    assert second is not None
    try:
        await first.started()
        await second.started()
        await _until(lambda: first.ready() and second.ready()
                     and first.ready() | second.ready() == set(range(PARTITIONS))
                     and not first.ready() & second.ready(), "both workers to share the partitions")
        rng = random.Random(7)
        pairs = [(rng.choice(KEYS), 1) for _ in range(3000)]
        expected = {k: sum(1 for key, _ in pairs if key == k) for k in {k for k, _ in pairs}}
        await produce(url, pairs, app_id=unique)

        async def all_committed() -> None:
            for _ in range(600):
                if await committed(url, unique) >= len(pairs):
                    return
                await asyncio.sleep(0.1)
            raise AssertionError("the workers did not process everything")

        await all_committed()
        # Either worker answers for every key: its own, and the other's through routing.
        for worker in (first, second):
            for key, count in expected.items():
                status, body = await asyncio.to_thread(_get, f"{worker.url}/tables/counts/{key}")
                assert status == 200 and body["value"] == count, (worker.url, key, status, body)
        victim_partitions = second.ready()
        if standby:
            await _until(lambda: {p["partition"] for t in _get(f"{first.url}/tables")[1]["tables"]
                                  for p in t["held"] if p["state"] == "standby"} == victim_partitions,
                         "the survivor to hold standbys of the victim's partitions")
        second.stop(signal.SIGKILL)
        # Queries for the victim's keys fail (503) until the survivor has restored them.
        await _until(lambda: first.ready() == set(range(PARTITIONS)), "the survivor to restore every partition", 90)
        for key, count in expected.items():
            status, body = await asyncio.to_thread(_get, f"{first.url}/tables/counts/{key}")
            assert status == 200 and body["value"] >= count, (key, status, body)
        tables = _get(f"{first.url}/tables")[1]["tables"]
        taken = {p["partition"]: p for t in tables for p in t["held"] if p["partition"] in victim_partitions}
        replayed = sum(p["restored_records"] for p in taken.values())
        if standby:
            assert replayed == 0, taken  # the warm copy was current: nothing to replay
        else:
            assert replayed >= len({k for k in expected if partition_for_key(k.encode(), PARTITIONS) in victim_partitions}), taken
    finally:
        if second is not None:
            second.stop(signal.SIGKILL)
        first.stop()
