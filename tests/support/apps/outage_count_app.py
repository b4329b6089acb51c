"""The app the Kafka outage tests run with ``streamkit worker``: it counts the records of each
key in a table and sends each new count to ``<app id>-counts``, so the last count of each key
there, read read_committed, tells whether every input record was counted once (exactly-once)
or at least once; it forwards each input value to ``<app id>-seen``, so a lost or doubled
record is named (the tests number their input).

Configured by environment: OUTAGE_APP_ID, OUTAGE_BROKER, OUTAGE_GUARANTEE, OUTAGE_DELAY_S (a
pause per record, so that a burst of records is still being processed, and its counts sent,
when the test stops Kafka), OUTAGE_REPLICATION (the replication factor of the topics the
worker creates: 3 on the three-node cluster).
"""

from __future__ import annotations

import asyncio
import os

import streamkit as sk

app_id = os.environ.get("OUTAGE_APP_ID", "outage-count")
app = sk.App(
    app_id,
    broker=os.environ.get("OUTAGE_BROKER", "file://.streamkit"),
    processing_guarantee=os.environ.get("OUTAGE_GUARANTEE", "exactly_once"),
    commit_interval=0.5,
    topic_replication_factor=int(os.environ.get("OUTAGE_REPLICATION", "1")),
)
source = app.topic(f"{app_id}-in", key_type=str, value_type=int, partitions=2)
counts_topic = app.topic(f"{app_id}-counts", key_type=str, value_type=int, partitions=1)
seen_topic = app.topic(f"{app_id}-seen", key_type=str, value_type=int, partitions=1)
counts = app.Table("counts", default=int, key_type=str, value_type=int, partitions=2)
DELAY_S = float(os.environ.get("OUTAGE_DELAY_S", "0"))


@app.agent(source)
async def count(stream: sk.Stream) -> None:
    async for key, value in stream.items():
        if DELAY_S:
            await asyncio.sleep(DELAY_S)
        counts[key] += 1
        await counts_topic.send(key=key, value=counts[key])
        await seen_topic.send(key=key, value=value)
