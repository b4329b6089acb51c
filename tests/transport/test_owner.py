"""One data directory, one owner, many users: a worker on the embedded log serves it to the
other processes pointed at the same directory, other workers included (they join it as Kafka
clients, and take it over when its owner stops)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_transports import read_all

import streamkit as sk
from streamkit.log.manager import directory_owner
from streamkit.transport.connect import open_log_client
from tests.support.processes import drain, free_port, wait_for_line

ROOT = Path(__file__).resolve().parents[2]
SERDE = sk.App("x").topic("x", value_type=dict).value_serde
JOINED = r"is owned by pid \d+ serving 127\.0\.0\.1:\d+; joining it as a Kafka client"


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamkit.cli", *args], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )


def _env(data: Path, app_id: str) -> dict[str, str]:
    return {**os.environ, "SAMPLE_APP_ID": app_id, "SAMPLE_BROKER": f"file://{data}",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "support" / "apps"), str(ROOT)])}


@contextmanager
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    """Worker processes started in the block; each is killed at the end if still running."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def start_worker(
    started: list[subprocess.Popen[str]], data: Path, app_id: str, *extra: str
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "sample_app:app", "--progress-interval", "0",
         "--state-dir", str(data.parent / f"state-{app_id}-{len(started)}"), *extra],
        env=_env(data, app_id), stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    started.append(proc)
    return proc


async def send_values(data: Path, topic: str, values: range) -> None:
    """Send ``values`` to ``topic`` (keys k<value>) through whoever owns ``data``."""
    client = open_log_client(f"file://{data}")
    await client.start()
    producer = client.producer()
    await producer.start()
    try:
        for v in values:
            key = f"k{v}".encode()
            await producer.send(topic, key, str(v).encode(), partition=v % 4)
        await producer.flush()
    finally:
        await producer.aclose()
        await client.aclose()


async def outputs(data: Path, topic: str, count: int) -> list[dict[str, int]]:
    """The values of ``topic`` once it holds ``count`` (or after 15 s: what it holds)."""
    found: list[dict[str, int]] = []
    for _ in range(30):
        found = [SERDE.loads(v) for v in await read_all(f"file://{data}", topic)]
        if len(found) >= count:
            break
        await asyncio.sleep(0.5)
    return found


