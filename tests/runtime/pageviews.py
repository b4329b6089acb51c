"""Issue 22's case: page views in several partitions, out of order, some late by minutes,
counted per user and minute after a re-key; and what a worker (or a backfill) must give for
them: the model of one windowed task per repartition partition fed the timestamp-merged order
of the source partitions (``heapq.merge``, ``_core/order.py``).

The app is ``make_app``'s; ``app`` is one named ``pv``, configured from the environment
(``PV_BROKER``, ``PV_GUARANTEE``), for a ``streamkit worker`` subprocess or a backfill.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import time
from typing import Any

import streamkit as sk
from streamkit._core.partitioner import partition_for_key
from streamkit.windows import Tumbling
from tests.windows.test_reference_model import model_time

# A round minute two hours ago: recent, so that no retention by time deletes the records
# (late records keep their own time) while a test reads them.
BASE = int(time.time() * 1000) // 60_000 * 60_000 - 2 * 3_600_000
PARTITIONS = 4
SIZE_MS, GRACE_MS = 60_000, 5_000

Views = list[list[tuple[str, int]]]  # per source partition, in offset order: (user, timestamp ms)


def page_views(n: int, seed: int, *, users: int = 60, minutes: int = 80) -> Views:
    """``n`` views over ``minutes``, each partition in arrival order: out of order by up to
    20 s, 2% late by one to five minutes."""
    rng = random.Random(seed)
    out: Views = []
    for _p in range(PARTITIONS):
        arrivals = sorted(rng.randrange(minutes * 60_000) for _ in range(n // PARTITIONS))
        views = []
        for t in arrivals:
            ts = t - rng.randrange(20_000)
            if rng.random() < 0.02:
                ts -= rng.randrange(60_000, 300_000)
            views.append((f"u{rng.randrange(users)}", BASE + max(0, ts)))
        out.append(views)
    return out


def merged(views: Views) -> list[tuple[int, str, int]]:
    """The views in the timestamp-merged order of the partitions: (source partition, user)
    with the timestamp, as a worker with ``max_task_drift_ms=0`` hands them out."""
    tagged = [[(ts, p, user) for user, ts in part] for p, part in enumerate(views)]
    return [(p, user, ts) for ts, p, user in heapq.merge(*tagged, key=lambda r: r[0])]


Late = list[tuple[str, int]]  # user, timestamp
Closed = list[tuple[str, int, int, int]]  # user, window start, end, count


def expected(views: Views) -> tuple[Late, Closed]:
    """The late records and the closed windows (with their counts) of the model."""
    by_partition: dict[int, list[tuple[bytes, int]]] = {}
    for _p, user, ts in merged(views):
        raw = json.dumps(user).encode()
        by_partition.setdefault(partition_for_key(raw, PARTITIONS), []).append((raw, ts - BASE))
    late: Late = []
    closed: Closed = []
    for records in by_partition.values():
        model = model_time(SIZE_MS, SIZE_MS, GRACE_MS, records)
        late += [(json.loads(records[i][0]), records[i][1] + BASE) for i, _reason in model.late]
        closed += [(json.loads(k), s + BASE, e + BASE, len(ids)) for k, s, e, ids in model.closes]
    return sorted(late), sorted(closed)


def make_app(name: str, broker: str, **settings: Any) -> tuple[sk.App, sk.Topic, sk.Topic]:
    """``app.stream(views).group_by(user).window(Tumbling(60, grace=5)).count(...)``, its
    closed windows to a topic: ``<name>-views`` to ``<name>-closed`` (a broker shared by
    several tests keeps their inputs apart)."""
    app = sk.App(name, broker=broker, **settings)
    views = app.topic(f"{name}-views", key_type=str, value_type=dict, partitions=PARTITIONS)
    closed = app.topic(f"{name}-closed", key_type=str, value_type=dict, partitions=1)
    table = (
        app.stream(views)
        .group_by(lambda v: v["user"])
        .window(Tumbling(SIZE_MS / 1000, grace=GRACE_MS / 1000))
        .count("per_minute", key_type=str, value_type=int)
    )
    table.to_stream(emit="close").to(closed)
    return app, views, closed


# The app of a ``streamkit worker -A tests.runtime.pageviews:app`` subprocess and of a
# backfill (its executors import it, with the environment Spark's workers started with).
app, _views, _closed = make_app(
    "pv", os.environ.get("PV_BROKER", "file://.streamkit"),
    processing_guarantee=os.environ.get("PV_GUARANTEE", "at_least_once"), commit_interval=0.2,
)
