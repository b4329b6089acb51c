"""Page views per user per minute: a tumbling window, each minute emitted once when it closes.

    page-views (keyed by session) --group_by(user)--> window(Tumbling 60 s, grace 10 s)
        --count--> views_per_minute --emit on close--> views-per-minute (keyed by user)

Each view is counted in the minute of its own timestamp (event time), so a replay of the same
views gives the same minutes. A minute is final once the views' stream time has passed its end
by the 10 s of grace: only then is it written, once, as ``{"window_start": ms, "window_end": ms,
"value": views}``. A view later than that changes nothing and goes to ``views_per_minute-late``
with headers saying why. Views are re-keyed by user first, so one user's views from several
sessions meet in one partition (the repartition topic is created and read for you).

Run it:

    streamkit worker -A apps.views_per_minute:app --web-port 6066
    streamkit send -A apps.views_per_minute:app page-views '{"user": "ann", "url": "/"}' --key s1
    streamkit consume views-per-minute -A apps.views_per_minute:app
    curl -s 127.0.0.1:6066/tables/views_per_minute/ann      # the minutes still kept
"""

from __future__ import annotations

import os

import streamkit as sk
from streamkit.windows import Tumbling


class PageView(sk.Record):
    user: str
    url: str


app = sk.App("views_per_minute", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"))
page_views = app.topic("page-views", key_type=str, value_type=PageView, partitions=4)
per_minute_topic = app.topic("views-per-minute", key_type=str, value_type=dict, partitions=4)

views_per_minute = (
    app.stream(page_views)
    .group_by(lambda view: view.user, name="user")
    .window(Tumbling(60, grace=10))
    .count("views_per_minute", key_type=str, value_type=int)
)
views_per_minute.to_stream(emit="close").to(per_minute_topic)
