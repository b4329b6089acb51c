"""An app whose table is untyped, as faust-streaming's ``examples/tabletest.py`` declares its
``counts`` (``app.Table('counts', default=int)``): its keys are JSON, so the string ``"0"`` and
the integer ``0`` are two keys. Its input topic's keys are JSON too, so a record lands in the
partition its table key hashes to (the one a query routes to). The broker comes from
``STREAMKIT_BROKER`` when it runs as a worker subprocess, and its name from ``UNTYPED_ID`` (then
its input is ``<id>-events``, as ``counting_log.produce`` writes it) on a shared broker or Kafka."""

from __future__ import annotations

import os

import streamkit as sk

PARTITIONS = 4

APP_ID = os.environ.get("UNTYPED_ID")

app = sk.App(APP_ID or "untyped", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"), commit_interval=0.2)
events = app.topic(f"{APP_ID}-events" if APP_ID else "events", key_serializer="json", value_type=int, partitions=PARTITIONS)
totals = app.Table("totals", default=int, partitions=PARTITIONS)


@app.agent(events)
async def add(stream: sk.Stream) -> None:
    async for key, value in stream.items():
        totals[key] += value
