"""A small counting app the table tests run: ``counts[key] += value``; a negative value
deletes the key. Its broker and state directory come from the environment when it runs as a
worker subprocess (crash tests), and so does its name (``TCOUNT_ID``): on a broker or Kafka
shared by the session each test names its own app, whose input is then ``<id>-events``
(``counting_log.events_topic``)."""

from __future__ import annotations

import os

import streamkit as sk

DEFAULT_ID = "tcount"


def events_topic(app_id: str) -> str:
    """The app's input topic: ``events`` for the default app (the embedded tests' name), else
    ``<app_id>-events``."""
    return "events" if app_id == DEFAULT_ID else f"{app_id}-events"


def declare(
    app_id: str = DEFAULT_ID,
    broker: str = "file://.streamkit",
    *,
    commit_interval: float = 1.0,
    store: str = "rocksdb",
    standby_replicas: int = 0,
) -> tuple[sk.App, sk.Topic, sk.TableT]:
    """The counting app as ``app_id`` on ``broker``: the app, its input and its table."""
    app = sk.App(app_id, broker=broker, commit_interval=commit_interval)
    events = app.topic(events_topic(app_id), key_type=str, value_type=int, partitions=3)
    counts = app.Table("counts", default=int, key_type=str, value_type=int, store=store, standby_replicas=standby_replicas)

    @app.agent(events)
    async def count(stream: sk.Stream) -> None:
        async for key, value in stream.items():
            if value < 0:
                counts.pop(key, None)
            else:
                counts[key] += value

    return app, events, counts


app, events, counts = declare(
    os.environ.get("TCOUNT_ID", DEFAULT_ID),
    os.environ.get("TCOUNT_BROKER", "file://.streamkit"),
    commit_interval=float(os.environ.get("TCOUNT_COMMIT_S", "1.0")),
    store=os.environ.get("TCOUNT_STORE", "rocksdb"),
    standby_replicas=int(os.environ.get("TCOUNT_STANDBY", "0")),
)


def reference(pairs: list[tuple[str, int]]) -> dict[str, int]:
    """What the table must hold after ``pairs``, in plain Python."""
    model: dict[str, int] = {}
    for key, value in pairs:
        if value < 0:
            model.pop(key, None)
        else:
            model[key] = model.get(key, 0) + value
    return model
