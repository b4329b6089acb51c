"""The group coordinator on the event loop: a thin async shell over ``GroupRegistry``.

It owns the registry (all groups' state machines), one future per parked JoinGroup or
SyncGroup, the timer task that expires sessions and rebalances, and the calls into the
offset store. Group logic lives in ``group.py``; nothing here decides anything.

Invariants:

* the registry is used only on the event loop and never across an ``await``, so every
  request sees and leaves all groups consistent;
* a parked request's future is resolved by the ``Delivery`` for its ticket, and
  ``aclose`` answers every parked request NOT_COORDINATOR first, so no future dangles. A
  caller cancelled while parked (its client went away) just drops its future: the member
  stays parked, as in Kafka, and its result is discarded;
* offset-store calls run on one worker thread of their own, one at a time, in the order
  the requests arrived: a fetch sees every commit answered before it, and the store never
  sees two calls at once. ``aclose`` waits for the call in progress.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Self, TypeVar

from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.types import TopicPartition
from streamkit.log.groups.errors import CoordinatorClosedError, GroupErrorCode
from streamkit.log.groups.group import random_member_id
from streamkit.log.groups.messages import (
    Delivery,
    GroupConfig,
    GroupDescription,
    GroupListing,
    GroupState,
    HeartbeatResult,
    JoinGroupRequest,
    JoinGroupResult,
    LeaveGroupResult,
    ListGroupsResult,
    OffsetCommitResult,
    OffsetFetchResult,
    Parked,
    Step,
    SyncGroupResult,
    metadata_fits,
)
from streamkit.log.groups.registry import GroupRegistry
from streamkit.log.groups.store import GroupOffsetStore

R = TypeVar("R")
T = TypeVar("T")
E = GroupErrorCode

NO_OFFSET = (-1, "")
"""What OffsetFetch reports for a partition without a committed offset."""


class _Lifecycle(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class GroupCoordinator:
    """Consumer groups and their committed offsets, for the wire server and embedded use.

    Requests before ``start`` get COORDINATOR_NOT_AVAILABLE and after ``aclose``
    NOT_COORDINATOR, both of which clients retry.

    >>> import asyncio
    >>> from streamkit.log.groups.store import MemoryOffsetStore
    >>> async def main() -> int:
    ...     async with GroupCoordinator(MemoryOffsetStore()) as coordinator:
    ...         joined = await coordinator.join_group(
    ...             "g", "", protocol_type="consumer", protocols=[("range", b"")],
    ...             session_timeout_ms=10_000, require_known_member_id=False)
    ...         return joined.generation_id
    >>> asyncio.run(main())
    1
    """

    def __init__(
        self,
        store: GroupOffsetStore,
        *,
        clock: Clock = SYSTEM_CLOCK,
        config: GroupConfig | None = None,
        tick_ms: int = 100,
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        if tick_ms <= 0:
            raise ValueError("tick_ms must be > 0")
        self._store = store
        self._clock = clock
        self._registry = GroupRegistry(config, new_member_id=new_member_id)
        self._tick_ms = tick_ms
        self._waiters: dict[int, asyncio.Future[JoinGroupResult | SyncGroupResult]] = {}
        self._lifecycle = _Lifecycle.NEW
        self._stack: AsyncExitStack | None = None
        self._timer: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def config(self) -> GroupConfig:
        return self._registry.config

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start the timer task. Idempotent; a closed coordinator cannot start again."""
        if self._lifecycle is _Lifecycle.RUNNING:
            return
        if self._lifecycle is _Lifecycle.CLOSED:
            raise CoordinatorClosedError("the group coordinator was closed")
        stack = AsyncExitStack()
        task_group = await stack.enter_async_context(asyncio.TaskGroup())
        self._timer = task_group.create_task(self._run_timers(), name="group-coordinator-timers")
        self._stack = stack
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="group-offsets")
        self._lifecycle = _Lifecycle.RUNNING

    async def aclose(self) -> None:
        """Answer parked requests NOT_COORDINATOR, stop the timer, finish store calls."""
        if self._lifecycle is _Lifecycle.CLOSED:
            return
        self._lifecycle = _Lifecycle.CLOSED
        self._deliver(self._registry.shutdown())
        if self._timer is not None:
            self._timer.cancel()
        if self._stack is not None:
            await self._stack.aclose()
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown)

    async def _run_timers(self) -> None:
        while True:
            delay_ms = self._tick_ms
            deadline_ms = self._registry.next_deadline_ms()
            if deadline_ms is not None:
                delay_ms = min(delay_ms, max(deadline_ms - self._clock.monotonic_ms(), 1))
            await asyncio.sleep(delay_ms / 1000)
            self.poll_timers()

    def poll_timers(self) -> None:
        """Fire every timer due by the clock's time now (the timer task calls this too)."""
        if self._lifecycle is _Lifecycle.RUNNING:
            self._deliver(self._registry.expire(self._clock.monotonic_ms()))

    # -- membership -------------------------------------------------------------------------

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        *,
        protocol_type: str,
        protocols: Iterable[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int = -1,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = True,
    ) -> JoinGroupResult:
        """JoinGroup; waits while the group rebalances.

        ``rebalance_timeout_ms=-1`` (JoinGroup v0) means the session timeout;
        ``require_known_member_id`` is True for JoinGroup v4+.
        """
        if (error := self._refusal()) is not None:
            return JoinGroupResult(error, member_id=member_id)
        request = JoinGroupRequest(
            member_id, protocol_type, tuple((name, bytes(meta)) for name, meta in protocols),
            session_timeout_ms, rebalance_timeout_ms, group_instance_id, client_id,
            client_host, require_known_member_id,
        )
        step = self._registry.join(self._clock.monotonic_ms(), group_id, request)
        return await self._reply(step, JoinGroupResult)

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes] | Iterable[tuple[str, bytes]],
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncGroupResult:
        """SyncGroup; a follower waits for the leader's assignment."""
        if (error := self._refusal()) is not None:
            return SyncGroupResult(error)
        by_member = dict(assignments.items() if isinstance(assignments, Mapping) else assignments)
        step = self._registry.sync(
            self._clock.monotonic_ms(), group_id, member_id, generation_id, by_member,
            group_instance_id=group_instance_id, protocol_type=protocol_type,
            protocol_name=protocol_name,
        )
        return await self._reply(step, SyncGroupResult)

    async def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        *,
        group_instance_id: str | None = None,
    ) -> HeartbeatResult:
        if (error := self._refusal()) is not None:
            return HeartbeatResult(error)
        step = self._registry.heartbeat(
            self._clock.monotonic_ms(), group_id, member_id, generation_id, group_instance_id
        )
        return await self._reply(step, HeartbeatResult)

    async def leave_group(
        self, group_id: str, member_id: str, *, group_instance_id: str | None = None
    ) -> LeaveGroupResult:
        if (error := self._refusal()) is not None:
            return LeaveGroupResult(error)
        step = self._registry.leave(
            self._clock.monotonic_ms(), group_id, member_id, group_instance_id
        )
        return await self._reply(step, LeaveGroupResult)

    # -- offsets ----------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str]],
        *,
        group_instance_id: str | None = None,
    ) -> OffsetCommitResult:
        """OffsetCommit: check the member and generation, then store durably.

        Generation -1 with an Empty or unknown group is a "simple consumer" and always
        accepted. Errors the store raises propagate.
        """
        error = self._refusal()
        if error is None:
            step = self._registry.validate_offset_commit(
                self._clock.monotonic_ms(), group_id, member_id, generation_id, group_instance_id
            )
            error = await self._reply(step, GroupErrorCode)
        if error is not E.NONE:
            return OffsetCommitResult({tp: error for tp in offsets})
        limit = self.config.offset_metadata_max_bytes
        errors: dict[TopicPartition, GroupErrorCode] = {}
        accepted: dict[TopicPartition, tuple[int, str]] = {}
        for tp, (offset, metadata) in offsets.items():
            if not metadata_fits(metadata, limit):
                errors[tp] = E.OFFSET_METADATA_TOO_LARGE
            else:
                errors[tp] = E.NONE
                accepted[tp] = (offset, metadata)
        if accepted:
            await self._in_store(self._store.commit, group_id, accepted)
        return OffsetCommitResult(errors)

    async def validate_txn_offset_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None
    ) -> GroupErrorCode:
        """TxnOffsetCommit's group side (v3 names the member): fence a zombie, an unknown
        member or a stale generation as Kafka does; the offsets themselves wait in the
        transaction coordinator until their transaction commits."""
        if (error := self._refusal()) is not None:
            return error
        step = self._registry.validate_offset_commit(
            self._clock.monotonic_ms(), group_id, member_id, generation_id, group_instance_id, transactional=True
        )
        return await self._reply(step, GroupErrorCode)

    async def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> OffsetFetchResult:
        """OffsetFetch: committed (offset, metadata), (-1, "") where none; None: all."""
        if (error := self._refusal()) is not None:
            return OffsetFetchResult(error)
        wanted = None if partitions is None else list(dict.fromkeys(partitions))
        committed = await self._in_store(self._store.fetch, group_id, wanted)
        if wanted is None:
            return OffsetFetchResult(E.NONE, committed)
        return OffsetFetchResult(E.NONE, {tp: committed.get(tp, NO_OFFSET) for tp in wanted})

    # -- views ------------------------------------------------------------------------------

    async def list_groups(self) -> ListGroupsResult:
        """Every group, including those that only have committed offsets (state Empty)."""
        if (error := self._refusal()) is not None:
            return ListGroupsResult(error)
        self.poll_timers()
        listings = self._registry.listings()
        stored = await self._in_store(self._store.groups)
        known = {listing.group_id for listing in listings}
        listings += [GroupListing(g, "", GroupState.EMPTY) for g in stored if g not in known]
        return ListGroupsResult(E.NONE, tuple(listings))

    async def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """DescribeGroups; an unknown group is Dead (Empty if it has committed offsets)."""
        group_ids = list(group_ids)
        if (error := self._refusal()) is not None:
            return [GroupDescription(g, error, GroupState.DEAD) for g in group_ids]
        self.poll_timers()
        found = {g: self._registry.describe(g) for g in group_ids}
        stored: set[str] = set()
        if None in found.values():
            stored = set(await self._in_store(self._store.groups))
        descriptions = []
        for group_id in group_ids:
            description = found[group_id]
            if description is None:
                state = GroupState.EMPTY if group_id in stored else GroupState.DEAD
                description = GroupDescription(group_id, E.NONE, state)
            descriptions.append(description)
        return descriptions

    async def delete_groups(self, group_ids: Iterable[str]) -> list[tuple[str, GroupErrorCode]]:
        """DeleteGroups, as Kafka: a group with members is NON_EMPTY_GROUP; one with neither
        members nor committed offsets is GROUP_ID_NOT_FOUND; otherwise the group and its
        committed offsets are gone (tombstones in the offsets log)."""
        group_ids = list(group_ids)
        if (error := self._refusal()) is not None:
            return [(g, error) for g in group_ids]
        self.poll_timers()
        stored = set(await self._in_store(self._store.groups))
        results: list[tuple[str, GroupErrorCode]] = []
        for group_id in group_ids:
            if not group_id:
                results.append((group_id, E.INVALID_GROUP_ID))
                continue
            outcome = self._registry.delete(group_id)
            if outcome is E.NON_EMPTY_GROUP:
                results.append((group_id, outcome))
                continue
            if outcome is None and group_id not in stored:
                results.append((group_id, E.GROUP_ID_NOT_FOUND))
                continue
            if group_id in stored:
                await self._in_store(self._store.delete_group, group_id)
            results.append((group_id, E.NONE))
        return results

    # -- plumbing ---------------------------------------------------------------------------

    def _refusal(self) -> GroupErrorCode | None:
        if self._lifecycle is _Lifecycle.RUNNING:
            return None
        if self._lifecycle is _Lifecycle.NEW:
            return E.COORDINATOR_NOT_AVAILABLE
        return E.NOT_COORDINATOR

    async def _reply(self, step: Step[R], kind: type[R]) -> R:
        reply = step.reply
        if not isinstance(reply, Parked):
            self._deliver(step.deliveries)
            return reply
        future: asyncio.Future[JoinGroupResult | SyncGroupResult]
        future = asyncio.get_running_loop().create_future()
        self._waiters[reply.ticket] = future
        self._deliver(step.deliveries)
        try:
            result = await future
        finally:
            self._waiters.pop(reply.ticket, None)
        assert isinstance(result, kind)
        return result

    def _deliver(self, deliveries: Iterable[Delivery]) -> None:
        for delivery in deliveries:
            future = self._waiters.pop(delivery.ticket, None)
            if future is not None and not future.done():
                future.set_result(delivery.result)

    async def _in_store(self, call: Callable[..., T], *args: object) -> T:
        """Run a blocking store call on the store's own thread, after those before it."""
        assert self._executor is not None
        return await asyncio.get_running_loop().run_in_executor(self._executor, call, *args)