def stop(proc: subprocess.Popen[str], seen: list[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(30)
    drain(proc, seen)
    return code


def health(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def test_tools_reach_a_running_workers_log(tmp_path: Path) -> None:
    data = tmp_path / "log"
    env = _env(data, "owned")
    with workers() as started:
        worker = start_worker(started, data, "owned")
        seen: list[str] = []
        await wait_for_line(worker, r"serving the embedded log at 127\.0\.0\.1:\d+", seen)
        # a tool on the same data directory goes through the worker instead of the lock
        for i in range(5):
            sent = cli("send", "-A", "sample_app:app", "owned-in", str(i), "--key", f"k{i}", env=env)
            assert sent.returncode == 0, sent.stderr
        listed = cli("topics", "list", "--data-dir", str(data), env=env)
        assert listed.returncode == 0 and "owned-out" in listed.stdout, listed.stderr
        assert sorted(o["v"] for o in await outputs(data, "owned-out", 5)) == [0, 1, 2, 3, 4]
        assert stop(worker, seen) == 0
    assert not (data / ".owner").exists()


async def test_workers_of_two_apps_share_one_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "log"
    with workers() as started:
        first = start_worker(started, data, "one")
        first_seen: list[str] = []
        await wait_for_line(first, r"serving the embedded log at", first_seen)
        second = start_worker(started, data, "two")
        second_seen: list[str] = []
        # the second one says in one line whose log it uses, instead of being refused
        await wait_for_line(second, JOINED, second_seen)
        await wait_for_line(second, r"assigned two-in-0", second_seen)
        await send_values(data, "one-in", range(6))
        await send_values(data, "two-in", range(100, 106))
        assert sorted(o["v"] for o in await outputs(data, "one-out", 6)) == list(range(6))
        assert sorted(o["v"] for o in await outputs(data, "two-out", 6)) == list(range(100, 106))
        assert stop(second, second_seen) == 0, "".join(second_seen[-20:])
        assert stop(first, first_seen) == 0, "".join(first_seen[-20:])
    assert not any("Traceback" in line for line in first_seen + second_seen)


def _last_assignment(seen: list[str]) -> set[int]:
    lines = [line for line in seen if re.search(r"\bassigned (shared-in|nothing)", line)]
    assert lines, "".join(seen[-20:])
    return {int(p) for p in re.findall(r"shared-in-(\d+)", lines[-1])}


async def test_two_workers_of_one_app_share_its_partitions(tmp_path: Path) -> None:
    data = tmp_path / "log"
    with workers() as started:
        first = start_worker(started, data, "shared")
        first_seen: list[str] = []
        await wait_for_line(first, r"assigned shared-in-0, shared-in-1, shared-in-2, shared-in-3", first_seen)
        second = start_worker(started, data, "shared")
        second_seen: list[str] = []
        await wait_for_line(second, JOINED, second_seen)
        # the group rebalances: each worker ends up with two of the four partitions
        await wait_for_line(second, r"assigned shared-in-\d", second_seen)
        await wait_for_line(first, r"assigned shared-in-\d, shared-in-\d$", first_seen)
        mine, theirs = _last_assignment(first_seen), _last_assignment(second_seen)
        assert mine and theirs and not mine & theirs and mine | theirs == {0, 1, 2, 3}
        await send_values(data, "shared-in", range(40))
        found = await outputs(data, "shared-out", 40)
        # each record once, by the worker that holds its partition
        assert sorted(o["v"] for o in found) == list(range(40))
        assert stop(second, second_seen) == 0, "".join(second_seen[-20:])
        assert stop(first, first_seen) == 0, "".join(first_seen[-20:])


@pytest.mark.timeout(180)
async def test_the_second_worker_carries_on_when_the_owner_stops(tmp_path: Path) -> None:
    data = tmp_path / "log"
    web_port = free_port()
    with workers() as started:
        first = start_worker(started, data, "first")
        first_seen: list[str] = []
        await wait_for_line(first, r"serving the embedded log at", first_seen)
        second = start_worker(started, data, "second", "--web-port", str(web_port))
        second_seen: list[str] = []
        await wait_for_line(second, JOINED, second_seen)
        await wait_for_line(second, r"assigned second-in-0", second_seen)
        await send_values(data, "second-in", range(4))
        assert sorted(o["v"] for o in await outputs(data, "second-out", 4)) == list(range(4))
        assert (await asyncio.to_thread(health, web_port))[0] == 200

        # A reader takes the lock shared the moment the owner lets it go (as `streamkit
        # consume` on a free directory does): the second worker has no log then.
        held = threading.Event()
        lock_fd = os.open(data / ".lock", os.O_RDONLY)

        def take_lock() -> None:
            fcntl.flock(lock_fd, fcntl.LOCK_SH)  # blocks until the owner is gone
            held.set()

        taker = threading.Thread(target=take_lock, daemon=True)
        taker.start()
        try:
            assert stop(first, first_seen) == 0, "".join(first_seen[-20:])
            assert await asyncio.to_thread(held.wait, 10)
            await wait_for_line(second, r"waiting", second_seen)
            # It says first that the owner is stopping, then (at its next look) who holds the
            # directory now: 503 throughout.
            deadline = time.monotonic() + 15
            while True:
                status, body = await asyncio.to_thread(health, web_port)
                assert status == 503, body
                if "read by another" in str(body.get("waiting")) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert "read by another" in str(body.get("waiting")), body
        finally:
            os.close(lock_fd)  # releases the shared lock
        # the second worker takes the directory over and serves it to the others
        await wait_for_line(second, r"took data directory .* over: serving it at 127\.0\.0\.1:\d+", second_seen)
        await send_values(data, "second-in", range(4, 10))
        assert sorted(o["v"] for o in await outputs(data, "second-out", 10)) == list(range(10))
        for _ in range(40):
            if (await asyncio.to_thread(health, web_port))[0] == 200:
                break
            await asyncio.sleep(0.25)
        assert (await asyncio.to_thread(health, web_port))[0] == 200
        assert stop(second, second_seen) == 0, "".join(second_seen[-20:])
    assert not (data / ".owner").exists()
    assert not any("Traceback" in line for line in second_seen), "".join(second_seen[-30:])


@pytest.mark.timeout(180)
async def test_of_two_survivors_one_takes_over_and_the_other_joins_it(tmp_path: Path) -> None:
    data = tmp_path / "log"
    with workers() as started:
        owner = start_worker(started, data, "race")
        owner_seen: list[str] = []
        await wait_for_line(owner, r"serving the embedded log at", owner_seen)
        survivors = [start_worker(started, data, "race"), start_worker(started, data, "race")]
        seen: list[list[str]] = [[], []]
        for proc, lines in zip(survivors, seen, strict=True):
            await wait_for_line(proc, JOINED, lines)
            await wait_for_line(proc, r"assigned ", lines)
        assert stop(owner, owner_seen) == 0
        # one of them holds the directory and serves it now
        winner = None
        for _ in range(100):
            holder = directory_owner(data)
            if holder is not None and holder.address is not None:
                winner = next((i for i, p in enumerate(survivors) if p.pid == holder.pid), None)
                if winner is not None:
                    break
            await asyncio.sleep(0.1)
        assert winner is not None
        await send_values(data, "race-in", range(20))
        found = await outputs(data, "race-out", 20)
        # at least once: a record may come twice when the group rebalances as it is processed
        assert sorted({o["v"] for o in found}) == list(range(20))
        loser = 1 - winner
        for i in (loser, winner):  # the loser first: it must not take over from a live winner
            assert stop(survivors[i], seen[i]) == 0, "".join(seen[i][-20:])
        took = [any(re.search(r"took data directory .* over", line) for line in lines) for lines in seen]
        assert took[winner] and not took[loser], took
    assert not (data / ".owner").exists()


async def test_a_worker_waits_while_another_process_holds_the_directory_without_serving_it(tmp_path: Path) -> None:
    from streamkit.log.manager import LogManager

    data = tmp_path / "log"
    LogManager(data, background=False).open().close()
    web_port = free_port()
    lock_fd = os.open(data / ".lock", os.O_RDONLY)
    fcntl.flock(lock_fd, fcntl.LOCK_SH)  # a reader, as `streamkit consume` on a free directory
    with workers() as started:
        try:
            worker = start_worker(started, data, "patient", "--web-port", str(web_port))
            seen: list[str] = []
            await wait_for_line(worker, r"being read by another streamkit command: waiting", seen)
            status, body = await asyncio.to_thread(health, web_port)
            assert status == 503 and body["status"] == "waiting" and "read by another" in str(body["waiting"])
        finally:
            os.close(lock_fd)
        await wait_for_line(worker, r"serving the embedded log at", seen)
        await send_values(data, "patient-in", range(3))
        assert sorted(o["v"] for o in await outputs(data, "patient-out", 3)) == [0, 1, 2]
        assert (await asyncio.to_thread(health, web_port))[0] == 200
        assert stop(worker, seen) == 0, "".join(seen[-20:])
