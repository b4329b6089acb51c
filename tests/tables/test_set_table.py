"""Faust's SetTable and as_ansitable."""

from __future__ import annotations

import streamkit as sk
from streamkit.testing import AppDriver


async def test_set_table_in_place_changes_are_written_and_restored(tmp_path) -> None:
    app = sk.App("sets")
    tags = app.topic("tags", key_type=str, value_type=str, partitions=2)
    by_user = app.SetTable("tags_by_user", key_type=str)

    @app.agent(tags)
    async def collect(stream: sk.Stream) -> None:
        async for user, tag in stream.items():
            if tag.startswith("-"):
                by_user[user].discard(tag[1:])
            else:
                by_user[user].add(tag)

    dirs = {"data_dir": str(tmp_path / "log"), "state_dir": str(tmp_path / "state")}
    async with AppDriver(app, **dirs) as driver:
        for user, tag in [("ann", "red"), ("ann", "blue"), ("bob", "red"), ("ann", "-red")]:
            await driver.send(tags, tag, key=user)
        await driver.process()
        assert by_user["ann"] == {"blue"} and by_user["bob"] == {"red"}
        table = by_user.as_ansitable(title="tags", sort=True)
    assert table.splitlines() == [
        "tags",
        "+-------+----------+",
        "| Key   | Value    |",
        "+-------+----------+",
        "| 'ann' | {'blue'} |",
        "| 'bob' | {'red'}  |",
        "+-------+----------+",
    ]
    async with AppDriver(app, **dirs):
        assert dict(by_user.items()) == {"ann": {"blue"}, "bob": {"red"}}
