"""Faust's web views: ``@app.page(path)`` with ``async def view(web, request, **params)``
answering ``web.json(...)``, class-based ``View`` with get/post, and ``@app.table_route`` /
``@app.topic_route`` answered by the worker that owns the key's partition (two
``streamkit worker`` processes on ``streamkit broker``)."""

from __future__ import annotations

import asyncio
import doctest
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import streamkit as faust
import streamkit.app.views
from streamkit._core.partitioner import partition_for_key
from streamkit.app.views import View
from streamkit.testing import AppDriver
from streamkit.web import WebServer


def _call(url: str, data: Any = None, method: str | None = None) -> tuple[int, Any]:
    body = None if data is None else json.dumps(data).encode()
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


class Order(faust.Record):
    item: str
    qty: int


async def test_pages_beside_the_workers_api_on_the_embedded_log() -> None:
    app = faust.App("pages")
    orders = app.topic("orders", key_type=str, value_type=Order)
    totals = app.Table("totals", default=int)

    @app.agent(orders)
    async def tally(stream: faust.Stream) -> None:
        async for order in stream:
            totals[order.item] += order.qty

    @app.page("/count/{item}/")
    @app.table_route(table=totals, match_info="item")
    async def get_count(web: View, request: Any, item: str) -> Any:
        return web.json({item: totals[item]})

    @app.page("/orders/")
    class OrdersView(View):
        async def get(self, request: Any) -> Any:
            return self.json({"latest": Order("pen", 1)})

        async def post(self, request: Any) -> Any:
            body = await request.json()
            if "item" not in body:
                raise self.BadRequest("an order needs an item")
            await orders.send(key=body["item"], value=Order(body["item"], body["qty"]))
            return self.json({"accepted": body["item"]}, status=201)

    @app.page("/broken/")
    async def broken(web: View, request: Any) -> Any:
        raise RuntimeError("the view failed")

    async with AppDriver(app) as driver, WebServer(driver.worker, port=0) as web:
        base = web.url
        status, body = await asyncio.to_thread(_call, f"{base}/orders/", {"item": "ink", "qty": 3})
        assert (status, body) == (201, {"accepted": "ink"})
        assert await asyncio.to_thread(_call, f"{base}/orders/", {"qty": 3}) == (400, {"error": "an order needs an item"})
        await driver.process()
        assert await asyncio.to_thread(_call, f"{base}/count/ink/") == (200, {"ink": 3})
        assert await asyncio.to_thread(_call, f"{base}/count/paper/") == (200, {"paper": 0})
        assert await asyncio.to_thread(_call, f"{base}/orders/") == (200, {"latest": {"item": "pen", "qty": 1}})
        status, body = await asyncio.to_thread(_call, f"{base}/count/ink/", {}, "POST")
        assert status == 405 and body == {"error": "Method POST not allowed."}
        status, body = await asyncio.to_thread(_call, f"{base}/broken/")
        assert status == 500 and "the view failed" in body["error"]
        status, body = await asyncio.to_thread(_call, f"{base}/tables")  # the worker's own API is still there
        assert status == 200 and body["app"] == "pages"
        assert (await asyncio.to_thread(_call, f"{base}/"))[1]["pages"] == ["/count/{item}/", "/orders/", "/broken/"]


def test_declaring_pages_and_routes_checks_what_faust_checks() -> None:
    app = faust.App("pages-bad")
    table = app.Table("t", default=int)
    with pytest.raises(faust.ConfigError, match="match_info=, query_param= or exact_key="):
        app.table_route(table=table)
    with pytest.raises(faust.ConfigError, match="View subclass"):
        app.page("/x/")(type("NotAView", (), {}))
    with pytest.raises(faust.ConfigError, match="must start with '/'"):
        app.page("x/")
    app.page("/dup/")(View)
    with pytest.raises(faust.ConfigError, match="already declared"):

        @app.page("/dup/")
        async def again(web: View, request: Any) -> Any:
            return web.json({})


async def test_a_page_on_an_api_endpoint_is_refused_when_the_server_starts() -> None:
    app = faust.App("pages-clash")

    @app.page("/status")
    async def status(web: View, request: Any) -> Any:
        return web.json({})

    async with AppDriver(app) as driver:
        with pytest.raises(faust.ConfigError, match="/status is an endpoint of the worker's HTTP API"):
            await WebServer(driver.worker, port=0).start()


