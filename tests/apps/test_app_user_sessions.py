"""User sessions: a session closes 30 minutes after its last click (plus grace) and is written
once; a late click that bridges two sessions merges them."""

from __future__ import annotations

from apps import user_sessions as example
from streamkit.testing import AppDriver

T0 = 1_700_000_040_000


async def test_sessions_are_written_once_when_they_close_and_a_bridging_click_merges_two() -> None:
    clicks = [  # (seconds, user, path), in time order but for the bridging click
        (0, "ann", "/"), (600, "ann", "/cart"), (720, "bob", "/"),
        # 30.5 minutes after /cart: a new session. The first one is still open: it closes when
        # stream time passes its end + 30 minutes + 1 minute of grace (2,460 s).
        (2430, "ann", "/help"),
        (1500, "ann", "/faq"),       # late, within 30 minutes of both: bridges them into one
        (3600, "bob", "/"),          # 48 minutes after bob's first: a new session
        (7800, "ann", "/"), (7860, "bob", "/"),  # much later: every session above has closed
    ]
    async with AppDriver(example.app) as driver:
        for second, user, path in clicks:
            await driver.send(example.clicks, {"path": path}, key=user, timestamp=T0 + second * 1000)
        await driver.process()
        emitted = await driver.read(example.sessions_topic)
        open_for_ann = example.sessions.windows("ann")
    sessions = sorted((e.key, (e.value["window_start"] - T0) // 1000, (e.value["window_end"] - T0) // 1000,
                       e.value["value"]["clicks"], sorted(e.value["value"]["pages"])) for e in emitted)
    assert sessions == [
        ("ann", 0, 2430, 4, ["/", "/cart", "/faq", "/help"]),  # the two merged by /faq
        ("bob", 720, 720, 1, ["/"]),
        ("bob", 3600, 3600, 1, ["/"]),
    ]
    assert len(emitted) == len(sessions)  # each once
    assert [(w["start"] - T0, w["value"]["clicks"]) for w in open_for_ann] == [(7_800_000, 1)]
