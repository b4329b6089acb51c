"""Page views per user per minute: each minute once, when it closes; re-keyed by user; late
views set aside."""

from __future__ import annotations

from apps import views_per_minute as example
from streamkit.testing import AppDriver

T0 = 1_700_000_040_000  # a round minute (ms)


async def test_each_users_minutes_are_emitted_once_when_they_close() -> None:
    views = [  # (seconds after T0, session key, user, url), in time order but for two
        (1, "s1", "ann", "/"), (20, "s2", "ann", "/cart"), (30, "s3", "bob", "/"),
        (59, "s1", "ann", "/pay"), (61, "s3", "bob", "/help"), (69, "s2", "ann", "/"),
        (50, "s3", "bob", "/in-grace"),  # stream time is at most 69 s: minute 0 is open until 70 s
        (75, "s4", "cy", "/"), (130, "s4", "cy", "/"),
        (181, "s1", "ann", "/"), (185, "s3", "bob", "/"), (190, "s4", "cy", "/"),
        (10, "s2", "ann", "/too-late"),  # minute 0 closed long ago
    ]
    async with AppDriver(example.app) as driver:
        for offset_s, session, user, url in views:
            await driver.send(example.page_views, example.PageView(user=user, url=url), key=session,
                              timestamp=T0 + offset_s * 1000)
        await driver.process()
        emitted = await driver.read(example.per_minute_topic)
        late = await driver.read(example.app.topics["views_per_minute-late"])
        still_open = example.views_per_minute.windows("ann")
    minutes = [(e.key, (e.value["window_start"] - T0) // 1000, e.value["value"]) for e in emitted]
    # A minute is written once its user's stream time passed its end + 10 s; the last minute
    # of each user is still open. Each written once, never updated.
    assert sorted(minutes) == [("ann", 0, 3), ("ann", 60, 1), ("bob", 0, 2), ("bob", 60, 1),
                               ("cy", 60, 1), ("cy", 120, 1)]
    assert all(e.value["window_end"] - e.value["window_start"] == 60_000 for e in emitted)
    # Re-keyed by user: all of a user's minutes are in one partition, whatever the session.
    partitions: dict[str, set[int]] = {}
    for e in emitted:
        partitions.setdefault(e.key, set()).add(e.partition)
    assert all(len(p) == 1 for p in partitions.values())
    # The view at 10 s came when ann's stream time was 181 s: set aside, saying why.
    assert [(dict(e.headers)["streamkit.reason"], e.value["url"]) for e in late] == [(b"window-closed", "/too-late")]
    assert [(w["start"] - T0, w["value"]) for w in still_open] == [(180_000, 1)]
