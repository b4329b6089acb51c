"""A faust-streaming app and a streamkit app read each other's records and ``str`` values
through ``streamkit broker``.

faust-streaming 0.15 runs as a worker subprocess (``faust_side.py``, in its own venv: the
``faust_python`` fixture of tests/support/plugin.py). Streamkit writes an ``Order`` record and
a ``str`` value with keys; faust reads them and notes what it decoded in a file; faust writes
its own and streamkit's agents read them. Each side's reads are waited for (bounded), never slept on.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import streamkit as sk
from streamkit.runtime import Worker

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 120


class Order(sk.Record, namespace="interop.Order", include_metadata=True):
    order_id: str
    amount: float
    user: str


def faust_notes(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_faust_and_streamkit_read_each_others_records_and_str_values(
    broker: Any, faust_python: Path, tmp_path: Path
) -> None:
    url = f"kafka://{broker.bootstrap}"
    prefix = "interop"
    app = sk.App("interop-sk", broker=url)
    sk_orders = app.topic(f"{prefix}-sk-orders", key_type=str, value_type=Order)
    sk_words = app.topic(f"{prefix}-sk-words", key_type=str, value_type=str)
    faust_orders = app.topic(f"{prefix}-faust-orders", key_type=str, value_type=Order)
    faust_words = app.topic(f"{prefix}-faust-words", key_type=str, value_type=str)
    faust_words_raw = sk.Topic(app, f"{prefix}-faust-words", key_type=str, value_serializer="raw")
    faust_orders_raw = sk.Topic(app, f"{prefix}-faust-orders", key_type=str, value_serializer="raw")
    got: dict[str, tuple[Any, Any]] = {}
    raw: list[bytes] = []

    @app.agent(faust_orders)
    async def orders(stream: sk.Stream) -> None:
        async for event in stream.events():
            got["order"] = (event.key, event.value)

    @app.agent(faust_words)
    async def words(stream: sk.Stream) -> None:
        async for event in stream.events():
            got["word"] = (event.key, event.value)

    @app.agent(faust_words_raw, name="words_raw")
    async def words_raw(stream: sk.Stream) -> None:
        async for value in stream:
            raw.insert(0, value)

    @app.agent(faust_orders_raw, name="orders_raw")
    async def orders_raw(stream: sk.Stream) -> None:
        async for value in stream:
            raw.append(value)

    out = tmp_path / "faust-notes.jsonl"
    log = tmp_path / "faust.log"
    async with Worker(app):
        await (await sk_orders.send(key="o-from-sk", value=Order("s-1", 9.5, "alice")))
        await (await sk_words.send(key="w-from-sk", value='héllo "streamkit"'))
        env = {
            **os.environ,
            "FAUST_BROKER": url,
            "FAUST_APP_ID": "interop-faust",
            "FAUST_DATADIR": str(tmp_path / "faust-data"),
            "FAUST_OUT": str(out),
            "TOPIC_PREFIX": prefix,
            "PYTHONUNBUFFERED": "1",
        }
        with open(log, "w") as log_file:
            proc = subprocess.Popen(
                [str(faust_python), str(HERE / "faust_side.py"), "worker", "--without-web", "-l", "info"],
                cwd=tmp_path, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                kinds = {n["kind"] for n in faust_notes(out)}
                if {"order", "word"} <= kinds and {"order", "word"} <= got.keys() and len(raw) == 2:
                    break
                assert proc.poll() is None, f"the faust worker exited with {proc.returncode}:\n{log.read_text()[-4000:]}"
                assert time.monotonic() < deadline, f"timed out: faust noted {kinds}, streamkit got {set(got)}\n{log.read_text()[-4000:]}"
                await asyncio.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)

    notes = {n["kind"]: n for n in faust_notes(out)}
    # streamkit -> faust
    assert notes["order"] == {
        "kind": "order", "key": "o-from-sk", "type": "Order",
        "fields": {"order_id": "s-1", "amount": 9.5, "user": "alice"},
    }
    assert notes["word"] == {"kind": "word", "key": "w-from-sk", "type": "str", "value": 'héllo "streamkit"'}
    # faust -> streamkit
    assert got["order"] == ("o-from-faust", Order("f-1", 12.25, "bob"))
    assert got["word"] == ("w-from-faust", 'héllo "faust"')
    # on the wire: Faust's JSON (ASCII-escaped), a JSON string and a record with its metadata
    assert raw[0] == b'"h\\u00e9llo \\"faust\\""'
    assert json.loads(raw[1]) == {
        "order_id": "f-1", "amount": 12.25, "user": "bob", "__faust": {"ns": "interop.Order"}
    }
