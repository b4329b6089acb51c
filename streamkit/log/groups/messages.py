"""Plain values the group coordinator takes and gives: config, requests, results, steps.

Everything here is a frozen value with no behaviour beyond construction. Results carry a
``GroupErrorCode`` plus exactly the fields the wire server copies into Kafka responses;
on an error the other fields hold Kafka's "no value" defaults (generation -1, empty
strings, no members).

Parked requests are plain data too. Each state-machine call returns a ``Step``: its
``reply`` is either the caller's result or ``Parked(ticket)``; its ``deliveries`` are
results for requests parked earlier, each tagged with the ticket it answers. A ticket is
answered exactly once. A reply is never ``Parked`` with a ticket that the same step
already delivers: such a request is answered in ``reply`` directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, TypeVar

from streamkit._core.errors import ConfigError
from streamkit._core.types import TopicPartition
from streamkit.log.groups.errors import GroupErrorCode

NO_GENERATION = -1
"""The generation of a result that carries none, and of a "simple consumer" commit."""

OFFSET_METADATA_MAX_BYTES = 4_096
"""Kafka's default ``offset.metadata.max.bytes``: the longest commit metadata stored."""

R = TypeVar("R")

Protocols = tuple[tuple[str, bytes], ...]
"""A member's (protocol name, metadata) pairs, most preferred first."""


class GroupState(StrEnum):
    """A group's state, spelled as Kafka's DescribeGroups and ListGroups report it."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class GroupConfig:
    """Coordinator settings, named after Kafka's broker settings (``group.*``).

    >>> GroupConfig(initial_rebalance_delay_ms=3_000).min_session_timeout_ms
    6000
    """

    min_session_timeout_ms: int = 6_000
    """``group.min.session.timeout.ms``: smaller JoinGroup session timeouts are refused."""
    max_session_timeout_ms: int = 1_800_000
    """``group.max.session.timeout.ms``: larger JoinGroup session timeouts are refused."""
    initial_rebalance_delay_ms: int = 0
    """``group.initial.rebalance.delay.ms``: how long the first rebalance of an Empty group
    waits for more members. Kafka's default is 3000; 0 answers the first member at once."""
    new_member_join_timeout_ms: int = 300_000
    """How long a brand-new member's parked JoinGroup keeps it alive (Kafka: 5 minutes)."""
    offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES
    """``offset.metadata.max.bytes``: longer commit metadata gets OFFSET_METADATA_TOO_LARGE,
    in OffsetCommit and TxnOffsetCommit alike (``metadata_fits``)."""

    def __post_init__(self) -> None:
        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms:
            raise ConfigError("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        if self.initial_rebalance_delay_ms < 0:
            raise ConfigError("initial_rebalance_delay_ms must be >= 0")
        if self.new_member_join_timeout_ms <= 0:
            raise ConfigError("new_member_join_timeout_ms must be > 0")
        if self.offset_metadata_max_bytes < 0:
            raise ConfigError("offset_metadata_max_bytes must be >= 0")

    def session_timeout_valid(self, session_timeout_ms: int) -> bool:
        return self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms


def metadata_fits(metadata: str, max_bytes: int = OFFSET_METADATA_MAX_BYTES) -> bool:
    """Whether commit ``metadata`` may be stored: at most ``max_bytes`` bytes of UTF-8.

    Kafka counts a Java string's length (UTF-16 units); counting bytes is at least as
    strict, and the same for ASCII, which is what the runtime writes.

    >>> metadata_fits("x" * 4096), metadata_fits("x" * 4097), metadata_fits("é" * 2049)
    (True, False, False)
    """
    return len(metadata.encode()) <= max_bytes


@dataclass(frozen=True)
class JoinGroupRequest:
    """One JoinGroup (v0-v5) as the state machine sees it."""

    member_id: str
    """"" for a member that has no id yet."""
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1
    """-1 (JoinGroup v0, which has no such field): use ``session_timeout_ms``."""
    group_instance_id: str | None = None
    """Static membership (JoinGroup v5+)."""
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True
    """True from JoinGroup v4 on: a member without an id first gets MEMBER_ID_REQUIRED."""

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        return self.session_timeout_ms if self.rebalance_timeout_ms < 0 else self.rebalance_timeout_ms


@dataclass(frozen=True)
class JoinGroupMember:
    """One member as the leader's JoinGroup response lists it."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResult:
    error: GroupErrorCode
    generation_id: int = NO_GENERATION
    protocol_type: str = ""
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    """The group's members with their metadata for the chosen protocol; only the leader
    gets them, followers get ()."""


@dataclass(frozen=True)
class SyncGroupResult:
    error: GroupErrorCode
    assignment: bytes = b""
    protocol_type: str = ""
    protocol_name: str = ""


@dataclass(frozen=True)
class HeartbeatResult:
    error: GroupErrorCode


@dataclass(frozen=True)
class LeaveGroupResult:
    error: GroupErrorCode


@dataclass(frozen=True)
class OffsetCommitResult:
    """Per-partition errors of one OffsetCommit, in request order."""

    errors: Mapping[TopicPartition, GroupErrorCode]


@dataclass(frozen=True)
class OffsetFetchResult:
    """Committed (offset, metadata) per partition; (-1, "") where nothing is committed."""

    error: GroupErrorCode
    offsets: Mapping[TopicPartition, tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    """Metadata for the group's protocol; b"" unless the group is Stable (as Kafka)."""
    assignment: bytes
    """b"" unless the group is Stable."""


@dataclass(frozen=True)
class GroupDescription:
    """One group as DescribeGroups reports it. An unknown group is state Dead, error NONE."""

    group_id: str
    error: GroupErrorCode
    state: GroupState
    protocol_type: str = ""
    protocol_name: str = ""
    """The chosen protocol; "" unless the group is Stable."""
    members: tuple[MemberDescription, ...] = ()


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: GroupState


@dataclass(frozen=True)
class ListGroupsResult:
    error: GroupErrorCode
    groups: tuple[GroupListing, ...] = ()


@dataclass(frozen=True)
class Parked:
    """The request waits; its result will come later as a ``Delivery`` with this ticket."""

    ticket: int


@dataclass(frozen=True)
class Delivery:
    """The result of a request parked earlier."""

    ticket: int
    group_id: str
    member_id: str
    """The member the parked request came from (its old id if it was fenced since)."""
    result: JoinGroupResult | SyncGroupResult


@dataclass(frozen=True)
class Step(Generic[R]):
    """What one state-machine call produced: the caller's reply and earlier requests' results."""

    reply: R | Parked
    deliveries: tuple[Delivery, ...] = ()
