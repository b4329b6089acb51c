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
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit.agents.stream import Event
from streamkit.runtime.inbox import Inbox, RootSource


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
    # In a context of its own: handing out events sets the current event, which must not
    # leak into the tests that run after this one (their sends would take its timestamp).
    contextvars.Context().run(_check_the_model, merged, steps)


def _check_the_model(merged: bool, steps: list[tuple[str, int, int]]) -> None:
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


# -- commit positions across revocations and failures, through the real worker --------------------

POISON = 3  # values v with v % 7 == POISON raise: they are dead-lettered


@dataclass(frozen=True)
class Round:
    """One worker's life: records sent (partition, value); optionally one of them never
    finishes (the agent hangs on it) until the worker stops and its partitions are revoked."""

    records: list[tuple[int, int]]
    hang_on: int | None


rounds = st.lists(
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 30)), max_size=12).flatmap(
        lambda records: st.builds(
            Round, st.just(records), st.none() | st.integers(0, len(records) - 1) if records else st.none()
        )
    ),
    min_size=1,
    max_size=4,
)


async def _run_rounds(data_dir: str, plan: list[Round]) -> None:
    from streamkit.testing import AppDriver

    finished: list[tuple[int, int]] = []  # (partition, offset), in the order finished
    sent: dict[tuple[int, int], int] = {}  # (partition, offset) -> value
    end = {0: 0, 1: 0}
    hang: list[tuple[int, int] | None] = [None]

    def build() -> tuple[sk.App, sk.Topic]:
        app = sk.App("props-runtime")
        src = app.topic("src", value_type=int, partitions=2)

        @app.agent(src)
        async def work(stream: sk.Stream) -> None:
            async for event in stream.events():
                if (event.partition, event.offset) == hang[0]:
                    await asyncio.Event().wait()  # cut off when the worker stops
                if event.value % 7 == POISON:
                    raise ValueError(f"poison {event.value}")
                finished.append((event.partition, event.offset))

        return app, src

    for step in [*plan, Round([], None)]:  # a last round processes what is left
        app, src = build()
        hang[0] = None
        if step.hang_on is not None:
            # Where the hung record will land, known before it is sent (the agent may get it
            # at once): after the partition's end, past the round's earlier records there.
            p = step.records[step.hang_on][0]
            hang[0] = (p, end[p] + sum(1 for q, _ in step.records[: step.hang_on] if q == p))
        async with AppDriver(app, data_dir=data_dir) as driver:
            for partition, value in step.records:
                ack = await driver.send(src, value, partition=partition)
                sent[(partition, ack.offset)] = value
                end[partition] = ack.offset + 1
            assert hang[0] is None or hang[0] in sent
            # What must finish before this worker stops: everything but the hung record and
            # the records of its partition after it.
            expected = {
                po for po in sent if hang[0] is None or po[0] != hang[0][0] or po[1] < hang[0][1]
            }
            dead_letters: list[Event] = []

            async def done() -> bool:
                dead_letters[:] = await driver.dead_letters()  # noqa: B023 (awaited right here)
                return expected <= set(finished) | set(map(_source_of, dead_letters))  # noqa: B023

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while not await done():
                assert loop.time() < deadline, "records not processed in time"
                await asyncio.sleep(0.005)
        # The revocation commit is exact: up to the first unfinished record, no further.
        from streamkit.transport.embedded.client import EmbeddedLogClient

        client = EmbeddedLogClient(data_dir)
        await client.start()
        try:
            consumer = client.consumer("props-runtime")
            committed = {p: await consumer.committed(sk.TopicPartition("src", p)) for p in (0, 1)}
        finally:
            await client.aclose()
        for p in (0, 1):
            want = hang[0][1] if hang[0] is not None and hang[0][0] == p else end[p]
            assert (committed[p] or 0) == want, (p, committed, want)
    # Every record finished exactly once (a hung record is redone, never done twice), and
    # every poison record is in the dead-letter topic exactly once.
    poison = {po for po, v in sent.items() if v % 7 == POISON}
    assert sorted(finished) == sorted(po for po in sent if po not in poison)
    assert sorted(map(_source_of, dead_letters)) == sorted(poison)


def _source_of(dead_letter: Event) -> tuple[int, int]:
    headers = dict(dead_letter.headers)
    return int(headers["streamkit.source.partition"] or b""), int(headers["streamkit.source.offset"] or b"")


@settings(max_examples=25, deadline=None)
@given(plan=rounds)
def test_commits_across_revocations_and_failures_match_the_model(plan: list[Round]) -> None:
    import tempfile

    from streamkit.runtime import tasks

    grace = tasks.STOP_GRACE_S
    tasks.STOP_GRACE_S = 0.01  # a hung record is cut off at once when the worker stops
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            asyncio.run(_run_rounds(data_dir, plan))
    finally:
        tasks.STOP_GRACE_S = grace
