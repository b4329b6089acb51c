"""An app the broker-outage tests run with ``streamkit worker``: it copies its input to an
output topic and commits only when it stops (the commit interval is an hour), so a stop
during an outage has processed offsets (and, exactly-once, open transactions) to commit.
It logs "copied N records" each time it has copied another OUTAGE_REPORT_EVERY records.

Configured by environment: OUTAGE_APP_ID, OUTAGE_BROKER, OUTAGE_REPORT_EVERY.
"""

from __future__ import annotations

import logging
import os

import streamkit as sk

app_id = os.environ.get("OUTAGE_APP_ID", "outage")
app = sk.App(app_id, broker=os.environ.get("OUTAGE_BROKER", "file://.streamkit"), commit_interval=3600.0)
source = app.topic(f"{app_id}-in", value_type=int, partitions=4)
output = app.topic(f"{app_id}-out", value_type=int, partitions=1)
REPORT_EVERY = int(os.environ.get("OUTAGE_REPORT_EVERY", "100"))
logger = logging.getLogger("outage_app")
copied = 0


@app.agent(source)
async def copy(stream: sk.Stream) -> None:
    global copied
    async for value in stream:
        await output.send(value=value)
        copied += 1
        if copied % REPORT_EVERY == 0:
            logger.info("copied %d records", copied)
