"""A task reading several partitions (the two sides of a join) hands out the records it holds
in timestamp order across them, whatever order the fetches came in; offset order within each."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit.runtime.inbox import Inbox, RootSource


@dataclass(frozen=True)
class Rec:
    offset: int
    timestamp: int
    key: bytes | None = None
    value: bytes | None = b"v"
    headers: Sequence[tuple[str, bytes | None]] = ()


def _drain(batches: list[tuple[int, list[int]]]) -> list[tuple[int, int, int]]:
    topic = sk.App("order").topic("t", key_serializer="raw", value_serializer="raw")
    tps = [sk.TopicPartition("left", 0), sk.TopicPartition("right", 0)]
    wakeup = asyncio.Event()
    inboxes = [Inbox(tp, topic, wakeup) for tp in tps]

    async def no_dead_letter(*_: object) -> None:
        raise AssertionError("nothing fails to decode here")

    source = RootSource(inboxes, wakeup, no_dead_letter, lambda *_: source)  # type: ignore[arg-type,return-value]
    source._countdown = 10**9  # no turn of the event loop falls due
    ends = [0, 0]
    for side, stamps in batches:  # every fetch arrives before the task reads
        inboxes[side].put([Rec(ends[side] + i, ts) for i, ts in enumerate(stamps)])
        ends[side] += len(stamps)
    out = []
    while (event := source.get_nowait()) is not None:
        out.append((0 if event.topic == "left" else 1, event.offset, event.timestamp))
    return out


fetches = st.lists(st.tuples(st.integers(0, 1), st.lists(st.integers(0, 50), min_size=1, max_size=8)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(batches=fetches)
def test_records_held_come_out_by_timestamp_across_partitions(batches: list[tuple[int, list[int]]]) -> None:
    out = contextvars.Context().run(_drain, batches)
    # Reference: repeatedly take the partition whose next record has the lowest timestamp
    # (the left one on a tie).
    queues: list[list[tuple[int, int]]] = [[], []]
    for side, stamps in batches:
        queues[side].extend((len(queues[side]), ts) for ts in stamps)
    expected = []
    while queues[0] or queues[1]:
        side = min((q[0][1], s) for s, q in enumerate(queues) if q)[1]
        offset, ts = queues[side].pop(0)
        expected.append((side, offset, ts))
    assert out == expected
