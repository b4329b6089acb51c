"""Interactive queries over the worker's HTTP API, and bad input to tables and queries."""

from __future__ import annotations

import aiohttp

import streamkit as sk
from streamkit.testing import AppDriver
from streamkit.web import WebServer


def _app() -> tuple[sk.App, sk.Topic, sk.Topic]:
    app = sk.App("qapp")
    words = app.topic("words", key_type=str, value_type=str, partitions=2)
    amounts = app.topic("amounts", key_type=int, value_type=str, partitions=2)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)
    by_id = app.Table("by_id", key_type=int, value_type=int)

    @app.agent(words)
    async def count(stream: sk.Stream) -> None:
        async for word in stream:
            counts[word] += 1

    @app.agent(amounts)
    async def store(stream: sk.Stream) -> None:
        async for key, text in stream.items():
            by_id[key] = int(text) if text.isdigit() else text  # a str value: refused

    return app, words, amounts


async def test_tables_are_queryable_and_bad_input_is_a_clear_error() -> None:
    app, words, amounts = _app()
    async with AppDriver(app) as driver, WebServer(driver.worker, port=0) as web:
        for word in ["apple", "apple", "avocado", "banana"]:
            await driver.send(words, word, key=word)
        await driver.send(amounts, "7", key=1)
        await driver.send(amounts, "seven", key=2)
        await driver.process()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{web.url}/tables") as r:
                listing = await r.json()
            async with http.get(f"{web.url}/tables/counts/apple") as r:
                assert r.status == 200
                apple = await r.json()
            async with http.get(f"{web.url}/tables/counts/cherry") as r:
                assert r.status == 404
                assert "not in table" in (await r.json())["error"]
            async with http.get(f"{web.url}/tables/nope/x") as r:
                assert r.status == 404
                assert "no table named 'nope'" in (await r.json())["error"]
            async with http.get(f"{web.url}/tables/by_id/1") as r:
                assert (await r.json())["value"] == 7
            async with http.get(f"{web.url}/tables/by_id/one") as r:
                assert r.status == 400
                assert "not a valid int key" in (await r.json())["error"]
            async with http.get(f"{web.url}/tables/counts?prefix=a") as r:
                scanned = await r.json()
            async with http.get(f"{web.url}/tables/counts?limit=zero") as r:
                assert r.status == 400
        dead = await driver.dead_letters()
    assert apple["key"] == "apple" and apple["value"] == 2
    assert sorted((e["key"], e["value"]) for e in scanned) == [("apple", 2), ("avocado", 1)]
    tables = {t["name"]: t for t in listing["tables"]}
    assert tables["counts"]["changelog"] == "qapp-counts-changelog"
    assert [p["state"] for p in tables["counts"]["held"]] == ["ready", "ready"]
    # The value that did not fit the table's type went to the dead-letter topic, with why.
    assert len(dead) == 1
    error = dict(dead[0].headers)["streamkit.error"].decode()
    assert "'seven' is a str, but the table's values are int" in error


async def test_an_untyped_tables_key_is_found_as_the_scan_lists_it() -> None:
    """Faust's tabletest counts under ``str(partition)``: the scan lists the key "0", so the path
    ``0`` finds it, though ``0`` read as JSON is the integer 0. JSON wins when both exist."""
    from tests.tables.untyped_app import app, events

    async with AppDriver(app) as driver, WebServer(driver.worker, port=0) as web:
        await driver.send(events, 125250, key="0")
        await driver.send(events, 3, key="5")
        await driver.send(events, 5, key=5)
        await driver.send(events, 7, key=2.5)
        await driver.process()

        async def get(text: str) -> tuple[int, object]:
            async with http.get(f"{web.url}/tables/totals/{text}") as r:
                return r.status, await r.json()

        async with aiohttp.ClientSession() as http:
            async with http.get(f"{web.url}/tables/totals") as r:
                scanned = await r.json()
            assert {"key": "0", "value": 125250} in scanned
            assert await get("0") == (200, {"key": "0", "value": 125250, "partition": _home(app, "0")})
            assert (await get("%220%22"))[1]["key"] == "0"  # the JSON spelling of the string
            assert (await get("5"))[1]["key"] == 5  # both exist: the JSON reading wins
            assert (await get("%225%22"))[1]["key"] == "5"
            assert (await get("2.5"))[1] == {"key": 2.5, "value": 7, "partition": _home(app, 2.5)}
            status, body = await get("6")
            assert status == 404 and body == {"error": "key '6' is not in table 'totals'"}
            # JSON that is no key (null) or not one here (a list) is a plain 404 too.
            for text, shown in [("null", "null"), ("%5B1%5D", "[1]")]:
                assert await get(text) == (404, {"error": f"key {shown!r} is not in table 'totals'"})


def _home(app: sk.App, key: object) -> int:
    return app.tables["totals"].partition_of(key)
