"""The worker's HTTP API, over a real socket, for a worker run by the test kit and by the CLI."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

import streamkit as sk
from streamkit.testing import AppDriver
from streamkit.web import WebServer

ROOT = Path(__file__).resolve().parents[2]


async def test_status_topology_metrics_and_health() -> None:
    app = sk.App("webapp")
    src = app.topic("src", value_type=int, partitions=2)
    dst = app.topic("dst", value_type=int)

    @app.agent(src, sink=[dst])
    async def double(stream: sk.Stream):  # type: ignore[no-untyped-def]
        async for v in stream.group_by(lambda v: v % 3, name="mod3"):
            yield v * 2

    async with AppDriver(app) as driver, WebServer(driver.worker, port=0) as web:
        for i in range(10):
            await driver.send(src, i)
        await driver.process()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{web.url}/status") as r:
                status = await r.json()
            async with http.get(f"{web.url}/topology") as r:
                topology = await r.json()
            async with http.get(f"{web.url}/metrics") as r:
                metrics = await r.text()
            async with http.get(f"{web.url}/health") as r:
                assert r.status == 200
            async with http.post(f"{web.url}/status", data=b"x") as r:
                assert r.status == 405
    assert status["app"] == "webapp" and status["state"] == "running"
    assert "src-0" in status["assignment"] and status["records_in"] == 20
    assert set(status["lag"].values()) == {0}
    assert topology["agents"] == [
        {"name": "double", "topics": ["src"], "through": ["webapp-double-mod3-repartition"],
         "sinks": ["dst"], "concurrency": 1}
    ]
    assert 'streamkit_records_in_total{app="webapp"} 20' in metrics
    assert 'streamkit_lag{app="webapp",topic="src",partition="0"} 0' in metrics


async def test_worker_command_serves_the_api_and_stops_gracefully(tmp_path: Path) -> None:
    env = {**os.environ, "SAMPLE_APP_ID": "webcli", "SAMPLE_BROKER": f"file://{tmp_path / 'log'}",
           "PYTHONPATH": str(ROOT / "tests" / "support" / "apps")}
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "streamkit"), "worker", "-A", "sample_app:app", "--web-port", "0",
         "--progress-interval", "0.2", "--state-dir", str(tmp_path / "state")],
        env=env, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        url = None
        lines = []
        for _ in range(200):
            line = await asyncio.to_thread(proc.stderr.readline)
            lines.append(line)
            match = re.search(r"web: (http://\S+)", line)
            if match:
                url = match.group(1)
                break
        assert url, "".join(lines)
        async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as r:
            assert r.status == 200
        for _ in range(50):
            line = await asyncio.to_thread(proc.stderr.readline)
            if "[progress]" in line:
                break
        assert "[progress]" in line and "lag" in line
        proc.send_signal(signal.SIGTERM)
        rest = await asyncio.to_thread(proc.stderr.read)
        assert proc.wait(30) == 0, rest
        assert "stopped after" in rest and "Traceback" not in rest
    finally:
        proc.kill()


async def test_health_is_503_once_the_worker_failed_or_stopped() -> None:
    app = sk.App("webfail", on_error="stop")
    src = app.topic("src", value_type=int)

    @app.agent(src)
    async def fragile(stream: sk.Stream) -> None:
        async for v in stream:
            if v == 1:
                raise RuntimeError("boom")

    driver = AppDriver(app)
    async with driver, WebServer(driver.worker, port=0) as web, aiohttp.ClientSession() as http:
        async with http.get(f"{web.url}/health") as r:
            assert (r.status, await r.json()) == (200, {"status": "running"})
        await driver.send(src, 0)
        await driver.send(src, 1)
        with pytest.raises(RuntimeError, match="boom"):
            await asyncio.wait_for(driver.worker.wait(), 10)
        async with http.get(f"{web.url}/health") as r:
            assert (r.status, await r.json()) == (503, {"status": "failed"})
        async with http.get(f"{web.url}/status") as r:
            assert (await r.json())["state"] == "failed"

    app2 = sk.App("webstop")
    driver2 = AppDriver(app2)
    async with driver2, WebServer(driver2.worker, port=0) as web, aiohttp.ClientSession() as http:
        driver2.worker.request_stop()
        async with http.get(f"{web.url}/health") as r:
            assert (r.status, await r.json()) == (503, {"status": "stopped"})
