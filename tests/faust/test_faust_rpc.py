"""Faust's agent RPC: ``ask``, ``map``, ``kvmap``, ``join``, ``kvjoin`` over reply topics, on
the embedded log and with ``streamkit worker`` against ``streamkit broker`` and Apache Kafka
answering a plain script's questions."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import streamkit as faust
from streamkit.runtime import Worker
from streamkit.testing import AppDriver

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_faust_send import STREAMKIT, TIMEOUT_S, Lines


class Quote(faust.Record):
    symbol: str
    price: float


async def test_ask_map_kvmap_join_on_the_embedded_log() -> None:
    app = faust.App("rpc", reply_to="rpc-replies")
    prices = app.topic("prices", key_type=str, value_type=float, partitions=4)
    channel = app.channel(value_type=int)

    @app.agent(value_type=int, concurrency=2)
    async def square(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for n in stream:
            yield n * n

    @app.agent(prices)
    async def quote(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            yield Quote(event.key, event.value)

    @app.agent(channel)
    async def negate(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for n in stream:
            yield -n

    async with AppDriver(app):
        assert await square.ask(7) == 49
        assert await quote.ask(1.5, key="ACME") == Quote("ACME", 1.5)  # the record comes back
        assert await negate.ask(3) == -3  # an agent over a channel answers too
        # join: every reply, in the order asked, though four partitions answer them.
        symbols = [f"S{i}" for i in range(20)]
        joined = await quote.kvjoin([(s, float(i)) for i, s in enumerate(symbols)])
        assert joined == [Quote(s, float(i)) for i, s in enumerate(symbols)]
        assert await square.join(range(10)) == [n * n for n in range(10)]

        async def numbers() -> AsyncIterator[int]:
            for n in range(5):
                yield n

        assert sorted([r async for r in square.map(numbers())]) == [0, 1, 4, 9, 16]
        mapped = [r async for r in quote.kvmap([("A", 1.0), ("B", 2.0)])]
        assert sorted(mapped, key=lambda q: q.symbol) == [Quote("A", 1.0), Quote("B", 2.0)]
        assert await square.ask(2, reply_to="elsewhere") == 4  # a reply topic of its own
        with pytest.raises(faust.ConfigError, match="a channel cannot take replies"):
            await square.ask(2, reply_to=negate)
        assert app.replies is not None and app.replies.replies == 3 + 20 + 10 + 5 + 2 + 1  # type: ignore[attr-defined]


RPC_APP = """
import streamkit as faust

app = faust.App("{app_id}", reply_create_topic=True)


class Quote(faust.Record, namespace="rpc.Quote"):
    symbol: str
    price: float


prices = app.topic("{app_id}-prices", key_type=str, value_type=float, partitions=3)


@app.agent(value_type=int)
async def square(stream):
    async for n in stream:
        yield n * n


@app.agent(prices)
async def quote(stream):
    async for event in stream.events():
        yield Quote(event.key, event.value)
"""


async def test_a_plain_script_asks_a_streamkit_worker_over_the_wire(bootstrap: str, tmp_path: Path, unique: str) -> None:
    """On ``streamkit broker`` and on Apache Kafka (both shared: the app is named by the test)."""
    url = f"kafka://{bootstrap}"
    (tmp_path / "rpc_demo.py").write_text(RPC_APP.format(app_id=unique))
    worker = subprocess.Popen(
        [str(STREAMKIT), "worker", "-A", "rpc_demo:app", "--broker", url, "--progress-interval", "0"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        Lines(worker)
        rpc_demo = importlib.import_module("rpc_demo")  # the same app, in this process: no worker here
        rpc_demo.app.conf.broker = url
        assert await rpc_demo.square.ask(12) == 144
        symbols = [f"S{i}" for i in range(12)]
        replies = await rpc_demo.quote.kvjoin([(s, float(i)) for i, s in enumerate(symbols)])
        assert replies == [rpc_demo.Quote(s, float(i)) for i, s in enumerate(symbols)]
        assert sorted([r async for r in rpc_demo.square.map([1, 2, 3])]) == [1, 4, 9]
        from streamkit.runtime.standalone import attach

        await (await attach(rpc_demo.app)).aclose()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("rpc_demo", None)
        worker.terminate()
        code = worker.wait(TIMEOUT_S)
        stderr = worker.stderr.read() if worker.stderr is not None else ""
        assert code == 0, stderr
    assert "Traceback" not in stderr, stderr


async def test_faust_and_streamkit_ask_each_others_agents(broker: Any, faust_python: Path, tmp_path: Path) -> None:
    """faust-streaming 0.15 (``faust_rpc_side.py``) and streamkit share an agent's topic name
    and answer each other's ``ask`` through ``streamkit broker``."""
    url = f"kafka://{broker.bootstrap}"
    faust_id = "rpc-interop-faust"
    app = faust.App("rpc-interop-sk", broker=url)
    doubles = app.topic("rpc-interop-doubles", value_type=int)

    @app.agent(doubles)
    async def double(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for n in stream:
            yield n * 2

    # The Faust app's agent as streamkit names it: same app id, same module and function.
    asker = faust.App(faust_id, broker=url)

    async def triple(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for n in stream:
            yield n

    triple.__module__ = "faust_rpc_side"  # the module Faust's agent is defined in
    faust_triple = asker.agent()(triple)

    out = tmp_path / "faust-notes.jsonl"
    log = tmp_path / "faust.log"
    env = {
        **os.environ,
        "FAUST_BROKER": url,
        "FAUST_APP_ID": faust_id,
        "FAUST_DATADIR": str(tmp_path / "faust-data"),
        "FAUST_OUT": str(out),
        "SK_TOPIC": doubles.name,
        "PYTHONUNBUFFERED": "1",
    }
    async with Worker(app):
        with open(log, "w") as log_file:
            proc = subprocess.Popen(
                [str(faust_python), str(HERE / "faust_rpc_side.py"), "worker", "--without-web", "-l", "info"],
                cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            )
        try:
            # streamkit asks Faust's agent (Faust creates its topic when it starts).
            assert await asyncio.wait_for(faust_triple.ask(5), FAUST_TIMEOUT_S) == 15
            deadline = time.monotonic() + FAUST_TIMEOUT_S
            while "asked" not in (notes := faust_notes(out)):
                assert proc.poll() is None, f"faust exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
                assert time.monotonic() < deadline, f"timed out; faust noted {notes}\n{log.read_text()[-4000:]}"
                await asyncio.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
    from streamkit.runtime.standalone import attach

    await (await attach(asker)).aclose()
    assert notes["agent_topic"]["name"] == faust_triple.channel.name == f"{faust_id}-faust_rpc_side.triple"
    assert notes["asked"]["value"] == 42  # Faust's ask, answered by streamkit's agent


FAUST_TIMEOUT_S = 120
HERE = Path(__file__).resolve().parent


def faust_notes(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    notes = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {n["kind"]: n for n in notes}
