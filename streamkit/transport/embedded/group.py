"""The embedded consumer as a member of its consumer group, when this process serves its data
directory: ``GroupMembership``.

A worker on the embedded log serves the directory to other processes (``client.py``), and
a second worker of the same app joins the same group there as a Kafka client. So the embedded
consumer joins that group too, through the served broker's ``GroupCoordinator`` in this
process (no socket), as one more member: the group assigns the partitions among all members,
and a member joining or leaving rebalances the others, exactly as on ``streamkit broker``.

The member speaks the Kafka consumer protocol (protocol type ``consumer``) with the Kafka
driver's one assignor, ``streamkit`` (``transport/placement.py``: range assignment, owners,
standbys), so whichever member the coordinator makes leader computes the same assignment:

* subscription (JoinGroup metadata), ConsumerProtocolMemberMetadata v0:
  ``int16 version, int32 n, n x (int16 len, utf-8 topic), int32 len, user data``;
* assignment (SyncGroup), ConsumerProtocolMemberAssignment v0:
  ``int16 version, int32 n, n x (int16 len, topic, int32 m, m x int32 partition),
  int32 len, user data`` (a length of -1 is null user data).

Rebalances are eager, as the Kafka driver's: on a heartbeat that says the group rebalances
(or no longer knows this member) the consumer revokes everything it holds, then rejoins.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Mapping, Sequence

from streamkit._core.types import TopicPartition
from streamkit.log.groups.coordinator import GroupCoordinator
from streamkit.log.groups.errors import GroupErrorCode
from streamkit.transport.base import TransportError
from streamkit.transport.placement import (
    GroupInfo,
    MemberInfo,
    decode_group,
    decode_member,
    encode_group,
    encode_member,
    group_infos,
    range_assign,
)

logger = logging.getLogger(__name__)
PROTOCOL_TYPE = "consumer"
PROTOCOL = "streamkit"  # the Kafka driver's assignor (``transport/kafka.py``)
SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 60_000
HEARTBEAT_INTERVAL_S = 1.0
_RETRY_S = 0.1
E = GroupErrorCode
_REJOIN = (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID)


class ProtocolDataError(ValueError):
    """Group metadata or an assignment that is not the consumer protocol's v0 layout."""


def encode_subscription(topics: Sequence[str], user_data: bytes | None) -> bytes:
    out = [struct.pack(">hi", 0, len(topics))]
    for topic in topics:
        raw = topic.encode()
        out.append(struct.pack(">h", len(raw)) + raw)
    out.append(_bytes(user_data))
    return b"".join(out)


