"""The app the backfill tests run: declared tables over an orders topic. Its broker comes from
the environment, so the same module serves a worker and a backfill on any directory, and so may
its name (``BF_ID``): on a shared broker or Kafka a test names its own app, whose source topic is
then ``<id>-orders``."""

from __future__ import annotations

import os

import streamkit as sk

APP_ID = os.environ.get("BF_ID", "bf")

app = sk.App(APP_ID, broker=os.environ.get("BF_BROKER", "file://.streamkit"))
orders = app.topic("orders" if APP_ID == "bf" else f"{APP_ID}-orders", key_type=str, value_type=dict, partitions=3)
per_user = app.stream(orders).group_by(lambda o: o["user"], name="user").count("orders_per_user")
latest = app.stream(orders).map_values(lambda o: o["amount"]).to_table("latest_amount")
