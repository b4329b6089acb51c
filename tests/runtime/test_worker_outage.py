"""A worker process whose ``streamkit broker`` went away (killed, its data directory deleted,
or stopped with SIGSTOP: a broker that accepts connections and answers nothing, as a hung
network looks) stops on SIGTERM within ``--shutdown-timeout``: every wait of the stop (the
offset commit, the transactions' commits and aborts, leaving the group, closing the
clients) ends at that deadline, one line says what it gave up, and nothing else is printed:
no traceback, no "Unclosed" client, no ``CancelledError``.

The worker runs ``outage_app`` (commits only when it stops), so its stop always has
processed offsets, and under exactly-once open transactions, to commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import streamkit as sk
from streamkit.runtime.worker import Worker
from tests.support.broker import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
SHUTDOWN_TIMEOUT_S = 5.0
MARGIN_S = 3.0  # the interpreter's own exit on a busy machine
RECORDS = 100
NOISE = ("Traceback", "Unclosed", "CancelledError", "Task was destroyed", "never retrieved")


async def _produce(url: str, topic: str, state_dir: Path) -> None:
    app = sk.App("outage-producer", broker=url)
    target = app.topic(topic, value_type=int, partitions=4)
    async with Worker(app, state_dir=str(state_dir)):
        pending = [await target.send(key=str(i), value=i) for i in range(RECORDS)]
        for ack in pending:
            await ack


def _start_worker(url: str, guarantee: str, tmp_path: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OUTAGE_APP_ID": "outage", "OUTAGE_BROKER": url, "OUTAGE_REPORT_EVERY": str(RECORDS),
           "PYTHONPATH": f"{ROOT / 'tests' / 'support' / 'apps'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "outage_app:app", "--progress-interval", "0",
         "--processing-guarantee", guarantee, "--state-dir", str(tmp_path / "state"), *extra],
        env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=tmp_path,
    )


async def _until_logged(proc: subprocess.Popen[bytes], log: Path, pattern: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log.read_text()):
        assert proc.poll() is None, f"the worker exited before {pattern!r}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no {pattern!r} in time:\n{log.read_text()}"
        await asyncio.sleep(0.1)


@contextlib.contextmanager
def socketless_port() -> Iterator[int]:
    """A loopback port held bound but not listening: a connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


async def _sigterm(proc: subprocess.Popen[bytes], log: Path, wait_s: float) -> tuple[int, float]:
    """SIGTERM to the worker; its exit code and how long it took to exit."""
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.to_thread(proc.wait, wait_s)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the worker ignored SIGTERM:\n{log.read_text()}") from None
    return code, time.monotonic() - began


