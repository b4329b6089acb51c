"""GroupCoordinator: the asyncio shell, driven by a ManualClock and an in-memory offset store."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Iterable, Mapping

import pytest

from streamkit._core.clock import ManualClock
from streamkit._core.types import TopicPartition
from streamkit.log.groups import (
    CoordinatorClosedError,
    GroupConfig,
    GroupCoordinator,
    GroupErrorCode,
    GroupState,
    JoinGroupResult,
    MemoryOffsetStore,
)

E = GroupErrorCode
S = GroupState
SESSION_MS = 10_000
CONFIG = GroupConfig(min_session_timeout_ms=1_000)
TP0, TP1, TP2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def coordinator(
    clock: ManualClock, config: GroupConfig = CONFIG, store: MemoryOffsetStore | None = None
) -> GroupCoordinator:
    ids = itertools.count(1)
    return GroupCoordinator(
        store or MemoryOffsetStore(), clock=clock, config=config, tick_ms=5,
        new_member_id=lambda client: f"{client}-{next(ids)}",
    )


async def join(
    coord: GroupCoordinator, client: str, member_id: str = "", group_id: str = "g"
) -> JoinGroupResult:
    """A v4+ client's JoinGroup, including the MEMBER_ID_REQUIRED round trip."""
    while True:
        result = await coord.join_group(
            group_id, member_id, protocol_type="consumer",
            protocols=[("range", f"sub-{client}".encode())], session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=20_000, client_id=client, client_host="/10.0.0.1",
        )
        if result.error is not E.MEMBER_ID_REQUIRED:
            return result
        member_id = result.member_id


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_three_members_join_one_leaves_and_the_rebalance_completes() -> None:
    clock = ManualClock(1_000_000)
    config = GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=3_000)
    async with coordinator(clock, config) as coord:
        joins = [asyncio.create_task(join(coord, client)) for client in "abc"]
        await settle()
        assert not any(task.done() for task in joins)  # the initial delay holds them
        clock.advance(3_000)
        coord.poll_timers()
        await settle()
        # b and c arrived during the delay, so the group waits one delay more
        assert not any(task.done() for task in joins)
        clock.advance(3_000)
        coord.poll_timers()
        a, b, c = [await task for task in joins]
        assert a.generation_id == b.generation_id == c.generation_id == 1
        assert a.leader == a.member_id == "a-1"
        assert [m.member_id for m in a.members] == ["a-1", "b-2", "c-3"]
        assert [m.metadata for m in a.members] == [b"sub-a", b"sub-b", b"sub-c"]
        assert b.members == c.members == ()

        # b waits for the leader's assignment; c leaves before syncing
        b_sync = asyncio.create_task(coord.sync_group("g", 1, b.member_id, {}))
        await settle()
        assert not b_sync.done()
        assert (await coord.leave_group("g", c.member_id)).error is E.NONE
        assert (await b_sync).error is E.REBALANCE_IN_PROGRESS
        assert (await coord.heartbeat("g", 1, a.member_id)).error is E.REBALANCE_IN_PROGRESS

        # a and b rejoin: generation 2 without c
        b_join = asyncio.create_task(join(coord, "b", b.member_id))
        a2 = await join(coord, "a", a.member_id)
        b2 = await b_join
        assert a2.generation_id == b2.generation_id == 2
        assert [m.member_id for m in a2.members] == [a.member_id, b.member_id]

        b_sync = asyncio.create_task(coord.sync_group("g", 2, b.member_id, []))
        await settle()
        a_sync = await coord.sync_group(
            "g", 2, a.member_id, [(a.member_id, b"a-parts"), (b.member_id, b"b-parts")]
        )
        assert a_sync.assignment == b"a-parts" and a_sync.protocol_name == "range"
        assert (await b_sync).assignment == b"b-parts"
        assert (await coord.heartbeat("g", 2, c.member_id)).error is E.UNKNOWN_MEMBER_ID

        [description] = await coord.describe_groups(["g"])
        assert description.state is S.STABLE and description.protocol_type == "consumer"
        assert [(m.member_id, m.client_id, m.client_host, m.assignment) for m in description.members] == [
            (a.member_id, "a", "/10.0.0.1", b"a-parts"),
            (b.member_id, "b", "/10.0.0.1", b"b-parts"),
        ]


