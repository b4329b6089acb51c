"""The app the windowed backfill tests run. Its broker comes from the environment, so the same
module serves a worker and a backfill on any directory, and so may its name (``BF_ID``): on a
shared broker or Kafka a test names its own app, whose topics then start with ``<id>-``.

* ``clicks_per_page``: clicks re-keyed by page (a repartition topic), hopping windows, each
  window emitted once when it closes (to ``page-windows``);
* ``visit_sessions``: visits keyed by user as they come (no repartition), session windows.
"""

from __future__ import annotations

import os

import streamkit as sk
from streamkit.windows import Hopping, Session

APP_ID = os.environ.get("BF_ID", "wbf")
PREFIX = "" if APP_ID == "wbf" else f"{APP_ID}-"

app = sk.App(APP_ID, broker=os.environ.get("BF_BROKER", "file://.streamkit"))
clicks = app.topic(f"{PREFIX}clicks", key_type=str, value_type=dict, partitions=3)
visits = app.topic(f"{PREFIX}visits", key_type=str, value_type=str, partitions=2)
page_windows = app.topic(f"{PREFIX}page-windows", key_type=str, value_type=dict, partitions=1)

per_page = (
    app.stream(clicks)
    .group_by(lambda c: c["page"], name="page")
    .window(Hopping(60, 20, grace=30))
    .count("clicks_per_page", key_type=str, value_type=int)
)
per_page.to_stream(emit="close").to(page_windows)

sessions = (
    app.stream(visits)
    .group_by_key()
    .window(Session(30, grace=5))
    .aggregate(
        "visit_sessions", list, lambda _user, page, pages: [*pages, page], lambda _user, a, b: [*a, *b],
        key_type=str, value_type=list,
    )
)