def test_the_views_module_examples_run() -> None:
    result = doctest.testmod(streamkit.app.views)
    assert result.attempted > 0 and result.failed == 0


ROUTED_APP = '''
import os

import streamkit as faust

app = faust.App("routed", broker="{broker}", commit_interval=0.2)
words = app.topic("words", key_type=str, value_type=str, partitions=2)
counts = app.Table("counts", default=int, key_type=str, value_type=int, partitions=2)


@app.agent(words)
async def count(stream):
    async for word in stream:
        counts[word] += 1


@app.page("/count/{{word}}/")
@app.table_route(table=counts, match_info="word")
async def get_count(web, request, word):
    return web.json({{"word": word, "count": counts[word], "pid": os.getpid()}})


@app.page("/words/")
@app.topic_route(topic=words, query_param="key")
async def who_reads(web, request):
    return web.json({{"pid": os.getpid()}})
'''


def _partition(key: str) -> int:
    return partition_for_key(key.encode(), 2)


async def test_table_and_topic_routes_answer_from_the_owning_worker(tmp_path: Path, broker: Any) -> None:
    (tmp_path / "routedapp.py").write_text(ROUTED_APP.format(broker=f"kafka://{broker.bootstrap}"))
    keys = {}  # one key per partition
    for i in range(100):
        keys.setdefault(_partition(f"w{i}"), f"w{i}")
        if len(keys) == 2:
            break
    # The topics exist before the workers join, so both get a partition at once.
    sent = subprocess.run(
        [sys.executable, "-m", "streamkit.cli", "send", "-A", "routedapp:app", "words", keys[0], "--key", keys[0]],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )
    assert sent.returncode == 0, sent.stderr
    procs: list[subprocess.Popen[str]] = []
    urls: list[str] = []
    try:
        for name in ("a", "b"):
            err = tmp_path / f"{name}.err"
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "streamkit.cli", "worker", "-A", "routedapp:app", "--web-port", "0",
                 "--state-dir", str(tmp_path / name), "--progress-interval", "0"],
                cwd=tmp_path, stderr=open(err, "w"), env={**os.environ, "PYTHONPATH": str(tmp_path)},  # noqa: SIM115
                text=True,
            ))
        for name in ("a", "b"):
            urls.append(await _wait_for(lambda n=name: _web_url(tmp_path / f"{n}.err"), "a worker's web address"))

        def split() -> bool:
            held = [_call(f"{url}/status")[1].get("assignment", []) for url in urls]
            return all(len(h) == 1 for h in held) and set(held[0]) != set(held[1])

        await _wait_for(split, "the two workers to hold one partition each")
        for key in keys.values():
            sent = subprocess.run(
                [sys.executable, "-m", "streamkit.cli", "send", "-A", "routedapp:app", "words", key, "--key", key],
                cwd=tmp_path, capture_output=True, text=True, timeout=60,
            )
            assert sent.returncode == 0, sent.stderr
        expected = {keys[0]: 2, keys[1]: 1}
        await _wait_for(
            lambda: all(_call(f"{urls[0]}/count/{k}/")[1].get("count") == n for k, n in expected.items()),
            "the counts to be there",
        )
        pids = {p.pid for p in procs}
        for key, n in expected.items():
            answers = [await asyncio.to_thread(_call, f"{url}/count/{key}/") for url in urls]
            # Both workers answer, with the same body: the owner's (its pid), asked by the other.
            assert answers[0] == answers[1] and answers[0][0] == 200, answers
            assert answers[0][1]["count"] == n and answers[0][1]["pid"] in pids
            readers = [await asyncio.to_thread(_call, f"{url}/words/?key={key}") for url in urls]
            assert readers[0] == readers[1] == (200, {"pid": answers[0][1]["pid"]})
        owners = {(await asyncio.to_thread(_call, f"{urls[0]}/count/{k}/"))[1]["pid"] for k in keys.values()}
        assert owners == pids  # each key answered by a different worker: routing happened
        assert (await asyncio.to_thread(_call, f"{urls[0]}/words/"))[0] == 400  # no ?key=
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(timeout=60) == 0


def _web_url(stderr: Path) -> str | None:
    match = re.search(r"web: (http://127\.0\.0\.1:\d+)", stderr.read_text())
    return match.group(1) if match else None


async def _wait_for(check: Any, what: str, timeout: float = 60.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            found = await asyncio.to_thread(check)
        except (urllib.error.URLError, OSError, KeyError):
            found = None
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
