"""A Faust-spelled windowed table that ``test_faust_windows`` runs with ``streamkit worker``
against ``streamkit broker``: counts per key and minute, each closed window sent (from an
async ``on_window_close``) to ``fw-closed``. The broker comes from ``--broker``."""

from __future__ import annotations

from typing import Any

import streamkit as sk

app = sk.App("fwbroker", commit_interval=0.2)
views = app.topic("fw-views", key_type=str, value_type=str, partitions=1)
closed = app.topic("fw-closed", key_type=str, value_type=dict, partitions=1)


async def on_close(key: Any, value: int) -> None:
    k, (start, end) = key
    await closed.send(key=k, value={"start": start, "end": end, "count": value})


per_minute = app.Table("per_minute", default=int, on_window_close=on_close).tumbling(60)


@app.agent(views)
async def count(stream: sk.Stream) -> None:
    async for event in stream.events():
        per_minute[event.key] += 1