async def test_session_expiry_evicts_a_silent_member() -> None:
    clock = ManualClock()
    async with coordinator(clock) as coord:
        a = await join(coord, "a")
        b_join = asyncio.create_task(join(coord, "b"))
        await settle()
        a = await join(coord, "a", a.member_id)
        b = await b_join
        generation = a.generation_id
        b_sync = asyncio.create_task(coord.sync_group("g", generation, b.member_id, {}))
        await coord.sync_group("g", generation, a.member_id, {b.member_id: b"x"})
        assert (await b_sync).assignment == b"x"

        for _ in range(3):  # a heartbeats, b goes silent
            clock.advance(SESSION_MS // 3)
            coord.poll_timers()
            assert (await coord.heartbeat("g", generation, a.member_id)).error is E.NONE
        clock.advance(SESSION_MS // 3)
        await asyncio.sleep(0.05)  # the timer task notices on its own
        [description] = await coord.describe_groups(["g"])
        assert [m.member_id for m in description.members] == [a.member_id]
        assert description.state is S.PREPARING_REBALANCE
        assert (await coord.heartbeat("g", generation, b.member_id)).error is E.UNKNOWN_MEMBER_ID
        heartbeat = await coord.heartbeat("g", generation, a.member_id)
        assert heartbeat.error is E.REBALANCE_IN_PROGRESS
        rejoined = await join(coord, "a", a.member_id)
        assert rejoined.generation_id == generation + 1 and len(rejoined.members) == 1


async def test_offsets_commit_and_fetch() -> None:
    store = MemoryOffsetStore()
    store.commit("old-group", {TP0: (7, "")})
    async with coordinator(ManualClock(), store=store) as coord:
        # a simple consumer (generation -1) may commit to a group nobody joined
        result = await coord.commit_offsets("simple", -1, "", {TP0: (10, "m0"), TP1: (11, "")})
        assert result.errors == {TP0: E.NONE, TP1: E.NONE}
        fetched = await coord.fetch_offsets("simple", [TP1, TP2])
        assert fetched.error is E.NONE and fetched.offsets == {TP1: (11, ""), TP2: (-1, "")}
        everything = await coord.fetch_offsets("simple", None)
        assert everything.offsets == {TP0: (10, "m0"), TP1: (11, "")}
        assert (await coord.fetch_offsets("nobody", [TP0])).offsets == {TP0: (-1, "")}

        refused = await coord.commit_offsets("ghost-group", 3, "m", {TP0: (1, "")})
        assert refused.errors == {TP0: E.ILLEGAL_GENERATION}
        assert store.fetch("ghost-group", None) == {}

        a = await join(coord, "a")
        early = await coord.commit_offsets("g", a.generation_id, a.member_id, {TP0: (1, "")})
        assert early.errors == {TP0: E.REBALANCE_IN_PROGRESS}  # CompletingRebalance
        await coord.sync_group("g", a.generation_id, a.member_id, {a.member_id: b""})
        too_big = "x" * (CONFIG.offset_metadata_max_bytes + 1)
        mixed = await coord.commit_offsets(
            "g", a.generation_id, a.member_id, {TP0: (5, "ok"), TP1: (6, too_big)}
        )
        assert mixed.errors == {TP0: E.NONE, TP1: E.OFFSET_METADATA_TOO_LARGE}
        assert store.fetch("g", None) == {TP0: (5, "ok")}
        stale = await coord.commit_offsets("g", a.generation_id - 1, a.member_id, {TP0: (9, "")})
        assert stale.errors == {TP0: E.ILLEGAL_GENERATION}
        simple = await coord.commit_offsets("g", -1, "", {TP0: (9, "")})
        assert simple.errors == {TP0: E.UNKNOWN_MEMBER_ID}  # the group is in use

        listed = await coord.list_groups()
        assert listed.error is E.NONE
        assert {(g.group_id, g.protocol_type, g.state) for g in listed.groups} == {
            ("simple", "", S.EMPTY),
            ("g", "consumer", S.STABLE),
            ("old-group", "", S.EMPTY),  # only committed offsets, from before this process
        }
        described = await coord.describe_groups(["old-group", "unknown", "simple"])
        assert [(d.group_id, d.state, d.error) for d in described] == [
            ("old-group", S.EMPTY, E.NONE),
            ("unknown", S.DEAD, E.NONE),
            ("simple", S.EMPTY, E.NONE),
        ]


class SlowStore(MemoryOffsetStore):
    """Checks that the coordinator never enters the store twice at once."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = 0
        self.most_inside = 0
        self.lock = threading.Lock()
        self.commits: list[int] = []

    def _enter(self) -> None:
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        time.sleep(0.002)

    def _leave(self) -> None:
        with self.lock:
            self.inside -= 1

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str]]) -> None:
        self._enter()
        try:
            self.commits.append(offsets[TP0][0])
            super().commit(group_id, offsets)
        finally:
            self._leave()

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[int, str]]:
        self._enter()
        try:
            return super().fetch(group_id, partitions)
        finally:
            self._leave()


async def test_store_calls_run_one_at_a_time_in_request_order() -> None:
    store = SlowStore()
    async with coordinator(ManualClock(), store=store) as coord:
        commits = [
            asyncio.create_task(coord.commit_offsets("g", -1, "", {TP0: (n, "")}))
            for n in range(20)
        ]
        fetch = asyncio.create_task(coord.fetch_offsets("g", [TP0]))
        await asyncio.gather(*commits, fetch)
    assert store.most_inside == 1
    assert store.commits == list(range(20))
    assert fetch.result().offsets == {TP0: (19, "")}  # it came after all the commits


async def test_lifecycle() -> None:
    coord = coordinator(ManualClock())
    assert (await join(coord, "a")).error is E.COORDINATOR_NOT_AVAILABLE  # not started
    await coord.start()
    await coord.start()  # idempotent
    a = await join(coord, "a")
    parked = asyncio.create_task(join(coord, "b"))
    await settle()
    assert not parked.done()
    await coord.aclose()
    assert (await parked).error is E.NOT_COORDINATOR  # nothing is left waiting
    await coord.aclose()  # idempotent
    with pytest.raises(CoordinatorClosedError):
        await coord.start()
    assert (await join(coord, "c")).error is E.NOT_COORDINATOR
    assert (await coord.heartbeat("g", 1, a.member_id)).error is E.NOT_COORDINATOR
    assert (await coord.sync_group("g", 1, a.member_id, {})).error is E.NOT_COORDINATOR
    assert (await coord.leave_group("g", a.member_id)).error is E.NOT_COORDINATOR
    assert (await coord.commit_offsets("g", -1, "", {TP0: (1, "")})).errors == {
        TP0: E.NOT_COORDINATOR
    }
    assert (await coord.fetch_offsets("g")).error is E.NOT_COORDINATOR
    assert (await coord.list_groups()).error is E.NOT_COORDINATOR
    assert [d.error for d in await coord.describe_groups(["g"])] == [E.NOT_COORDINATOR]


async def test_aclose_stops_the_timer_task() -> None:
    coord = coordinator(ManualClock())
    async with coord:
        timer = coord._timer
        assert timer is not None and not timer.done()
    assert timer.done() and timer.cancelled()


async def test_a_cancelled_waiter_leaves_the_member_parked() -> None:
    clock = ManualClock()
    async with coordinator(clock) as coord:
        a = await join(coord, "a")
        b_join = asyncio.create_task(join(coord, "b"))
        await settle()
        b_join.cancel()  # b's connection went away while its JoinGroup was parked
        with pytest.raises(asyncio.CancelledError):
            await b_join
        a2 = await join(coord, "a", a.member_id)  # b is still a member: it is waited for
        assert [m.member_id for m in a2.members] == [a.member_id, "b-2"]
        assert not coord._waiters


async def test_parked_join_is_answered_at_the_rebalance_deadline_by_the_timer() -> None:
    clock = ManualClock()
    async with coordinator(clock) as coord:
        a = await join(coord, "a")
        await coord.sync_group("g", 1, a.member_id, {})
        b_join = asyncio.create_task(join(coord, "b"))
        await settle()
        for _ in range(4):  # a stays alive but never rejoins
            clock.advance(5_000)
            await coord.heartbeat("g", 1, a.member_id)
        await asyncio.sleep(0.05)
        b = await asyncio.wait_for(b_join, 1)
        assert b.generation_id == 2 and b.leader == b.member_id


async def test_transactional_commits_are_fenced_by_generation_but_not_by_a_rebalance() -> None:
    async with coordinator(ManualClock()) as coord:
        assert await coord.validate_txn_offset_commit("never-joined", -1, "") is E.NONE
        assert await coord.validate_txn_offset_commit("gone", 2, "m") is E.ILLEGAL_GENERATION
        a = await join(coord, "a")
        # CompletingRebalance refuses an OffsetCommit, not a TxnOffsetCommit (Kafka's rule).
        assert await coord.validate_txn_offset_commit("g", a.generation_id, a.member_id) is E.NONE
        assert await coord.validate_txn_offset_commit("g", a.generation_id - 1, a.member_id) is E.ILLEGAL_GENERATION
        assert await coord.validate_txn_offset_commit("g", a.generation_id, "zombie") is E.UNKNOWN_MEMBER_ID
        # No member and no generation (TxnOffsetCommit v0-v2): accepted while the group is in use.
        assert await coord.validate_txn_offset_commit("g", -1, "") is E.NONE
