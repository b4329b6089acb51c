"""Replaying the same input gives byte-identical output topics.

One app holds a windowed count for each window type (tumbling, hopping, session, sliding) and
each emit mode (``close``, ``update``), all over one 2-partition input. The same records
(out of order, late, with duplicate timestamps) go through it twice, each time on a fresh log
and state: once sent all at once and processed, once sent in random slices with a commit after
each (other fetches, other commit points). Every output topic must then hold the same
records, byte for byte: offset, timestamp, key, value and headers, partition by partition.
Nothing in them may depend on the wall clock or on how the input was batched.

The late topic ``<app>-late`` is shared by the app's eight windowed tables, each filled by its
own agent, so how their late records interleave in a partition depends on how the agents were
scheduled. Each table's own late records (by the ``streamkit.table`` header) must be
byte-identical, in order; and with one windowed table the whole late topic is (last test).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit._core.types import TopicPartition
from streamkit.testing import AppDriver
from streamkit.transport.base import TransportError
from streamkit.transport.connect import open_log_client
from streamkit.windows import Hopping, Session, Sliding, Tumbling

BASE = 1_700_000_040_000  # a round minute (ms)
PARTITIONS = 2
SPECS: dict[str, Any] = {
    "tumbling": Tumbling(10, grace=2),
    "hopping": Hopping(10, 4, grace=2),
    "session": Session(5, grace=2),
    "sliding": Sliding(6, grace=2),
}
EMITS = ("close", "update")
Input = list[tuple[str, int]]  # key, timestamp (ms after BASE)
RawRecord = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]


def windows_app() -> tuple[sk.App, sk.Topic, list[str]]:
    """The app, its input, and the names of every topic it writes to (outputs, late)."""
    app = sk.App("replay")
    views = app.topic("views", key_type=str, value_type=str, partitions=PARTITIONS)
    written = []
    for kind, spec in SPECS.items():
        for emit in EMITS:
            name = f"{kind}-{emit}"
            out = app.topic(f"out-{name}", key_type=str, value_type=dict, partitions=PARTITIONS)
            table = (app.stream(views).group_by_key(name=name).window(spec)
                     .count(f"count-{name}", key_type=str, value_type=int))
            table.to_stream(emit=emit).to(out)
            written.append(out.name)
    written.append("replay-late")
    return app, views, written


async def raw_topics(data_dir: str, names: list[str]) -> dict[tuple[str, int], list[RawRecord]]:
    """Every record of ``names`` as stored: offset, timestamp, key, value, headers."""
    client = open_log_client(f"file://{data_dir}")
    await client.start()
    reader = client.reader()
    out: dict[tuple[str, int], list[RawRecord]] = {}
    try:
        for name in names:
            for p in range(PARTITIONS):
                tp = TopicPartition(name, p)
                try:
                    start, end = await reader.bounds(tp)
                except TransportError:  # a topic of fewer partitions (the late topic)
                    break
                records: list[RawRecord] = []
                offset = start
                while offset < end:
                    chunk = await reader.read(tp, offset, 10_000)
                    records.extend(
                        (r.offset, r.timestamp, r.key, r.value, tuple((k, bytes(v)) for k, v in r.headers))
                        for r in chunk.records
                    )
                    offset = chunk.next_offset
                out[(name, p)] = records
    finally:
        await reader.aclose()
        await client.aclose()
    return out


async def run_once(
    records: Input, slices: list[int] | None, app_of: Callable[[], tuple[sk.App, sk.Topic, list[str]]] = windows_app,
) -> dict[tuple[str, int], list[RawRecord]]:
    """Run the app over ``records`` on a fresh log: in one go, or cut at ``slices`` with a
    process (and so a commit) after each part."""
    app, views, written = app_of()
    with tempfile.TemporaryDirectory(prefix="windows-replay-") as tmp:
        data_dir = str(Path(tmp) / "log")
        cuts = [0, *(slices or []), len(records)]
        async with AppDriver(app, data_dir=data_dir, state_dir=str(Path(tmp) / "state")) as driver:
            for lo, hi in itertools.pairwise(cuts):
                for key, ts in records[lo:hi]:
                    await driver.send(views, f"view-{ts}", key=key, timestamp=BASE + ts)
                await driver.process()
        return await raw_topics(data_dir, written)


def comparable(topics: dict[tuple[str, int], list[RawRecord]]) -> dict[Any, list[Any]]:
    """The outputs as they are; the late topic split by table (offsets left out there)."""
    out: dict[Any, list[Any]] = {}
    for (name, p), records in topics.items():
        if name != "replay-late":
            out[(name, p)] = records
            continue
        for _offset, *rest in records:
            table = dict(rest[3])["streamkit.table"]
            out.setdefault(("late", p, table), []).append(rest)
    return out


@st.composite
def inputs(draw: st.DrawFn) -> tuple[Input, list[int]]:
    """Out-of-order, late and duplicate timestamps over a minute; where to slice it."""
    n = draw(st.integers(1, 60))
    t, records = 0, []
    for _ in range(n):
        t += draw(st.integers(0, 3_000))
        ts = max(0, t - draw(st.sampled_from([0, 0, 0, 500, 4_000, 15_000])))
        records.append((draw(st.sampled_from(["ann", "bob", "cy", "dee", "eve"])), ts))
    slices = sorted(set(draw(st.lists(st.integers(1, n), max_size=4))))
    return records, slices


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=inputs())
def test_the_same_input_twice_gives_byte_identical_outputs(case: tuple[Input, list[int]]) -> None:
    records, slices = case
    first = asyncio.run(run_once(records, None))
    second = asyncio.run(run_once(records, slices))
    assert comparable(first) == comparable(second)
    # Not vacuous: every window type wrote updates, and whatever closed was emitted.
    for kind in SPECS:
        assert any(first[(f"out-{kind}-update", p)] for p in range(PARTITIONS)), kind


def test_replays_of_a_fixed_input_emit_closes_and_late_records_identically() -> None:
    rng = random.Random(7)
    records = [(rng.choice(["ann", "bob", "cy"]), t * 700 + rng.choice([0, 0, -3_000, -20_000])) for t in range(200)]
    records = [(k, max(0, ts)) for k, ts in records]
    first = asyncio.run(run_once(records, None))
    second = asyncio.run(run_once(records, [37, 38, 120]))
    assert comparable(first) == comparable(second)
    for kind in SPECS:
        assert sum(len(first[(f"out-{kind}-close", p)]) for p in range(PARTITIONS)) > 10, kind
    assert sum(len(first.get(("replay-late", p), [])) for p in range(PARTITIONS)) > 0


def test_with_one_windowed_table_the_late_topic_is_byte_identical_too() -> None:
    def app_of() -> tuple[sk.App, sk.Topic, list[str]]:
        app = sk.App("replay")
        views = app.topic("views", key_type=str, value_type=str, partitions=PARTITIONS)
        out = app.topic("out", key_type=str, value_type=dict, partitions=PARTITIONS)
        table = app.stream(views).group_by_key().window(Session(5, grace=2)).count("sessions", key_type=str)
        table.to_stream(emit="close").to(out)
        return app, views, ["out", "replay-late"]

    rng = random.Random(11)
    records = [(rng.choice(["ann", "bob", "cy"]), max(0, t * 900 - rng.choice([0, 0, 30_000]))) for t in range(150)]
    first = asyncio.run(run_once(records, None, app_of))
    second = asyncio.run(run_once(records, [1, 75, 76], app_of))
    assert first == second
    assert sum(len(first.get(("replay-late", p), [])) for p in range(PARTITIONS)) > 5