def _assert_quiet(text: str) -> None:
    for noise in NOISE:
        assert noise not in text, f"{noise!r} in the worker's output:\n{text}"


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
@pytest.mark.parametrize("fault", ["killed", "hung"])
async def test_a_worker_whose_broker_is_gone_stops_on_sigterm_within_the_shutdown_timeout(
    tmp_path: Path, fault: str, guarantee: str
) -> None:
    broker = BrokerProcess(tmp_path / "data").start(same_port=False)
    url = f"kafka://{broker.bootstrap}"
    log = tmp_path / "worker.log"
    proc = None
    try:
        await _produce(url, "outage-in", tmp_path / "producer-state")
        proc = _start_worker(url, guarantee, tmp_path, log, "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S))
        await _until_logged(proc, log, f"copied {RECORDS} records")
        if fault == "killed":
            broker.kill()
            shutil.rmtree(broker.data_dir)
        else:
            assert broker.proc is not None
            broker.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(1.0)  # the worker's clients notice
        code, took = await _sigterm(proc, log, SHUTDOWN_TIMEOUT_S + 30)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if broker.proc is not None and broker.proc.poll() is None:
            broker.proc.send_signal(signal.SIGCONT)
        broker.kill()
    text = log.read_text()
    assert code == 0, text  # a stop, as any other
    assert took < SHUTDOWN_TIMEOUT_S + MARGIN_S, f"stopped after {took:.1f} s:\n{text}"
    gave_up = [line for line in text.splitlines() if "stop: gave up" in line]
    if gave_up or fault == "hung":
        assert len(gave_up) == 1, text
        assert re.search(rf"after {SHUTDOWN_TIMEOUT_S:.1f} s: {re.escape(url)} did not answer", gave_up[0]), gave_up
        assert "committing" in gave_up[0], gave_up  # the offsets (or transactions) it did not commit
    else:
        # A killed broker refuses connections: a commit may fail at once (seen under load),
        # leaving nothing to wait for. The worker still says what it did not commit.
        assert re.search(r"was aborted|could not commit|commit failed", text), text
    _assert_quiet(text)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_worker_that_cannot_reach_kafka_ends_with_one_line_and_closes_its_clients(
    tmp_path: Path, guarantee: str
) -> None:
    with socketless_port() as port:
        log = tmp_path / "worker.log"
        proc = _start_worker(f"kafka://127.0.0.1:{port}", guarantee, tmp_path, log)
        try:
            code = await asyncio.to_thread(proc.wait, 60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert code == 2, text
    assert f"streamkit: error: cannot reach Kafka at 127.0.0.1:{port}" in text
    _assert_quiet(text)


@pytest.mark.parametrize("fault", ["killed", "hung"])
async def test_a_worker_with_nothing_to_commit_stops_quietly_after_its_broker_went_away(
    tmp_path: Path, fault: str
) -> None:
    """Nothing processed, so nothing to commit: a killed broker costs the stop nothing (the
    consumer's fetch, sleeping out its retry back-off when the stop cancels it, used to end
    the stop with a ``CancelledError`` traceback and leave the producer unclosed); a hung one
    costs leaving the group, given up at the deadline."""
    broker = BrokerProcess(tmp_path / "data").start(same_port=False)
    url = f"kafka://{broker.bootstrap}"
    log = tmp_path / "worker.log"
    proc = None
    try:
        proc = _start_worker(url, "at_least_once", tmp_path, log, "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S))
        await _until_logged(proc, log, "assigned outage-in-0")
        if fault == "killed":
            broker.kill()
            # The fetch fails and sleeps out its retry back-off: the state the stop cancels.
            # (aiokafka's lines about it are DEBUG lines: the worker says it in one line.)
            await _until_logged(proc, log, "does not answer", timeout=30)
            await asyncio.sleep(2.0)  # fetches failing at once, then backing off, over and over
        else:
            assert broker.proc is not None
            broker.proc.send_signal(signal.SIGSTOP)
            await asyncio.sleep(1.0)  # requests wait for answers that do not come
        code, took = await _sigterm(proc, log, SHUTDOWN_TIMEOUT_S + 30)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if broker.proc is not None and broker.proc.poll() is None:
            broker.proc.send_signal(signal.SIGCONT)
        broker.kill()
    text = log.read_text()
    assert code == 0, text
    gave_up = [line for line in text.splitlines() if "stop: gave up" in line]
    if fault == "killed":
        assert took < MARGIN_S, f"stopped after {took:.1f} s:\n{text}"
        assert gave_up == [], text
    else:
        assert took < SHUTDOWN_TIMEOUT_S + MARGIN_S, f"stopped after {took:.1f} s:\n{text}"
        assert len(gave_up) == 1 and "leaving group 'outage'" in gave_up[0], text
    _assert_quiet(text)


async def test_a_worker_starting_against_a_hung_broker_stops_on_sigterm(tmp_path: Path) -> None:
    """The start waits for the log too (bootstrap, topics, the group): a stop asked for then
    cancels it, and what it opened closes without waiting (it took aiokafka's 40 s request
    timeout, then ended with "cannot reach Kafka")."""
    broker = BrokerProcess(tmp_path / "data").start(same_port=False)
    assert broker.proc is not None
    broker.proc.send_signal(signal.SIGSTOP)
    log = tmp_path / "worker.log"
    proc = _start_worker(f"kafka://{broker.bootstrap}", "exactly_once", tmp_path, log,
                         "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S), "--loglevel", "debug")
    try:
        await _until_logged(proc, log, "Attempting to bootstrap")  # aiokafka's debug line
        await asyncio.sleep(1.0)  # connected, waiting for an answer
        code, took = await _sigterm(proc, log, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        broker.proc.send_signal(signal.SIGCONT)
        broker.kill()
    text = log.read_text()
    assert code == 0, text
    assert took < MARGIN_S, f"stopped after {took:.1f} s:\n{text}"
    assert "streamkit worker: asked to stop while starting" in text
    _assert_quiet(text)
