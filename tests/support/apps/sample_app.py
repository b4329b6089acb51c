"""An app the process-level engine tests run with ``streamkit worker``.

Configured by environment: SAMPLE_APP_ID, SAMPLE_BROKER, SAMPLE_DELAY_S (per record).
It copies each input to the output topic with the input's position, so a test can tell
which inputs were processed and which were processed twice.
"""

from __future__ import annotations

import asyncio
import os

import streamkit as sk

app_id = os.environ.get("SAMPLE_APP_ID", "sample")
app = sk.App(app_id, broker=os.environ.get("SAMPLE_BROKER", "file://.streamkit"), commit_interval=0.2)
source = app.topic(f"{app_id}-in", value_type=int, partitions=4)
output = app.topic(f"{app_id}-out", value_type=dict, partitions=1)
DELAY_S = float(os.environ.get("SAMPLE_DELAY_S", "0"))


@app.agent(source)
async def copy(stream: sk.Stream) -> None:
    async for event in stream.events():
        if DELAY_S:
            await asyncio.sleep(DELAY_S)
        await output.send(value={"v": event.value, "p": event.partition, "o": event.offset})
