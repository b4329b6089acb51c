"""An app whose agent fails before its first read, for process-level tests of the back-off.

Configured by environment: FAILING_APP_BROKER, FAILING_APP_MAX (max_agent_failures).
"""

from __future__ import annotations

import os

import streamkit as sk

app = sk.App(
    "failing",
    broker=os.environ.get("FAILING_APP_BROKER", "file://.streamkit"),
    max_agent_failures=int(os.environ.get("FAILING_APP_MAX", "10")),
)
source = app.topic("failing-in", value_type=int)


@app.agent(source)
async def fail_early(stream: sk.Stream) -> None:
    raise ConnectionError("the database is unreachable")
    async for _ in stream:  # never reached
        pass
