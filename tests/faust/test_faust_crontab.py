"""Faust's ``@app.crontab(cron_format, timezone=, on_leader=)`` and ``@Service.crontab``: on the
manual clock of ``streamkit.testing``, and on ``streamkit worker`` against ``streamkit broker``."""

from __future__ import annotations

import asyncio
import doctest
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import streamkit as faust
import streamkit.app.crontab
from streamkit.testing import AppDriver


def _ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)


async def test_cron_jobs_fire_at_the_times_their_schedule_names() -> None:
    app = faust.App("cron")
    ticks = app.topic("ticks", value_type=str)
    fired: list[str] = []

    @app.agent(ticks)
    async def read(stream: faust.Stream) -> None:
        async for tick in stream:
            fired.append(f"agent:{tick}")

    @app.crontab("*/1 * * * *", on_leader=True)
    async def every_minute() -> None:
        await ticks.send(value="minute")

    @app.crontab("30 18 * * *", timezone=ZoneInfo("US/Pacific"))
    async def half_past_six_pacific(app: faust.App) -> None:
        fired.append(f"pacific:{app.id}")

    # 01:29:30 UTC on 1 July is 18:29:30 in Pacific daylight time.
    async with AppDriver(app, start_ms=_ms(2026, 7, 1, 1, 29, 30)) as driver:
        await driver.process()
        await driver.advance(29)
        assert fired == []
        await driver.advance(1)  # 01:30:00 UTC, 18:30 PDT
        assert sorted(fired) == ["agent:minute", "pacific:cron"]
        await driver.advance(60)
        assert sorted(fired) == ["agent:minute", "agent:minute", "pacific:cron"]
        await driver.advance(600)  # ten minutes missed in one step fire once, not ten times
        assert fired.count("agent:minute") == 3


async def test_the_apps_timezone_setting_is_the_default_zone() -> None:
    app = faust.App("cron-tz", timezone="Asia/Tokyo")
    fired: list[int] = []

    @app.crontab("0 9 * * *")  # 09:00 in Tokyo is 00:00 UTC
    async def morning() -> None:
        fired.append(1)

    async with AppDriver(app, start_ms=_ms(2026, 1, 1, 23, 59, 0)) as driver:
        await driver.advance(59)
        assert fired == []
        await driver.advance(1)
        assert fired == [1]


def test_a_bad_schedule_or_timezone_is_a_clear_error() -> None:
    app = faust.App("cron-bad")
    with pytest.raises(faust.ConfigError, match="'61 \\* \\* \\* \\*' is not a cron schedule"):
        app.crontab("61 * * * *")
    with pytest.raises(faust.ConfigError, match="tzinfo"):
        app.crontab("* * * * *", timezone="US/Pacific")  # type: ignore[arg-type]
    with pytest.raises(faust.ConfigError, match="unknown timezone 'Mars/Olympus'"):
        faust.App("cron-bad-tz", timezone="Mars/Olympus")


async def test_a_services_crontab_runs_until_the_service_stops() -> None:
    fired: list[str] = []

    class Ticker(faust.Service):
        @faust.Service.crontab("* * * * * *")  # croniter's sixth field: every second
        async def each_second(self) -> None:
            fired.append("tick")

    async with Ticker() as ticker:
        deadline = asyncio.get_running_loop().time() + 10
        while not fired:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
    assert ticker.state == "shutdown" and not ticker._futures  # the cron loop ended with it


def test_the_crontab_module_examples_run() -> None:
    result = doctest.testmod(streamkit.app.crontab)
    assert result.attempted > 0 and result.failed == 0


CRON_APP = """
import streamkit as faust

app = faust.App("cron-app", broker="{broker}")
beats = app.topic("beats", value_type=str)


@app.crontab("* * * * * *", on_leader=True)
async def every_second():
    await beats.send(value="beat")


@app.agent(beats)
async def read(stream):
    async for beat in stream:
        print("GOT", beat, flush=True)
"""


def test_a_crontab_on_streamkit_worker_against_streamkit_broker(tmp_path: Path, broker: object) -> None:
    (tmp_path / "cronapp.py").write_text(CRON_APP.format(broker=f"kafka://{broker.bootstrap}"))  # type: ignore[attr-defined]
    worker = subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "cronapp:app", "--progress-interval", "0",
         "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert worker.stdout is not None
        got = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and got < 2:
            line = worker.stdout.readline()
            if not line:
                break
            got += line == "GOT beat\n"
        assert got == 2
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
