"""All groups of one coordinator, in plain code: group ids, group creation, shared tickets.

Routes each request to its ``Group`` and answers the cases that depend on whether a group
exists, as Kafka does: a JoinGroup without a member id creates the group; any other
request for an unknown group gets UNKNOWN_MEMBER_ID, except an OffsetCommit, which
creates the group for a "simple consumer" (generation < 0) and is otherwise
ILLEGAL_GENERATION. Group requests with an empty group id get INVALID_GROUP_ID
(OffsetCommit and OffsetFetch accept one, as Kafka does).

Invariants: tickets are unique across all groups; groups are never forgotten, so a
group's generation never goes back; after ``shutdown`` every group is Dead and nothing
is parked.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

from streamkit.log.groups.errors import GroupErrorCode
from streamkit.log.groups.group import Group, random_member_id
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
    MemberDescription,
    Step,
    SyncGroupResult,
)

E = GroupErrorCode


class GroupRegistry:
    """The groups one coordinator owns.

    >>> registry = GroupRegistry()
    >>> request = JoinGroupRequest("", "consumer", (("range", b""),), 10_000,
    ...                            require_known_member_id=False)
    >>> registry.join(0, "g", request).reply.generation_id
    1
    """

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.config = config or GroupConfig()
        self._new_member_id = new_member_id
        self._groups: dict[str, Group] = {}
        self._tickets = itertools.count(1)
        self._closed = False

    def get(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def _create(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            group = Group(group_id, self.config, self._tickets, self._new_member_id)
            if self._closed:
                group.shutdown()
            self._groups[group_id] = group
        return group

    # -- requests ---------------------------------------------------------------------------

    def join(self, now_ms: int, group_id: str, request: JoinGroupRequest) -> Step[JoinGroupResult]:
        if not group_id:
            return Step(JoinGroupResult(E.INVALID_GROUP_ID, member_id=request.member_id))
        group = self._groups.get(group_id)
        if group is None:
            if request.member_id:
                return Step(JoinGroupResult(E.UNKNOWN_MEMBER_ID, member_id=request.member_id))
            if not self.config.session_timeout_valid(request.session_timeout_ms):
                return Step(JoinGroupResult(E.INVALID_SESSION_TIMEOUT))
            group = self._create(group_id)
        return group.join(now_ms, request)

    def sync(
        self,
        now_ms: int,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes],
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Step[SyncGroupResult]:
        group = self._groups.get(group_id)
        if group is None:
            return Step(SyncGroupResult(self._unknown_group_error(group_id)))
        return group.sync(
            now_ms, member_id, generation_id, assignments, group_instance_id=group_instance_id,
            protocol_type=protocol_type, protocol_name=protocol_name,
        )

    def heartbeat(
        self,
        now_ms: int,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None = None,
    ) -> Step[HeartbeatResult]:
        group = self._groups.get(group_id)
        if group is None:
            return Step(HeartbeatResult(self._unknown_group_error(group_id)))
        return group.heartbeat(now_ms, member_id, generation_id, group_instance_id)

    def leave(
        self, now_ms: int, group_id: str, member_id: str, group_instance_id: str | None = None
    ) -> Step[LeaveGroupResult]:
        group = self._groups.get(group_id)
        if group is None:
            return Step(LeaveGroupResult(self._unknown_group_error(group_id)))
        return group.leave(now_ms, member_id, group_instance_id)

    def validate_offset_commit(
        self,
        now_ms: int,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None = None,
        *,
        transactional: bool = False,
    ) -> Step[GroupErrorCode]:
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return Step(E.ILLEGAL_GENERATION)  # a commit from a generation long gone
            group = self._create(group_id)
        return group.validate_offset_commit(
            now_ms, member_id, generation_id, group_instance_id, transactional=transactional
        )

    def delete(self, group_id: str) -> GroupErrorCode | None:
        """Forget a group that has no members (DeleteGroups): NONE when it was known here,
        NON_EMPTY_GROUP when it has members, None when this coordinator never saw it."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        if group.state not in (GroupState.EMPTY, GroupState.DEAD):
            return E.NON_EMPTY_GROUP
        del self._groups[group_id]
        return E.NONE

    def _unknown_group_error(self, group_id: str) -> GroupErrorCode:
        if not group_id:
            return E.INVALID_GROUP_ID
        return E.NOT_COORDINATOR if self._closed else E.UNKNOWN_MEMBER_ID

    # -- timers and lifecycle ---------------------------------------------------------------

    def expire(self, now_ms: int) -> tuple[Delivery, ...]:
        """Fire every group's timers due by ``now_ms``."""
        deliveries: list[Delivery] = []
        for group in self._groups.values():
            deadline_ms = group.next_deadline_ms()
            if deadline_ms is not None and deadline_ms <= now_ms:
                deliveries.extend(group.expire(now_ms))
        return tuple(deliveries)

    def next_deadline_ms(self) -> int | None:
        deadlines = (group.next_deadline_ms() for group in self._groups.values())
        return min((d for d in deadlines if d is not None), default=None)

    def shutdown(self) -> tuple[Delivery, ...]:
        """Every group goes Dead; parked requests are answered NOT_COORDINATOR."""
        self._closed = True
        deliveries: list[Delivery] = []
        for group in self._groups.values():
            deliveries.extend(group.shutdown())
        return tuple(deliveries)

    def parked_tickets(self) -> set[int]:
        tickets: set[int] = set()
        for group in self._groups.values():
            tickets |= group.parked_tickets()
        return tickets

    # -- views ------------------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription | None:
        """The group's description, or None if this coordinator never saw it."""
        group = self._groups.get(group_id)
        return None if group is None else describe(group)

    def listings(self) -> list[GroupListing]:
        """Every group that is not Dead."""
        return [
            GroupListing(group.group_id, group.members.protocol_type or "", group.state)
            for group in self._groups.values()
            if group.state is not GroupState.DEAD
        ]


def describe(group: Group) -> GroupDescription:
    """DescribeGroups' view of a group: metadata and assignments only when Stable (as Kafka)."""
    if group.state is GroupState.DEAD:
        return GroupDescription(group.group_id, E.NONE, GroupState.DEAD)
    protocol = group.protocol_name or "" if group.state is GroupState.STABLE else ""
    members = tuple(
        MemberDescription(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.metadata(protocol) if protocol else b"", m.assignment if protocol else b"",
        )
        for m in group.members
    )
    protocol_type = group.members.protocol_type or ""
    return GroupDescription(group.group_id, E.NONE, group.state, protocol_type, protocol, members)
