"""Event-time windows, declared: page views per user per minute (tumbling, each minute emitted
once when it closes) and user sessions (session windows, 30 minutes of inactivity).

    views (keyed by user) --window(Tumbling 60 s)--> views_per_minute --emit on close--> views-per-minute
    views (keyed by user) --window(Session 30 min)--> sessions --every update--> session-updates

Windows follow the records' timestamps (event time), never the wall clock: a replay of the same
input gives the same windows. A view more than 10 s late for its minute goes to
``windowed-late`` instead of being counted.

Run it:

    streamkit worker -A apps.windowed:app --web-port 6066
    streamkit send -A apps.windowed:app views '{"url": "/home"}' --key ann
    curl -s 127.0.0.1:6066/tables/views_per_minute/ann     # {"key": "ann", "windows": [...]}
"""

from __future__ import annotations

import os

import streamkit as sk
from streamkit.windows import Session, Tumbling

app = sk.App("windowed", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"))
views = app.topic("views", key_type=str, value_type=dict, partitions=4)
views_per_minute_topic = app.topic("views-per-minute", key_type=str, value_type=dict, partitions=4)
session_updates = app.topic("session-updates", key_type=str, value_type=dict, partitions=4)

views_per_minute = (
    app.stream(views).group_by_key().window(Tumbling(60, grace=10))
    .count("views_per_minute", key_type=str, value_type=int)
)
views_per_minute.to_stream(emit="close").to(views_per_minute_topic)

sessions = (
    app.stream(views).group_by_key(name="session").window(Session(30 * 60))
    .aggregate(
        "sessions",
        lambda: [],
        lambda user, view, pages: [*pages, view["url"]],
        merger=lambda user, a, b: a + b,
        key_type=str,
    )
)
sessions.to_stream(emit="update").to(session_updates)
