"""One data directory, one owner, many users: a worker on the embedded log serves it to the
other processes pointed at the same directory."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from test_transports import read_all

import streamkit as sk

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamkit.cli", *args], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )


async def test_tools_reach_a_running_workers_log_and_a_second_worker_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "log"
    env = {**os.environ, "SAMPLE_APP_ID": "owned", "SAMPLE_BROKER": f"file://{data}",
           "PYTHONPATH": str(ROOT / "tests" / "engine")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "sample_app:app", "--progress-interval", "0"],
        env=env, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        assert worker.stderr is not None
        served = None
        for _ in range(100):
            line = await asyncio.to_thread(worker.stderr.readline)
            match = re.search(r"serving the embedded log at (\S+)", line)
            if match:
                served = match.group(1)
                break
        assert served and served.startswith("127.0.0.1:")
        # a tool on the same data directory goes through the worker instead of the lock
        for i in range(5):
            sent = cli("send", "-A", "sample_app:app", "owned-in", str(i), "--key", f"k{i}", env=env)
            assert sent.returncode == 0, sent.stderr
        listed = cli("topics", "list", "--data-dir", str(data), env=env)
        assert listed.returncode == 0 and "owned-out" in listed.stdout, listed.stderr
        # a second worker may not take the partitions the first one owns
        second = cli("worker", "-A", "sample_app:app", env=env)
        assert second.returncode == 2
        assert second.stderr.strip().count("\n") == 0 and "owned by another process" in second.stderr
        serde = sk.App("x").topic("x", value_type=dict).value_serde
        values: list[int] = []
        for _ in range(40):
            values = sorted(serde.loads(v)["v"] for v in await read_all(f"file://{data}", "owned-out"))
            if len(values) == 5:
                break
            await asyncio.sleep(0.25)
        assert values == [0, 1, 2, 3, 4]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        worker.kill()
    assert not (data / ".owner").exists()
