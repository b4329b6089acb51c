"""The app the ``--job`` tests run: one declared table over an orders topic. Its broker comes
from the environment, so the same module serves a worker and a backfill on any directory."""

from __future__ import annotations

import os

import streamkit as sk

app = sk.App("jbf", broker=os.environ.get("BF_BROKER", "file://.streamkit"))
orders = app.topic("orders", key_type=str, value_type=dict, partitions=3)
per_user = app.stream(orders).group_by(lambda o: o["user"], name="user").count("orders_per_user")