def encode_assignment(assignment: Mapping[str, Sequence[int]], user_data: bytes | None) -> bytes:
    out = [struct.pack(">hi", 0, len(assignment))]
    for topic, partitions in sorted(assignment.items()):
        raw = topic.encode()
        out.append(struct.pack(">h", len(raw)) + raw + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    out.append(_bytes(user_data))
    return b"".join(out)


def _bytes(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def take(self, fmt: str) -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        if self._at + size > len(self._data):
            raise ProtocolDataError("group protocol data ends early")
        values = struct.unpack_from(fmt, self._data, self._at)
        self._at += size
        return values

    def raw(self, length: int) -> bytes:
        if length < 0 or self._at + length > len(self._data):
            raise ProtocolDataError("group protocol data ends early")
        out = self._data[self._at : self._at + length]
        self._at += length
        return out

    def string(self) -> str:
        (length,) = self.take(">h")
        return self.raw(length).decode(errors="replace")

    def user_data(self) -> bytes | None:
        if self._at == len(self._data):
            return None  # a member that sent no user data field at all
        (length,) = self.take(">i")
        return None if length < 0 else self.raw(length)


def decode_subscription(data: bytes) -> tuple[list[str], bytes | None]:
    reader = _Reader(data)
    _version, count = reader.take(">hi")
    topics = [reader.string() for _ in range(count)]
    return topics, reader.user_data()


def decode_assignment(data: bytes) -> tuple[dict[str, list[int]], bytes | None]:
    if not data:
        return {}, None
    reader = _Reader(data)
    _version, count = reader.take(">hi")
    out: dict[str, list[int]] = {}
    for _ in range(count):
        topic = reader.string()
        (n,) = reader.take(">i")
        out[topic] = list(reader.take(f">{n}i")) if n > 0 else []
    return out, reader.user_data()


class GroupMembership:
    """One in-process member of ``group_id`` on ``coordinator`` (module doc).

    ``partition_count(topic)`` tells the leader how many partitions a subscribed topic has
    (None: unknown, nothing of it is assigned).
    """

    def __init__(
        self,
        coordinator: GroupCoordinator,
        group_id: str,
        topics: Sequence[str],
        member: MemberInfo,
        partition_count: Callable[[str], int | None],
    ) -> None:
        self._coordinator = coordinator
        self.group_id = group_id
        self._topics = list(topics)
        self._member = member
        self._partition_count = partition_count
        self.member_id = ""
        self.generation = -1

    async def join(self) -> tuple[set[TopicPartition], GroupInfo]:
        """Join (or rejoin) the group; returns this member's partitions and the group info."""
        while True:
            joined = await self._coordinator.join_group(
                self.group_id, self.member_id, protocol_type=PROTOCOL_TYPE,
                protocols=[(PROTOCOL, encode_subscription(self._topics, encode_member(self._member)))],
                session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                client_id="streamkit-embedded", client_host="in-process", require_known_member_id=False,
            )
            if joined.error is E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if joined.error is not E.NONE:
                await self._retry_or_raise(joined.error, "join")
                continue
            self.member_id, self.generation = joined.member_id, joined.generation_id
            assignments: dict[str, bytes] = {}
            if joined.leader == joined.member_id:
                assignments = self._assign({m.member_id: m.metadata for m in joined.members})
            synced = await self._coordinator.sync_group(
                self.group_id, self.generation, self.member_id, assignments,
                protocol_type=PROTOCOL_TYPE, protocol_name=PROTOCOL,
            )
            if synced.error is E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if synced.error is not E.NONE:
                await self._retry_or_raise(synced.error, "sync")
                continue
            try:
                by_topic, user_data = decode_assignment(synced.assignment)
            except ProtocolDataError as exc:
                raise TransportError(f"group {self.group_id!r}: the leader's assignment is unreadable: {exc}") from exc
            tps = {TopicPartition(t, p) for t, ps in by_topic.items() for p in ps}
            return tps, decode_group(user_data)

    async def _retry_or_raise(self, error: GroupErrorCode, step: str) -> None:
        if error in _REJOIN or error in (E.COORDINATOR_NOT_AVAILABLE,):
            await asyncio.sleep(_RETRY_S)
            return
        raise TransportError(f"group {self.group_id!r}: {step} failed with {error.name}")

    def _assign(self, metadata: Mapping[str, bytes]) -> dict[str, bytes]:
        """The leader's part: range assignment plus owners and standbys
        (``transport/placement.py``), as the Kafka driver's assignor computes it."""
        subscriptions: dict[str, list[str]] = {}
        members: dict[str, MemberInfo] = {}
        for member_id, data in metadata.items():
            try:
                topics, user_data = decode_subscription(data)
            except ProtocolDataError:
                logger.warning("group %s: member %s sent unreadable metadata; it gets nothing", self.group_id, member_id)
                topics, user_data = [], None
            subscriptions[member_id] = topics
            members[member_id] = decode_member(user_data)
        counts: dict[str, int] = {}
        for topics in subscriptions.values():
            for topic in topics:
                count = self._partition_count(topic)
                if count:
                    counts[topic] = count
        assignment = range_assign(subscriptions, counts)
        infos = group_infos(assignment, members, counts)
        return {m: encode_assignment(assignment[m], encode_group(infos[m])) for m in subscriptions}

    async def heartbeat(self) -> bool:
        """Whether this member still holds its assignment (False: revoke and rejoin)."""
        result = await self._coordinator.heartbeat(self.group_id, self.generation, self.member_id)
        if result.error is E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        return result.error not in _REJOIN

    async def leave(self) -> None:
        if self.member_id:
            await self._coordinator.leave_group(self.group_id, self.member_id)
            self.member_id, self.generation = "", -1
