"""The app of the backfill order tests (issue 22): events of four source partitions re-keyed by
user (a repartition topic fed by every source partition), folded in an order-sensitive way.

* ``trail``: per user, the list of the events' numbers, in the order the task folds them;
* ``per_user_10s``: per user, tumbling 10 s windows with a 2 s grace (less than the sources'
  disorder), counted: which events are late depends on the order too.
"""

from __future__ import annotations

import os

import streamkit as sk
from streamkit.windows import Tumbling

app = sk.App("ord", broker=os.environ.get("BF_BROKER", "file://.streamkit"))
events = app.topic("events", key_type=str, value_type=dict, partitions=4)

trail = (
    app.stream(events)
    .group_by(lambda e: e["user"], name="user")
    .aggregate("trail", list, lambda _user, e, seen: [*seen, e["n"]], key_type=str, value_type=list)
)

per_user_10s = (
    app.stream(events)
    .group_by(lambda e: e["user"], name="user10")
    .window(Tumbling(10, grace=2))
    .count("per_user_10s", key_type=str, value_type=int)
)
