"""The example pipeline, tested the way users test theirs: with streamkit.testing."""

from __future__ import annotations

from apps import pageviews
from streamkit.testing import AppDriver


async def test_bots_are_dropped_and_visits_are_keyed_by_user() -> None:
    views = pageviews.generate(300)
    async with AppDriver(pageviews.app) as driver:
        for key, view in views:
            await driver.send(pageviews.pageviews, view, key=key)
        await driver.process()
        out = await driver.read(pageviews.visits)
    humans = [v for _k, v in views if pageviews.is_human(v)]
    assert len(out) == len(humans)
    assert all(e.key == e.value.user for e in out)
    # one user's visits all land in one partition of 'visits'
    partitions: dict[str, set[int]] = {}
    for e in out:
        partitions.setdefault(e.key, set()).add(e.partition)
    assert all(len(p) == 1 for p in partitions.values())
    assert sorted(e.value.seconds for e in out) == sorted(v.duration_ms / 1000 for v in humans)
