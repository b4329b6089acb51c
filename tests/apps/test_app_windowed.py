"""The windows example: per-minute counts emitted once on close, sessions, late views."""

from __future__ import annotations

from apps import windowed
from streamkit.testing import AppDriver

T0 = 1_700_000_040_000  # a round minute (ms)


async def test_minutes_close_once_sessions_merge_and_late_views_are_set_aside() -> None:
    async with AppDriver(windowed.app) as driver:
        for offset_s, url in [(0, "/"), (20, "/cart"), (59, "/pay"), (75, "/"), (200, "/help")]:
            await driver.send(windowed.views, {"url": url}, key="ann", timestamp=T0 + offset_s * 1000)
        await driver.send(windowed.views, {"url": "/old"}, key="ann", timestamp=T0 + 5_000)  # late
        await driver.process()
        minutes = [(e.value["window_start"] - T0, e.value["value"]) for e in await driver.read(windowed.views_per_minute_topic)]
        updates = [e.value for e in await driver.read(windowed.session_updates)]
        late = await driver.read(windowed.app.topics["windowed-late"])
        assert windowed.sessions.windows("ann")[-1]["value"] == ["/", "/cart", "/pay", "/", "/help", "/old"]
    # Each minute once, when stream time passed its end + 10 s of grace: 0-60 s and 60-120 s.
    assert minutes == [(0, 3), (60_000, 1)]
    # Sessions: one session that every view extends (all within 30 minutes of each other).
    assert updates[-1]["window_start"] == T0 and updates[-1]["window_end"] == T0 + 200_000
    # The view at 5 s came after stream time reached 200 s: its minute had closed.
    assert len(late) == 1 and dict(late[0].headers)["streamkit.reason"] == b"window-closed"
