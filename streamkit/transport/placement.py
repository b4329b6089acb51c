"""Where partitions go in a consumer group of workers: active owners and standby copies.

Plain code the Kafka driver's assignor runs on the group's leader (no I/O, no aiokafka):

* active partitions are assigned per topic in contiguous ranges over the members sorted by id
  (Kafka's range assignor), so partition p of co-partitioned topics lands on one member;
* each member tells the others, through its subscription's user data, the URL of its HTTP API
  and how many standby replicas its tables want; the leader sends every member, in its
  assignment's user data, the owner URL of every partition number (so any worker can route a
  query to the owner of a key) and the partition numbers it keeps warm as a standby (the next
  N members after the owner, in member order).

User data on the wire is JSON (``encode_member``/``encode_group``), so a member that sent none
(another client) still gets a valid plain range assignment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class MemberInfo:
    url: str | None = None
    standby_replicas: int = 0


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """What one member learns from an assignment."""

    owners: dict[int, str | None] = field(default_factory=dict)  # partition number -> owner's URL
    standbys: frozenset[int] = frozenset()  # partition numbers this member keeps warm


def encode_member(info: MemberInfo) -> bytes:
    return json.dumps({"url": info.url, "standby": info.standby_replicas}).encode()


def decode_member(data: bytes | None) -> MemberInfo:
    try:
        raw = json.loads(data or b"{}")
        return MemberInfo(raw.get("url"), max(0, int(raw.get("standby", 0))))
    except (ValueError, TypeError, AttributeError):
        return MemberInfo()


def encode_group(info: GroupInfo) -> bytes:
    return json.dumps({"owners": {str(p): u for p, u in info.owners.items()}, "standby": sorted(info.standbys)}).encode()


def decode_group(data: bytes | None) -> GroupInfo:
    try:
        raw = json.loads(data or b"{}")
        owners = {int(p): u for p, u in raw.get("owners", {}).items()}
        return GroupInfo(owners, frozenset(int(p) for p in raw.get("standby", [])))
    except (ValueError, TypeError, AttributeError):
        return GroupInfo()


def range_assign(
    subscriptions: Mapping[str, Sequence[str]], counts: Mapping[str, int]
) -> dict[str, dict[str, list[int]]]:
    """member -> topic -> partitions, as Kafka's range assignor lays them out."""
    by_topic: dict[str, list[str]] = {}
    for member, topics in subscriptions.items():
        for topic in topics:
            by_topic.setdefault(topic, []).append(member)
    out: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
    for topic, members in by_topic.items():
        count = counts.get(topic)
        if not count:
            continue
        members.sort()
        per, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            length = per + (1 if i < extra else 0)
            out[member][topic] = list(range(start, start + length))
            start += length
    return out


def group_infos(
    assignment: Mapping[str, Mapping[str, Sequence[int]]],
    members: Mapping[str, MemberInfo],
    counts: Mapping[str, int],
) -> dict[str, GroupInfo]:
    """Per member: the owner of each partition number, and its standby partitions."""
    order = sorted(members)
    owner_of: dict[int, str] = {}
    # Partition p's owner: the member holding p of the topic with the most partitions (then
    # by name), so every partition number has exactly one owner.
    for topic in sorted(counts, key=lambda t: (-counts[t], t)):
        for member in order:
            for p in assignment.get(member, {}).get(topic, ()):
                owner_of.setdefault(p, member)
    replicas = max((m.standby_replicas for m in members.values()), default=0)
    standbys: dict[str, set[int]] = {member: set() for member in order}
    for p, owner in owner_of.items():
        if replicas <= 0 or len(order) < 2:
            break
        at = order.index(owner)
        for step in range(1, min(replicas, len(order) - 1) + 1):
            standbys[order[(at + step) % len(order)]].add(p)
    owners = {p: members[m].url for p, m in sorted(owner_of.items())}
    return {member: GroupInfo(dict(owners), frozenset(standbys[member])) for member in order}
