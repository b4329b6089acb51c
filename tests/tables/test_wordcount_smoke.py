"""The word count app on the real runtime: counts in the table, in its changelog, and after a
restart from the same log and state."""

from __future__ import annotations

import collections

from apps import wordcount
from streamkit.testing import AppDriver

TEXT = ["the quick brown fox", "jumps over the lazy dog", "the end"]


async def test_counts_land_in_the_table_and_the_changelog(tmp_path) -> None:
    expected = collections.Counter(w for line in TEXT for w in line.split())
    data_dir = str(tmp_path / "log")
    async with AppDriver(wordcount.app, data_dir=data_dir) as driver:
        for line in TEXT:
            await driver.send(wordcount.lines, line)
        await driver.process()
        assert dict(wordcount.word_counts.items()) == dict(expected)
        assert wordcount.word_counts["the"] == 3
        changelog = await driver.read(wordcount.word_counts.changelog_topic)
        latest = {e.key: e.value for e in changelog}
        assert latest == dict(expected)
    # Restart on the same log and state: nothing is replayed twice, the table is whole.
    async with AppDriver(wordcount.app, data_dir=data_dir) as driver:
        await driver.send(wordcount.lines, "the")
        await driver.process()
        assert wordcount.word_counts["the"] == 4
        assert wordcount.word_counts["fox"] == 1
