"""Commit positions of inboxes against a reference model, under random hand-outs.

A root source takes records from its inboxes a chunk at a time; the records of a chunk not
yet handed out, and those handed out and not finished (acked or released), hold the commit
position back. The model keeps, per partition, the offset of the next record not handed out
and the set of pending offsets; the commit position must be the smallest of them, exactly:
never past an unfinished record (that would lose it), never behind a finished prefix for
long (that would redo work).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit.runtime.inbox import Inbox, RootSource
from streamkit.streams import Event


@dataclass(frozen=True)
class Rec:
    offset: int
    timestamp: int = 0
    key: bytes | None = None
    value: bytes | None = b"v"
    headers: Sequence[tuple[str, bytes | None]] = ()


class Model:
    def __init__(self, tps: list[sk.TopicPartition]) -> None:
        self.end = {tp: 0 for tp in tps}  # next offset to put
        self.handed = {tp: 0 for tp in tps}  # next offset to hand out
        self.pending: dict[sk.TopicPartition, set[int]] = {tp: set() for tp in tps}
        self.started = {tp: False for tp in tps}

    def position(self, tp: sk.TopicPartition) -> int | None:
        if not self.started[tp]:
            return None
        return min([self.handed[tp], *self.pending[tp]])


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 1), st.integers(1, 2500)),
        st.tuples(st.just("get"), st.integers(1, 1500), st.just(0)),
        st.tuples(st.just("ack"), st.just(0), st.just(0)),
        st.tuples(st.just("release"), st.integers(0, 10_000), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(merged=st.booleans(), steps=ops)
def test_commit_position_matches_the_model(merged: bool, steps: list[tuple[str, int, int]]) -> None:
    topic = sk.App("props").topic("t", key_serializer="raw", value_serializer="raw")
    tps = [sk.TopicPartition("t", 0), sk.TopicPartition("u", 0)][: 2 if merged else 1]
    wakeup = asyncio.Event()
    inboxes = [Inbox(tp, topic, wakeup) for tp in tps]

    async def no_dead_letter(*_: object) -> None:
        raise AssertionError("nothing fails to decode here")

    source = RootSource(inboxes, wakeup, no_dead_letter, lambda *_: source)  # type: ignore[arg-type,return-value]
    model = Model(tps)
    handed: list[Event] = []
    for op, a, b in steps:
        if op == "put":
            tp = tps[a % len(tps)]
            inbox = inboxes[a % len(tps)]
            start = model.end[tp]
            inbox.put([Rec(offset) for offset in range(start, start + b)])
            model.end[tp] = start + b
            model.started[tp] = True
        elif op == "get":
            for _ in range(a):
                event = source.get_nowait()
                if event is None:
                    continue  # nothing waiting, or a turn of the event loop is due: no change
                tp = sk.TopicPartition(event.topic, event.partition)
                assert event.offset == model.handed[tp], "records of a partition are handed out in order"
                model.handed[tp] += 1
                model.pending[tp].add(event.offset)
                handed.append(event)
        elif op == "ack":
            source.ack()
            for pending in model.pending.values():
                pending.clear()
            handed.clear()
        elif op == "release" and handed:
            event = handed.pop(a % len(handed))
            source.release(event)
            model.pending[sk.TopicPartition(event.topic, event.partition)].discard(event.offset)
        for tp, inbox in zip(tps, inboxes, strict=True):
            assert inbox.commit_position() == model.position(tp), (tp, op)
    # Everything handed out and finished, nothing left: the position is the end of the log.
    source.ack()
    source._countdown = 10**9  # no turn of the event loop falls due in this drain
    while source.get_nowait() is not None:
        source.ack()
    for tp, inbox in zip(tps, inboxes, strict=True):
        assert inbox.commit_position() == (model.end[tp] if model.started[tp] else None)
