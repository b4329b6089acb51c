"""A small counting app the table tests run: ``counts[key] += value``; a negative value
deletes the key. Its broker and state directory come from the environment when it runs as a
worker subprocess (crash tests)."""

from __future__ import annotations

import os

import streamkit as sk

app = sk.App(
    "tcount",
    broker=os.environ.get("TCOUNT_BROKER", "file://.streamkit"),
    commit_interval=float(os.environ.get("TCOUNT_COMMIT_S", "1.0")),
)
events = app.topic("events", key_type=str, value_type=int, partitions=3)
counts = app.Table(
    "counts",
    default=int,
    key_type=str,
    value_type=int,
    store=os.environ.get("TCOUNT_STORE", "rocksdb"),
    standby_replicas=int(os.environ.get("TCOUNT_STANDBY", "0")),
)


@app.agent(events)
async def count(stream: sk.Stream) -> None:
    async for key, value in stream.items():
        if value < 0:
            counts.pop(key, None)
        else:
            counts[key] += value


def reference(pairs: list[tuple[str, int]]) -> dict[str, int]:
    """What the table must hold after ``pairs``, in plain Python."""
    model: dict[str, int] = {}
    for key, value in pairs:
        if value < 0:
            model.pop(key, None)
        else:
            model[key] = model.get(key, 0) + value
    return model
