"""User sessions: session windows that close after 30 minutes without a view.

    clicks (keyed by user) --window(Session 30 min, grace 1 min)--> sessions
        --emit on close--> user-sessions (keyed by user)

A session is a user's run of clicks with no gap longer than 30 minutes, by the clicks' own
timestamps. A click that arrives late but falls between two sessions of its user bridges
them: they merge into one (Kafka Streams' session semantics). Once stream time is more than
30 minutes (+ 1 minute of grace) past a session's last click, no click can extend it any more:
it is written once to ``user-sessions`` as ``{"window_start": first click ms, "window_end":
last click ms, "value": {"clicks": n, "pages": [the distinct paths]}}``.

Run it:

    streamkit worker -A apps.user_sessions:app --web-port 6067
    streamkit send -A apps.user_sessions:app clicks '{"path": "/"}' --key ann
    streamkit consume user-sessions -A apps.user_sessions:app
    curl -s 127.0.0.1:6067/tables/sessions/ann      # ann's sessions still open
"""

from __future__ import annotations

import os
from typing import Any

import streamkit as sk
from streamkit.windows import Session

app = sk.App("user_sessions", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"))
clicks = app.topic("clicks", key_type=str, value_type=dict, partitions=4)
sessions_topic = app.topic("user-sessions", key_type=str, value_type=dict, partitions=4)

Summary = dict[str, Any]  # {"clicks": n, "pages": [paths]}


def start() -> Summary:
    return {"clicks": 0, "pages": []}


def add(user: str, click: dict[str, Any], summary: Summary) -> Summary:
    pages = summary["pages"] if click["path"] in summary["pages"] else [*summary["pages"], click["path"]]
    return {"clicks": summary["clicks"] + 1, "pages": pages}


def merge(user: str, first: Summary, second: Summary) -> Summary:
    """Two sessions a late click bridged: ``first`` holds the earlier one."""
    pages = first["pages"] + [p for p in second["pages"] if p not in first["pages"]]
    return {"clicks": first["clicks"] + second["clicks"], "pages": pages}


sessions = (
    app.stream(clicks)
    .group_by_key()
    .window(Session(30 * 60, grace=60))
    .aggregate("sessions", start, add, merger=merge, key_type=str)
)
sessions.to_stream(emit="close").to(sessions_topic)
