"""A ``streamkit worker`` subprocess counting keys on Apache Kafka while the test faults the
cluster under it, as the outage tests (one node) and the fault tests (three nodes) share it.

The worker runs ``tests/support/apps/outage_count_app.py``: it counts each key's records in a
table, sends each new count to ``<app id>-counts`` and each input value to ``<app id>-seen``.
``Input`` sends numbered records (value ``n`` for the n-th record, so each is told apart) from a
thread the whole time, through the faults: its librdkafka producer (acks=all, idempotent) keeps
what it cannot deliver and delivers it once a leader is back. The checks read the sinks
read_committed: exactly-once means the last counts equal what was delivered and ``-seen`` holds
each delivered value once; at-least-once means no count is short and no value is missing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

ROOT = Path(__file__).resolve().parents[2]
KEYS = [f"k{i}" for i in range(8)]
NOISE = ("Traceback", "Unclosed", "CancelledError", "Task was destroyed", "never retrieved")


def start_worker(
    bootstrap: str, app_id: str, guarantee: str, tmp_path: Path, log: Path, delay_s: float = 0.0, replication: int = 1,
) -> subprocess.Popen[bytes]:
    """``streamkit worker`` on the count app, its output appended to ``log``; ``delay_s`` is the
    app's pause per record, ``replication`` its ``topic_replication_factor``."""
    env = {**os.environ, "OUTAGE_APP_ID": app_id, "OUTAGE_BROKER": f"kafka://{bootstrap}", "OUTAGE_GUARANTEE": guarantee,
           "OUTAGE_DELAY_S": str(delay_s), "OUTAGE_REPLICATION": str(replication),
           "PYTHONPATH": f"{ROOT / 'tests' / 'support' / 'apps'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "outage_count_app:app", "--progress-interval", "0",
         "--web-port", "0", "--state-dir", str(tmp_path / "state")],
        env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=tmp_path,
    )


async def web_url(proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> str:
    """The worker's web address, once it has its assignment."""
    deadline = time.monotonic() + timeout
    while True:
        found = re.search(r"web: (http://\S+)", log.read_text())
        if found and "assigned " in log.read_text():
            return found.group(1)
        assert proc.poll() is None, f"the worker exited:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"the worker did not start in time:\n{log.read_text()}"
        await asyncio.sleep(0.2)


def health(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def until_health(url: str, status: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        code, body = await asyncio.to_thread(health, url)
        if code == status:
            return body
        assert proc.poll() is None, f"the worker exited:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"/health stayed {code} {body}:\n{log.read_text()}"
        await asyncio.sleep(0.5)


class Input:
    """Numbered records flowing into the app's input (two partitions) from a thread, one every
    ``interval_s``. ``delivered`` counts what the cluster acknowledged per key, ``values`` the
    values it acknowledged."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float = 0.05) -> None:
        self.topic = topic
        self.interval_s = interval_s
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 300_000, "log_level": 0})
        self.delivered: Counter[str] = Counter()
        self.values: list[int] = []
        self.failed: list[str] = []
        self._numbers = itertools.count()  # shared by the thread and burst(): each value once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.delivered[msg.key().decode()] += 1
            self.values.append(int(msg.value()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.send()
            self.producer.poll(0)
            time.sleep(self.interval_s)

    def send(self) -> None:
        i = next(self._numbers)
        self.producer.produce(self.topic, key=KEYS[i % len(KEYS)].encode(), value=str(i).encode(), partition=i % 2,
                              on_delivery=self._done)

    def burst(self, n: int) -> None:
        """``n`` records at once, acknowledged when this returns (from the test's own thread:
        librdkafka's producer is thread-safe)."""
        for _ in range(n):
            self.send()
        assert self.producer.flush(30) == 0

    def __enter__(self) -> Input:
        self._thread.start()
        return self

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.producer.flush(120) == 0, "the input was not all delivered"
        assert not self.failed, self.failed[:3]

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.purge()  # what a failed test (or a cluster left down) did not deliver
        self.producer.flush(0)


def read_committed(bootstrap: str, topic: str, partitions: int = 1) -> list[tuple[str, int]]:
    """Every (key, value) of ``topic`` read read_committed, partition after partition, up to
    each partition's last stable offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 0})
    out: list[tuple[str, int]] = []
    try:
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            consumer.assign([TopicPartition(topic, p, 0)])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msgs = consumer.consume(1000, 0.5)
                for m in msgs:
                    assert m.error() is None, m.error()
                    out.append((m.key().decode(), int(m.value())))
                position = consumer.position([tp])[0].offset
                if not msgs and position >= 0 and position >= high - 1:
                    break  # read up to the last stable offset (a marker may be the last offset)
        return out
    finally:
        consumer.close()


def last_counts(bootstrap: str, topic: str) -> dict[str, int]:
    """The last count of each key in ``topic`` (one partition), read read_committed."""
    return dict(read_committed(bootstrap, topic))


async def until_counted(bootstrap: str, topic: str, want: Counter[str], timeout: float = 90) -> dict[str, int]:
    """The last counts once every key's reached what was sent (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        got = await asyncio.to_thread(last_counts, bootstrap, topic)
        if all(got.get(k, 0) >= n for k, n in want.items()):
            return got
        if time.monotonic() > deadline:
            return got
        await asyncio.sleep(1.0)


async def until_forwarded(bootstrap: str, topic: str, values: list[int], timeout: float = 60) -> list[int]:
    """The values forwarded to ``topic`` (read_committed) once every one of ``values`` is
    there (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = [v for _k, v in await asyncio.to_thread(read_committed, bootstrap, topic)]
        if set(values) <= set(seen) or time.monotonic() > deadline:
            return seen
        await asyncio.sleep(1.0)


def assert_counted(guarantee: str, got: dict[str, int], seen: list[int], records: Input) -> None:
    """Exactly-once: every key's last count is what was delivered, and ``seen`` (the values
    the app forwarded, read_committed) holds each delivered value once. At-least-once: no
    count is short and no delivered value is missing from ``seen``."""
    sent = dict(records.delivered)
    if guarantee == "exactly_once":
        assert got == sent, (got, sent)
        duplicated = [v for v, n in Counter(seen).items() if n > 1]
        assert not duplicated, f"{len(duplicated)} values forwarded twice, e.g. {duplicated[:5]}"
        assert sorted(seen) == sorted(records.values), f"{len(seen)} forwarded of {len(records.values)} delivered"
    else:
        assert all(got.get(k, 0) >= n for k, n in sent.items()), (got, sent)
        missing = set(records.values) - set(seen)
        assert not missing, f"{len(missing)} delivered values never forwarded, e.g. {sorted(missing)[:5]}"


def quiet(text: str) -> None:
    for noise in NOISE:
        assert noise not in text, f"{noise!r} in the worker's output:\n{text[-6000:]}"
