"""Global tables: every worker holds all partitions; lookups by any key, joins by a key function."""

from __future__ import annotations

import json
from pathlib import Path

import streamkit as sk
from streamkit._core.serde import serde_for
from streamkit.runtime import Worker
from streamkit.tables.partition import TablePartition
from streamkit.tables.store import MemoryStore
from streamkit.testing import AppDriver
from tests.runtime.test_alignment import _settled
from tests.support.workers import read_topic, until_assigned


async def test_a_global_table_answers_any_key_and_joins_by_a_key_function(log_url: str, tmp_path: Path, unique: str) -> None:
    app = sk.App(unique, broker=log_url, commit_interval=0.2)
    countries = app.topic(f"{unique}-countries", key_type=str, value_type=str, partitions=3)
    users = app.topic(f"{unique}-users", key_type=str, value_type=dict, partitions=2)
    out = app.topic(f"{unique}-users-with-country", key_type=str, value_type=dict)
    names = app.GlobalTable("country_names", key_type=str, value_type=str)

    @app.agent(countries)
    async def load(stream: sk.Stream) -> None:
        async for code, name in stream.items():
            names[code] = name

    app.stream(users).join(
        names, lambda u, c: {**u, "country_name": c}, how="left", key=lambda u: u["country"]
    ).to(out)
    state_dir = str(tmp_path / "state")
    async with Worker(app, state_dir=state_dir) as worker:
        await until_assigned(worker, 5)  # both inputs' partitions
        for code, name in [("fr", "France"), ("jp", "Japan"), ("br", "Brazil"), ("ke", "Kenya")]:
            await (await countries.send(key=code, value=name))
        await _settled(worker)
        await worker.state_manager.catch_up()  # the replicas read the changelog
        assert sorted(names.held_partitions) == [0, 1, 2]
        assert names["jp"] == "Japan" and names.get("xx") is None
        await (await users.send(key="u1", value={"name": "ann", "country": "ke"}))
        await (await users.send(key="u2", value={"name": "bob", "country": "xx"}))
        await _settled(worker)
    joined = {r.key.decode(): json.loads(r.value)["country_name"] for r in await read_topic(log_url, out.name)}
    assert joined == {"u1": "Kenya", "u2": None}
    # A restart restores every partition of the global table from its changelog.
    async with Worker(app, state_dir=state_dir):
        assert dict(names.items()) == {"fr": "France", "jp": "Japan", "br": "Brazil", "ke": "Kenya"}


async def test_a_global_table_lists_its_own_writes_before_its_changelog_brings_them_back() -> None:
    """A global table's writes leave the dirty set at the commit and reach its store only when
    the changelog tailer applies them: ``items()`` reads them from the cache meanwhile (it read
    empty in ``AppDriver``, whose tailer had not run yet, while ``get`` found them)."""
    app = sk.App("gt-items")
    right = app.topic("right", key_type=str, value_type=int, partitions=1)
    table = app.stream(right).to_table("right", is_global=True)
    async with AppDriver(app) as driver:
        await driver.send(right, 1, key="a")
        await driver.send(right, 2, key="b")
        await driver.process()
        assert dict(table.items()) == {"a": 1, "b": 2} and table.get("a") == 1
        await driver.send(right, None, key="a")
        await driver.process()
        assert dict(table.items()) == {"b": 2}


def test_a_partition_lists_changes_taken_for_the_changelog_and_not_stored_yet() -> None:
    state = TablePartition(0, MemoryStore(), serde_for("json"), serde_for("json"))
    state.set("a", 1, 1000)
    state.set("b", 2, 1000)
    assert len(state.take_changes()) == 2  # sent, not acknowledged: the store lacks them
    state.delete("b", 2000)
    assert dict(state.items()) == {"a": 1} and list(state.store.items()) == []
    assert state.timestamp_of("a") == 1000 and state.timestamp_of("b") == 2000
