"""The app the Kafka settings tests run as ``streamkit worker`` subprocesses: it forwards
``events`` to ``copies``, with the group settings (session timeout, static membership) and
the broker taken from the environment."""

from __future__ import annotations

import os

import streamkit as sk

app = sk.App(
    os.environ["SETTINGS_APP_ID"],
    broker=os.environ["SETTINGS_BROKER"],
    commit_interval=0.2,
    broker_session_timeout=float(os.environ.get("SETTINGS_SESSION_S", "10")),
    consumer_group_instance_id=os.environ.get("SETTINGS_INSTANCE") or None,
)
events = app.topic(f"{app.id}-events", key_type=str, value_type=int, partitions=4)
copies = app.topic(f"{app.id}-copies", key_type=str, value_type=int, partitions=4)


@app.agent(events, sink=[copies])
async def forward(stream: sk.Stream):  # type: ignore[no-untyped-def]
    async for value in stream:
        yield value
