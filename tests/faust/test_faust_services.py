"""Faust's services: ``@app.service`` with a ``faust.Service`` subclass (mode's hooks, tasks,
timers, dependencies), ``app.should_stop`` and ``app.sleep``, on the embedded log and on
``streamkit worker`` against ``streamkit broker``."""

from __future__ import annotations

import asyncio
import doctest
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import streamkit as faust
import streamkit.app.services
from streamkit.runtime.worker import Worker
from streamkit.testing import AppDriver

ROOT = Path(__file__).resolve().parents[2]


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_service_runs_its_hooks_tasks_timers_and_dependencies_with_the_worker() -> None:
    app = faust.App("services")
    greetings = app.topic("greetings", value_type=str)
    heard: list[str] = []
    ticks: list[int] = []

    @app.agent(greetings)
    async def read(stream: faust.Stream) -> None:
        async for greeting in stream:
            heard.append(f"agent:{greeting}")

    class Cache(faust.Service):
        async def on_start(self) -> None:
            heard.append("cache:on_start")

        async def on_stop(self) -> None:
            heard.append("cache:on_stop")

    @app.service
    class Greeter(faust.Service):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.cache = Cache()

        def on_init_dependencies(self) -> list[faust.Service]:
            return [self.cache]

        async def on_first_start(self) -> None:
            heard.append("greeter:on_first_start")

        async def on_start(self) -> None:
            heard.append("greeter:on_start")
            await greetings.send(value="from a service")

        async def on_started(self) -> None:
            heard.append(f"greeter:on_started cache={self.cache.state}")

        async def on_stop(self) -> None:
            heard.append("greeter:on_stop")

        async def on_shutdown(self) -> None:
            heard.append("greeter:on_shutdown")

        @faust.Service.task
        async def watch(self) -> None:
            while not self.should_stop:
                await self.sleep(3600)
            heard.append("greeter:task saw should_stop")

        @faust.Service.timer(0.01)
        async def tick(self) -> None:
            ticks.append(1)

    async with AppDriver(app) as driver:
        await driver.process()
        (greeter,) = driver.worker.services
        assert isinstance(greeter, Greeter) and greeter.state == "running"
        await _until(lambda: len(ticks) >= 3)
    assert greeter.state == "shutdown" and greeter.cache.state == "shutdown"
    # The background task ends on its own (its sleep returns at once when the service stops)
    # between on_stop and on_shutdown; where exactly against the dependency's stop is free.
    task_line = "greeter:task saw should_stop"
    assert heard.index("greeter:on_stop") < heard.index(task_line) < heard.index("greeter:on_shutdown")
    assert [line for line in heard if line != task_line] == [
        "greeter:on_first_start",
        "greeter:on_start",
        "cache:on_start",  # dependencies start after on_start, before on_started (mode's order)
        "greeter:on_started cache=running",
        "agent:from a service",
        "greeter:on_stop",
        "cache:on_stop",  # then the dependencies stop
        "greeter:on_shutdown",
    ]


async def test_a_service_whose_task_raises_stops_the_worker_with_its_error(tmp_path: Path) -> None:
    app = faust.App("crashing", broker=f"file://{tmp_path / 'log'}")

    @app.service
    class Fragile(faust.Service):
        @faust.Service.task
        async def work(self) -> None:
            raise LookupError("the service's task failed")

    async with Worker(app, state_dir=str(tmp_path / "state")) as worker:
        with pytest.raises(LookupError, match="the service's task failed"):
            await asyncio.wait_for(worker.wait(), 10)
        assert worker.state == "failed" and worker.services[0].crashed


async def test_an_instance_is_a_service_too_and_a_non_service_is_refused() -> None:
    app = faust.App("instances")
    started: list[str] = []

    class Named(faust.Service):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        async def on_start(self) -> None:
            started.append(self.name)

    app.service(Named("given"))
    with pytest.raises(faust.ConfigError, match="Service"):
        app.service(object)
    async with AppDriver(app):
        assert started == ["given"]


async def test_app_sleep_returns_when_the_worker_stops_and_should_stop_tells_tasks() -> None:
    app = faust.App("sleepy")
    seen: list[object] = []

    @app.task
    async def report(app: faust.App) -> None:
        seen.append(app.should_stop)
        while not app.should_stop:
            await app.sleep(3600)
        seen.append("ended by itself")

    async with AppDriver(app):
        await _until(lambda: bool(seen))
    assert seen == [False, "ended by itself"]
    assert app.should_stop
    async with AppDriver(app):  # a new run starts with should_stop False again
        assert not app.should_stop


def test_the_services_module_examples_run() -> None:
    result = doctest.testmod(streamkit.app.services)
    assert result.attempted > 0 and result.failed == 0


SERVICE_APP = """
import streamkit as faust

app = faust.App("service-app", broker="{broker}")
notes = app.topic("notes", value_type=str)


@app.service
class Announcer(faust.Service):
    async def on_start(self):
        print("SERVICE STARTED", flush=True)
        await notes.send(value="hello from the service")

    async def on_stop(self):
        print("SERVICE STOPPED", flush=True)


@app.agent(notes)
async def read(stream):
    async for note in stream:
        print("RECEIVED", note, flush=True)
"""


def test_a_service_on_streamkit_worker_against_streamkit_broker(tmp_path: Path, broker: object) -> None:
    (tmp_path / "serviceapp.py").write_text(SERVICE_APP.format(broker=f"kafka://{broker.bootstrap}"))  # type: ignore[attr-defined]
    worker = subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "serviceapp:app", "--progress-interval", "0",
         "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert worker.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("RECEIVED" in line for line in lines):
            line = worker.stdout.readline()
            if not line:
                break
            lines.append(line)
        assert lines[:2] == ["SERVICE STARTED\n", "RECEIVED hello from the service\n"], lines
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert out.strip().splitlines()[-1] == "SERVICE STOPPED" and "Traceback" not in err
