"""A driver for the plain group state machine: a manual time, deliveries collected by ticket.

Every call goes through ``GroupRegistry`` with the harness's ``now``; every step's
deliveries are checked (each ticket answered once, and only tickets that were parked)
and stored, and the group's structural invariants are checked after each call.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TypeVar

from streamkit.log.groups import (
    Delivery,
    Group,
    GroupConfig,
    GroupDescription,
    GroupErrorCode,
    GroupRegistry,
    GroupState,
    JoinGroupRequest,
    JoinGroupResult,
    Parked,
    Step,
    SyncGroupResult,
)

R = TypeVar("R")
E = GroupErrorCode
S = GroupState
PROTOCOLS: tuple[tuple[str, bytes], ...] = (("range", b"range-meta"),)
SESSION_MS = 10_000
REBALANCE_MS = 20_000
TEST_CONFIG = GroupConfig(min_session_timeout_ms=1_000)


class GroupHarness:
    def __init__(self, config: GroupConfig = TEST_CONFIG, group_id: str = "g") -> None:
        ids = itertools.count(1)
        self.registry = GroupRegistry(config, new_member_id=lambda client: f"{client}-{next(ids)}")
        self.group_id = group_id
        self.now = 0
        self.parked: set[int] = set()
        self.answers: dict[int, JoinGroupResult | SyncGroupResult] = {}
        self.delivered: list[Delivery] = []  # every delivery, in order
        self.generations: list[int] = []

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def group(self) -> Group:
        group = self.registry.get(self.group_id)
        assert group is not None
        return group

    def take(self, step: Step[R]) -> R | Parked:
        for delivery in step.deliveries:
            assert delivery.ticket in self.parked, f"ticket {delivery.ticket} was not parked"
            assert delivery.ticket not in self.answers, f"ticket {delivery.ticket} answered twice"
            self.parked.discard(delivery.ticket)
            self.answers[delivery.ticket] = delivery.result
            self.delivered.append(delivery)
        if isinstance(step.reply, Parked):
            assert step.reply.ticket not in self.parked and step.reply.ticket not in self.answers
            self.parked.add(step.reply.ticket)
        self.check_invariants()
        return step.reply

    def describe(self) -> GroupDescription:
        description = self.registry.describe(self.group_id)
        assert description is not None
        return description

    def check_invariants(self) -> None:
        assert self.registry.parked_tickets() == self.parked
        group = self.registry.get(self.group_id)
        if group is None:
            return
        if self.generations:
            assert group.generation_id >= self.generations[-1], "generation went back"
        self.generations.append(group.generation_id)
        members = group.members
        if group.state is S.EMPTY:
            assert len(members) == 0
        elif len(members) == 0:
            # only while a rebalance waits out its initial delay or a pending member id
            assert group.state in (S.PREPARING_REBALANCE, S.DEAD)
        if len(members):
            assert members.leader_id in members
        else:
            assert members.leader_id is None
        for member in members:
            assert member.member_id not in members.pending
            if member.join_ticket is not None:
                assert group.state is S.PREPARING_REBALANCE
            if member.sync_ticket is not None:
                assert group.state is S.COMPLETING_REBALANCE
            if member.group_instance_id is not None:
                assert members.static_member_id(member.group_instance_id) == member.member_id

    def answer(self, reply: object) -> JoinGroupResult | SyncGroupResult:
        """The result a parked request got (or the reply itself if it was not parked)."""
        if isinstance(reply, Parked):
            assert reply.ticket in self.answers, f"ticket {reply.ticket} is still parked"
            return self.answers[reply.ticket]
        assert isinstance(reply, JoinGroupResult | SyncGroupResult)
        return reply

    def join_answer(self, reply: object) -> JoinGroupResult:
        result = self.answer(reply)
        assert isinstance(result, JoinGroupResult)
        return result

    def sync_answer(self, reply: object) -> SyncGroupResult:
        result = self.answer(reply)
        assert isinstance(result, SyncGroupResult)
        return result

    # -- requests ---------------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        client_id: str = "c",
        protocols: tuple[tuple[str, bytes], ...] = PROTOCOLS,
        protocol_type: str = "consumer",
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
        instance: str | None = None,
        v4: bool = True,
    ) -> JoinGroupResult | Parked:
        request = JoinGroupRequest(
            member_id, protocol_type, protocols, session_ms, rebalance_ms, instance, client_id,
            "/127.0.0.1", v4,
        )
        return self.take(self.registry.join(self.now, self.group_id, request))

    def join_new(self, client_id: str = "c", **kwargs: object) -> JoinGroupResult | Parked:
        """A brand-new member's first JoinGroup, through MEMBER_ID_REQUIRED."""
        first = self.join("", client_id=client_id, **kwargs)  # type: ignore[arg-type]
        assert isinstance(first, JoinGroupResult) and first.error is E.MEMBER_ID_REQUIRED
        assert first.member_id.startswith(f"{client_id}-")
        return self.join(first.member_id, client_id=client_id, **kwargs)  # type: ignore[arg-type]

    def sync(
        self,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes] | None = None,
        *,
        instance: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncGroupResult | Parked:
        step = self.registry.sync(
            self.now, self.group_id, member_id, generation_id, assignments or {},
            group_instance_id=instance, protocol_name=protocol_name,
        )
        return self.take(step)

    def heartbeat(self, member_id: str, generation_id: int, instance: str | None = None) -> E:
        step = self.registry.heartbeat(self.now, self.group_id, member_id, generation_id, instance)
        reply = self.take(step)
        assert not isinstance(reply, Parked)
        return reply.error

    def leave(self, member_id: str, instance: str | None = None) -> E:
        reply = self.take(self.registry.leave(self.now, self.group_id, member_id, instance))
        assert not isinstance(reply, Parked)
        return reply.error

    def commit(self, member_id: str, generation_id: int, instance: str | None = None) -> E:
        step = self.registry.validate_offset_commit(
            self.now, self.group_id, member_id, generation_id, instance
        )
        reply = self.take(step)
        assert not isinstance(reply, Parked)
        return reply

    def shutdown(self) -> None:
        self.take(Step(None, self.registry.shutdown()))

    def advance(self, ms: int) -> None:
        self.now += ms
        self.take(Step(None, self.registry.expire(self.now)))

    # -- common scenarios -------------------------------------------------------------------

    def stable_group(self, *clients: str) -> tuple[int, list[str]]:
        """Members ``clients`` (first is the leader) joined and synced: (generation, ids)."""
        leader = self.join_answer(self.join_new(clients[0])).member_id
        parked = [self.join_new(client) for client in clients[1:]]
        ids = [leader]
        if parked:  # the newcomers started a rebalance: the leader rejoins to finish it
            assert self.join_answer(self.join(leader)).error is E.NONE
            ids += [self.join_answer(reply).member_id for reply in parked]
        generation = self.group.generation_id
        assignments = {member_id: f"assignment-{member_id}".encode() for member_id in ids}
        follower_syncs = [self.sync(member_id, generation) for member_id in ids[1:]]
        leader_sync = self.sync_answer(self.sync(ids[0], generation, assignments))
        assert leader_sync.error is E.NONE
        for reply in follower_syncs:
            assert self.sync_answer(reply).error is E.NONE
        assert self.group.state is S.STABLE
        return generation, ids
