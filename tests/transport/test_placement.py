"""Partition placement for a group of workers, against the properties it promises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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

members_st = st.lists(st.text("abcdef", min_size=1, max_size=4), min_size=1, max_size=5, unique=True)


@given(members=members_st, count=st.integers(1, 12), replicas=st.integers(0, 3))
def test_every_partition_has_one_owner_and_standbys_elsewhere(members: list[str], count: int, replicas: int) -> None:
    topics = ["a", "a-repartition"]
    counts = {t: count for t in topics}
    assignment = range_assign({m: topics for m in members}, counts)
    # co-partitioned topics: each member holds the same numbers of both
    for m in members:
        assert assignment[m].get("a", []) == assignment[m].get("a-repartition", [])
    held = sorted(p for m in members for p in assignment[m].get("a", []))
    assert held == list(range(count))
    infos = group_infos(assignment, {m: MemberInfo(f"http://{m}", replicas) for m in members}, counts)
    owner = {p: m for m in members for p in assignment[m].get("a", [])}
    for m in members:
        info = infos[m]
        assert info.owners == {p: f"http://{owner[p]}" for p in range(count)}
        assert not info.standbys & set(assignment[m].get("a", []))  # never a standby of its own
    expected = min(replicas, len(members) - 1)
    for p in range(count):
        assert sum(p in infos[m].standbys for m in members) == expected


def test_user_data_round_trips_and_garbage_is_harmless() -> None:
    assert decode_member(encode_member(MemberInfo("http://x", 2))) == MemberInfo("http://x", 2)
    group = GroupInfo({0: "http://a", 1: None}, frozenset({1}))
    assert decode_group(encode_group(group)) == group
    assert decode_member(b"\xff not json") == MemberInfo()
    assert decode_group(b"[1, 2]") == GroupInfo()
    assert decode_member(None) == MemberInfo()
