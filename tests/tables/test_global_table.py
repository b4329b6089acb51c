"""Global tables: every worker holds all partitions; lookups by any key, joins by a key function."""

from __future__ import annotations

import streamkit as sk
from streamkit.testing import AppDriver


async def test_a_global_table_answers_any_key_and_joins_by_a_key_function(tmp_path) -> None:
    app = sk.App("gt")
    countries = app.topic("countries", key_type=str, value_type=str, partitions=3)
    users = app.topic("users", key_type=str, value_type=dict, partitions=2)
    out = app.topic("users-with-country", key_type=str, value_type=dict)
    names = app.GlobalTable("country_names", key_type=str, value_type=str)

    @app.agent(countries)
    async def load(stream: sk.Stream) -> None:
        async for code, name in stream.items():
            names[code] = name

    app.stream(users).join(
        names, lambda u, c: {**u, "country_name": c}, how="left", key=lambda u: u["country"]
    ).to(out)
    data_dir, state_dir = str(tmp_path / "log"), str(tmp_path / "state")
    async with AppDriver(app, data_dir=data_dir, state_dir=state_dir) as driver:
        for code, name in [("fr", "France"), ("jp", "Japan"), ("br", "Brazil"), ("ke", "Kenya")]:
            await driver.send(countries, name, key=code)
        await driver.process()
        await driver.worker.state_manager.catch_up()  # the replicas read the changelog
        assert sorted(names.held_partitions) == [0, 1, 2]
        assert names["jp"] == "Japan" and names.get("xx") is None
        await driver.send(users, {"name": "ann", "country": "ke"}, key="u1")
        await driver.send(users, {"name": "bob", "country": "xx"}, key="u2")
        await driver.process()
        joined = {e.key: e.value["country_name"] for e in await driver.read(out)}
    assert joined == {"u1": "Kenya", "u2": None}
    # A restart restores every partition of the global table from its changelog.
    async with AppDriver(app, data_dir=data_dir, state_dir=state_dir):
        assert dict(names.items()) == {"fr": "France", "jp": "Japan", "br": "Brazil", "ke": "Kenya"}
