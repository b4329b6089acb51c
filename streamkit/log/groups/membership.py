"""The member table of one group: members, pending member ids, static ids, leader, protocols.

Plain data with no notion of time or state transitions (``group.py`` owns those). Kafka's
``GroupMetadata`` member bookkeeping, in our words.

Invariants:

* members keep the order in which they were added; a static member that is replaced
  under a new member id keeps its place;
* ``leader_id`` is None exactly when there are no members, and is otherwise a member;
* a member id is never both a member and pending;
* ``static_member_id(i)`` is the current member id of instance ``i``, and that member has
  ``group_instance_id == i``;
* ``protocol_type`` is the type of the members (the first member added to an empty table
  sets it); it outlives the last member, as in Kafka, so an Empty group still lists it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from streamkit.log.groups.messages import JoinGroupMember, JoinGroupRequest, Protocols


@dataclass(eq=False)
class Member:
    """One member of a group, and the requests it has parked."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    session_deadline_ms: int
    """When the member is evicted unless it is heard from (ignored while a request is parked)."""
    assignment: bytes = b""
    join_ticket: int | None = None
    """The ticket of its parked JoinGroup, if any."""
    sync_ticket: int | None = None
    """The ticket of its parked SyncGroup, if any."""
    is_new: bool = False
    """Joined in the current rebalance and not yet answered: bounded by ``new_member_deadline_ms``."""
    new_member_deadline_ms: int = 0

    @classmethod
    def from_request(cls, member_id: str, request: JoinGroupRequest, now_ms: int) -> Member:
        return cls(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.effective_rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            session_deadline_ms=now_ms + request.session_timeout_ms,
        )

    def update(self, request: JoinGroupRequest) -> None:
        """Take the protocols and timeouts of a new JoinGroup from this member."""
        self.client_id = request.client_id
        self.client_host = request.client_host
        self.session_timeout_ms = request.session_timeout_ms
        self.rebalance_timeout_ms = request.effective_rebalance_timeout_ms
        self.protocol_type = request.protocol_type
        self.protocols = request.protocols

    def touch(self, now_ms: int) -> None:
        """The member was heard from: restart its session timer."""
        self.session_deadline_ms = now_ms + self.session_timeout_ms

    @property
    def awaiting_join(self) -> bool:
        return self.join_ticket is not None

    def expiry_ms(self) -> int | None:
        """When the member is evicted if nothing happens, or None while it is kept alive.

        A member waiting in JoinGroup or SyncGroup cannot heartbeat, so the session timer
        does not run for it; the rebalance and sync deadlines bound the wait instead. Only a
        brand-new member's JoinGroup has its own bound (a client that gave up and retries
        would otherwise leave ghosts behind).
        """
        if self.join_ticket is not None:
            return self.new_member_deadline_ms if self.is_new else None
        if self.sync_ticket is not None:
            return None
        return self.session_deadline_ms

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def metadata(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates`` (which it supports)."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class Membership:
    """The members of one group, its pending member ids, static instance ids and leader."""

    def __init__(self) -> None:
        self._members: dict[str, Member] = {}
        self.pending: dict[str, int] = {}
        """Member ids handed out with MEMBER_ID_REQUIRED -> when they expire."""
        self._static: dict[str, str] = {}
        self.leader_id: str | None = None
        self.protocol_type: str | None = None

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Member]:
        return iter(list(self._members.values()))

    def __contains__(self, member_id: object) -> bool:
        return member_id in self._members

    def get(self, member_id: str) -> Member | None:
        return self._members.get(member_id)

    def ids(self) -> list[str]:
        return list(self._members)

    def add(self, member: Member) -> None:
        if not self._members:
            self.protocol_type = member.protocol_type
        self._members[member.member_id] = member
        self.pending.pop(member.member_id, None)
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self._static[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member:
        member = self._members.pop(member_id)
        instance_id = member.group_instance_id
        if instance_id is not None and self._static.get(instance_id) == member_id:
            del self._static[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self._members), None)
        return member

    def rename(self, old_id: str, new_id: str) -> Member:
        """Give a static member a new member id, keeping its place, leadership and state."""
        member = self._members[old_id]
        member.member_id = new_id
        self._members = {
            (new_id if member_id == old_id else member_id): m
            for member_id, m in self._members.items()
        }
        if self.leader_id == old_id:
            self.leader_id = new_id
        if member.group_instance_id is not None:
            self._static[member.group_instance_id] = new_id
        return member

    def update(self, member: Member, request: JoinGroupRequest) -> None:
        member.update(request)
        if len(self._members) == 1:
            self.protocol_type = request.protocol_type

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self._static.get(group_instance_id)

    def is_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """True if the instance id now belongs to another member id (FENCED_INSTANCE_ID)."""
        if group_instance_id is None:
            return False
        current = self._static.get(group_instance_id)
        return current is not None and current != member_id

    def supports(self, protocol_type: str, protocols: Protocols, joining_id: str) -> bool:
        """Whether a member with these protocols may join (else INCONSISTENT_GROUP_PROTOCOL).

        It must name a protocol type and at least one protocol; if other members exist,
        the type must be theirs and one protocol must be supported by all of them. The
        joining member's own earlier protocols do not count: it is replacing them.
        """
        if not protocol_type or not protocols:
            return False
        others = [m for m in self._members.values() if m.member_id != joining_id]
        if not others:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        for member in others:
            names &= {name for name, _ in member.protocols}
        return bool(names)

    def all_joined(self) -> bool:
        """Every member has a parked JoinGroup and no MEMBER_ID_REQUIRED id is outstanding."""
        return not self.pending and all(m.awaiting_join for m in self._members.values())

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick the first member that did.

        Returns False if there is no leader or no member rejoined.
        """
        if self.leader_id is None:
            return False
        if self._members[self.leader_id].awaiting_join:
            return True
        for member in self._members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def select_protocol(self) -> str:
        """Kafka's vote: each member names its favourite among the protocols all support.

        The most votes win; a tie goes to the protocol that got its first vote earliest.
        """
        members = list(self._members.values())
        candidates = {name for name, _ in members[0].protocols}
        for member in members[1:]:
            candidates &= {name for name, _ in member.protocols}
        votes = Counter(member.vote(candidates) for member in members)
        return votes.most_common(1)[0][0]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self._members.values()), default=0)

    def join_members(self, protocol_name: str) -> tuple[JoinGroupMember, ...]:
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(protocol_name))
            for m in self._members.values()
        )
