"""Faust's ``topic.send``: awaiting it gives a future of the record's metadata, and a plain
script that runs no worker sends with it (on the embedded log and through ``streamkit
broker``, where a ``streamkit worker`` reads what the script sent)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import streamkit as faust
from streamkit.testing import AppDriver

STREAMKIT = Path(sys.executable).parent / "streamkit"
TIMEOUT_S = 60


async def test_send_returns_a_future_of_the_records_metadata() -> None:
    app = faust.App("meta")
    words = app.topic("words", key_type=str, value_type=str, partitions=2)

    async with AppDriver(app) as driver:
        fut = await words.send(key="k", value="hello", partition=1, timestamp=1_700_000_000_123)
        metadata = await fut
        assert fut.done() and fut.result() == metadata
        assert (metadata.topic, metadata.partition, metadata.offset, metadata.timestamp) == (
            "words", 1, 0, 1_700_000_000_123,
        )
        assert metadata.topic_partition == faust.TopicPartition("words", 1)
        again = await (await words.send(key="k", value="again", partition=1))  # Faust's spelling
        assert again.offset == 1
        await driver.process()


SCRIPT = """
import asyncio
import sys

import streamkit as faust

app = faust.App("plain-sender", **({"broker": sys.argv[1]} if len(sys.argv) > 1 else {}))
words = app.topic("words", key_type=str, value_type=str, partitions=2)


async def main():
    futures = [await words.send(key=f"k{i}", value=f"w{i}") for i in range(5)]
    first = await futures[0]
    print("sent", first.topic, first.offset >= 0, futures[-1].done(), flush=True)


async def once_more():  # a second event loop in the same script: a fresh producer
    await words.send(key="k9", value="after")


asyncio.run(main())
asyncio.run(once_more())
"""

EXPECTED = sorted([f"w{i}" for i in range(5)] + ["after"])


def run_script(tmp_path: Path, *args: str) -> str:
    script = tmp_path / "plain_sender.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Unclosed" not in done.stderr, done.stderr
    return done.stdout


async def test_a_plain_script_sends_to_the_embedded_log(tmp_path: Path) -> None:
    assert run_script(tmp_path).split() == ["sent", "words", "True", "True"]
    app = faust.App("reader")
    words = app.topic("words", key_type=str, value_type=str, partitions=2)
    async with AppDriver(app, data_dir=str(tmp_path / ".streamkit")) as driver:
        events = await driver.read(words)
    assert sorted(e.value for e in events) == EXPECTED
    assert {e.key for e in events} == {f"k{i}" for i in range(5)} | {"k9"}


WORKER_APP = """
import streamkit as faust

app = faust.App("send-reader")
words = app.topic("words", key_type=str, value_type=str, partitions=2)


@app.agent(words)
async def read(stream):
    async for key, word in stream.items():
        print("got", key, word, flush=True)
"""


class Lines:
    """A process's stdout lines, read by a thread, waited on with a deadline."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        stdout = proc.stdout
        self._thread = threading.Thread(target=lambda: self.lines.extend(iter(stdout.readline, "")), daemon=True)
        self._thread.start()

    async def wait(self, predicate: Any, proc: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not predicate(self.lines):
            assert proc.poll() is None, f"the process exited: {self.lines}"
            assert time.monotonic() < deadline, f"timed out: {self.lines}"
            await asyncio.sleep(0.05)


async def test_a_plain_script_sends_through_streamkit_broker_to_a_streamkit_worker(
    broker: Any, tmp_path: Path
) -> None:
    url = f"kafka://{broker.bootstrap}"
    (tmp_path / "send_reader.py").write_text(WORKER_APP)
    worker = subprocess.Popen(
        [str(STREAMKIT), "worker", "-A", "send_reader:app", "--broker", url, "--progress-interval", "0"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = Lines(worker)
        assert run_script(tmp_path, url).split() == ["sent", "words", "True", "True"]
        await lines.wait(lambda got: len(got) >= len(EXPECTED), worker)
    finally:
        worker.terminate()
        assert worker.wait(TIMEOUT_S) == 0
    assert sorted(line.split()[2] for line in lines.lines) == EXPECTED
