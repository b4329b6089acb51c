"""The exactly-once tests' app: it counts each key's records into a table and writes one
output per input, ``"<input id>:<count after it>"``. Its broker, commit interval and
processing guarantee come from the environment when it runs as a worker subprocess, and so
does its name (``EOS_ID``): on Kafka, shared by the session, each test names its own app, whose
topics are then ``<id>-events`` and ``<id>-results`` (``topic_names``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import streamkit as sk

PARTITIONS = 3
DEFAULT_ID = "eoscount"


def topic_names(app_id: str) -> tuple[str, str]:
    """The app's input and output topics: ``events`` and ``results`` for the default app."""
    if app_id == DEFAULT_ID:
        return "events", "results"
    return f"{app_id}-events", f"{app_id}-results"


# Every PAUSE_EVERY-th input, the agent awaits a little *after* yielding its output, still
# holding the record: a commit must not seal that output without the record's offset.
PAUSE_EVERY = int(os.environ.get("EOS_PAUSE_EVERY", "0"))

APP_ID = os.environ.get("EOS_ID", DEFAULT_ID)
app = sk.App(
    APP_ID,
    broker=os.environ.get("EOS_BROKER", "file://.streamkit"),
    commit_interval=float(os.environ.get("EOS_COMMIT_S", "0.2")),
    processing_guarantee=os.environ.get("EOS_GUARANTEE", "exactly_once"),
)
events = app.topic(topic_names(APP_ID)[0], key_type=str, value_type=int, partitions=PARTITIONS)
results = app.topic(topic_names(APP_ID)[1], key_type=str, value_type=str, partitions=PARTITIONS)
counts = app.Table("counts", default=int, key_type=str, value_type=int, store="rocksdb")


@app.agent(events, sink=[results])
async def count(stream: sk.Stream) -> AsyncIterator[str]:
    async for key, value in stream.items():
        counts[key] += 1
        yield f"{value}:{counts[key]}"
        if PAUSE_EVERY and value % PAUSE_EVERY == 0:
            await asyncio.sleep(0.002)
