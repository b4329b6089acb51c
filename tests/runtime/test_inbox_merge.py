"""A root source over several inboxes merges a chunk from all of them at once when each holds
records (``RootSource._merge_chunk``); it must hand out exactly what refilling record by
record hands out (the lowest ``(timestamp, inbox)`` next record each time, offset order per
inbox), with the same commit positions, whatever arrives in between.

The reference is the same source with the merge turned off: its refills take one inbox's
records up to the next record of another (``_refill``'s per-chunk choice), so with records
interleaving by timestamp it refills per record. Both get the same puts (batches of random
timestamps, to two or three inboxes), hand-outs, acks and releases; after every step the
events handed out and every inbox's commit position must be equal (records a merged chunk
took from an inbox and has not handed out yet hold the position back as pending ones).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit._core.order import task_order
from streamkit.agents.stream import Event
from streamkit.runtime import inbox as inbox_module
from streamkit.runtime.inbox import Inbox, RootSource


@dataclass(frozen=True)
class Rec:
    offset: int
    timestamp: int
    key: bytes | None = None
    value: bytes | None = b"v"
    headers: Sequence[tuple[str, bytes | None]] = ()


class RecordByRecord(RootSource):
    """The source without the merged chunks."""

    def _merge_chunk(self) -> bool:
        return False


async def _no_dead_letter(*_: object) -> None:
    raise AssertionError("nothing fails to decode here")


def _source(cls: type[RootSource], n: int) -> tuple[RootSource, list[Inbox]]:
    topic = sk.App("merge").topic("t", key_serializer="raw", value_serializer="raw")
    wakeup = asyncio.Event()
    inboxes = [Inbox(sk.TopicPartition(f"t{i}", 0), topic, wakeup) for i in range(n)]
    source = cls(inboxes, wakeup, _no_dead_letter, lambda *_: source)  # type: ignore[arg-type,return-value]
    source._countdown = 10**9  # no turn of the event loop falls due
    return source, inboxes


def _key(event: Event | None) -> tuple[str, int, int] | None:
    return None if event is None else (event.topic, event.offset, event.timestamp)


ops = st.lists(
    st.one_of(
        # put: inbox, a batch of timestamps (close together, so that inboxes interleave)
        st.tuples(st.just("put"), st.integers(0, 2), st.lists(st.integers(0, 40), min_size=1, max_size=30)),
        st.tuples(st.just("get"), st.integers(1, 40), st.just([])),
        st.tuples(st.just("ack"), st.just(0), st.just([])),
        st.tuples(st.just("release"), st.integers(0, 1000), st.just([])),
    ),
    max_size=50,
)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 3), steps=ops, chunk=st.sampled_from([4, 1000]))
def test_merged_chunks_hand_out_what_record_by_record_refills_do(
    n: int, steps: list[tuple[str, int, list[int]]], chunk: int
) -> None:
    saved = inbox_module.CHUNK
    inbox_module.CHUNK = chunk  # small chunks: merges stop at the chunk size too
    try:
        contextvars.Context().run(_compare, n, steps)
    finally:
        inbox_module.CHUNK = saved


def _compare(n: int, steps: list[tuple[str, int, list[int]]]) -> None:
    merged, merged_inboxes = _source(RootSource, n)
    reference, reference_inboxes = _source(RecordByRecord, n)
    ends = [0] * n
    handed: list[tuple[Event, Event]] = []
    for op, a, stamps in steps:
        if op == "put":
            side = a % n
            records = [Rec(ends[side] + i, ts) for i, ts in enumerate(stamps)]
            ends[side] += len(records)
            merged_inboxes[side].put(records)
            reference_inboxes[side].put(records)
        elif op == "get":
            for _ in range(a):
                got, want = merged.get_nowait(), reference.get_nowait()
                assert _key(got) == _key(want)
                if got is None or want is None:
                    break
                handed.append((got, want))
        elif op == "ack":
            merged.ack()
            reference.ack()
            handed.clear()
        elif op == "release" and handed:
            got, want = handed.pop(a % len(handed))
            merged.release(got)
            reference.release(want)
        for mine, theirs in zip(merged_inboxes, reference_inboxes, strict=True):
            assert mine.commit_position() == theirs.commit_position()
            # A merged chunk takes records from an inbox before handing them out: they wait in
            # the chunk (pending) instead of in the inbox; either way they are not done.
            assert (mine.size > 0 or merged.first_pending(mine.tp) is not None) == (
                theirs.size > 0 or reference.first_pending(theirs.tp) is not None
            )
    while True:  # the rest, to the end
        got, want = merged.get_nowait(), reference.get_nowait()
        assert _key(got) == _key(want)
        if got is None:
            break
    merged.ack()
    reference.ack()
    for i, (mine, theirs) in enumerate(zip(merged_inboxes, reference_inboxes, strict=True)):
        assert mine.commit_position() == theirs.commit_position() == (ends[i] if ends[i] else None)


def test_interleaved_inboxes_are_merged_into_one_chunk() -> None:
    """Two partitions alternating by timestamp come out alternating, in one refill."""

    def run() -> None:
        source, (left, right) = _source(RootSource, 2)
        left.put([Rec(i, 2 * i) for i in range(500)])
        right.put([Rec(i, 2 * i + 1) for i in range(500)])
        refills = 0
        original = source._refill

        def counting() -> bool:
            nonlocal refills
            refills += 1
            return original()

        source._refill = counting  # type: ignore[method-assign]
        out = []
        while (event := source.get_nowait()) is not None:
            out.append(event.timestamp)
        assert out == list(range(1000))
        # One merged chunk up to the left's last record, the right's last one alone (the left
        # holds nothing), then the look that finds nothing: not a refill per record.
        assert refills == 3

    contextvars.Context().run(run)


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(st.integers(0, 40), max_size=30), min_size=2, max_size=3))
def test_a_task_takes_what_it_holds_in_the_one_task_order(batches: list[list[int]]) -> None:
    """With every record already in its inbox (timestamps out of order within one too), the
    source hands them out in ``_core.order.task_order``: the order the backfill computes for a
    task (one definition)."""
    inputs = [[(f"t{i}", offset, ts) for offset, ts in enumerate(batch)] for i, batch in enumerate(batches)]
    expected = list(task_order(inputs, timestamp=lambda r: r[2]))

    async def run() -> list[tuple[str, int, int] | None]:
        source, inboxes = _source(RootSource, len(batches))
        for inbox, records in zip(inboxes, inputs, strict=True):
            if records:
                inbox.put([Rec(offset, ts) for _t, offset, ts in records])
        context = contextvars.copy_context()
        return [context.run(lambda: _key(source.get_nowait())) for _ in expected]

    assert asyncio.run(run()) == expected
