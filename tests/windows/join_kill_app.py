"""The app of ``test_join_kill.py``, run as a ``streamkit worker`` subprocess: one topic of
records tagged ``left`` or ``right`` (a self-join, so the join task sees them in the topic's
order), joined inner, left and outer into three output topics. Each output is ``[left id,
right id]`` (``None`` for a missing side). Its broker, commit interval and processing
guarantee come from the environment."""

from __future__ import annotations

import os
from typing import Any

import streamkit as sk

WITHIN_MS, GRACE_MS = 10, 4
HOWS = ("inner", "left", "outer")

app = sk.App(
    "jkill",
    broker=os.environ.get("JKILL_BROKER", "file://.streamkit"),
    commit_interval=float(os.environ.get("JKILL_COMMIT_S", "0.1")),
    processing_guarantee=os.environ.get("JKILL_GUARANTEE", "exactly_once"),
)
events = app.topic("events", key_type=str, value_type=dict, partitions=1)
outputs = {how: app.topic(f"joined-{how}", key_type=str, value_type=list, partitions=1) for how in HOWS}


def _pair(left: Any, right: Any) -> list[Any]:
    return [None if left is None else left["id"], None if right is None else right["id"]]


for _how in HOWS:
    _left = app.stream(events).filter(lambda v: v["side"] == "left")
    _right = app.stream(events).filter(lambda v: v["side"] == "right")
    _left.join(_right, _pair, within=WITHIN_MS / 1000, grace=GRACE_MS / 1000, how=_how, name=f"join-{_how}").to(
        outputs[_how]
    )
