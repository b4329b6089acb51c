"""Static membership: group_instance_id (JoinGroup v5, kafka-wire §7.9)."""

from __future__ import annotations

from group_harness import REBALANCE_MS, SESSION_MS, E, GroupHarness, S

from streamkit.log.groups import JoinGroupResult, Parked, SyncGroupResult


def static_stable_group(h: GroupHarness) -> tuple[int, str, str]:
    """A Stable group of a dynamic leader ``a`` and a static member ``b`` (instance "b")."""
    a = h.join_answer(h.join_new("a")).member_id
    b_join = h.join("", client_id="b", instance="b")  # no MEMBER_ID_REQUIRED for static members
    assert isinstance(b_join, Parked)
    h.join(a)
    b = h.join_answer(b_join).member_id
    generation = h.group.generation_id
    h.sync(b, generation, instance="b")
    h.sync(a, generation, {a: b"for-a", b: b"for-b"})
    assert h.group.state is S.STABLE
    return generation, a, b


def test_static_rejoin_with_same_metadata_replaces_the_member_id_without_rebalance() -> None:
    h = GroupHarness()
    generation, a, old_b = static_stable_group(h)
    rejoined = h.join("", client_id="b", instance="b")
    assert isinstance(rejoined, JoinGroupResult)
    new_b = rejoined.member_id
    assert new_b != old_b
    assert rejoined == JoinGroupResult(E.NONE, generation, "consumer", "range", a, new_b, ())
    assert h.group.state is S.STABLE and h.group.generation_id == generation
    assert h.heartbeat(old_b, generation, instance="b") is E.FENCED_INSTANCE_ID
    assert h.sync(old_b, generation, instance="b") == SyncGroupResult(E.FENCED_INSTANCE_ID)
    assert h.commit(old_b, generation, instance="b") is E.FENCED_INSTANCE_ID
    assert h.join_answer(h.join(old_b, instance="b")).error is E.FENCED_INSTANCE_ID
    assert h.leave(old_b, instance="b") is E.FENCED_INSTANCE_ID
    assert h.heartbeat(old_b, generation) is E.UNKNOWN_MEMBER_ID  # without the instance id
    synced = h.sync(new_b, generation, instance="b")
    assert synced == SyncGroupResult(E.NONE, b"for-b", "consumer", "range")
    assert h.heartbeat(new_b, generation, instance="b") is E.NONE


def test_static_leader_rejoin_is_not_told_it_leads() -> None:
    h = GroupHarness()
    b = h.join_answer(h.join("", client_id="b", instance="b")).member_id
    h.sync(b, 1, {b: b"mine"}, instance="b")
    rejoined = h.join("", client_id="b", instance="b")
    assert isinstance(rejoined, JoinGroupResult)
    # it gets the old leader id, so it does not assign again; it syncs as a follower
    assert rejoined.leader == b and rejoined.member_id != b and rejoined.members == ()
    assert h.group.members.leader_id == rejoined.member_id
    assert h.sync_answer(h.sync(rejoined.member_id, 1)).assignment == b"mine"


def test_static_rejoin_with_changed_metadata_rebalances() -> None:
    h = GroupHarness()
    generation, a, old_b = static_stable_group(h)
    rejoined = h.join("", client_id="b", instance="b", protocols=(("range", b"new"),))
    assert isinstance(rejoined, Parked)
    assert h.group.state is S.PREPARING_REBALANCE
    leader = h.join_answer(h.join(a))
    new_b = h.join_answer(rejoined).member_id
    assert new_b != old_b
    assert leader.generation_id == generation + 1
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in leader.members] == [
        (a, None, b"range-meta"),
        (new_b, "b", b"new"),
    ]


def test_replacing_a_static_member_fences_its_parked_join() -> None:
    h = GroupHarness()
    generation, a, old_b = static_stable_group(h)
    c_join = h.join_new("c")  # -> PreparingRebalance
    old_join = h.join(old_b, instance="b")
    assert isinstance(old_join, Parked)  # a has not rejoined yet
    new_join = h.join("", client_id="b", instance="b")
    assert h.join_answer(old_join) == JoinGroupResult(E.FENCED_INSTANCE_ID, member_id=old_b)
    assert isinstance(new_join, Parked)
    h.join(a)
    assert h.join_answer(new_join).generation_id == generation + 1
    assert h.join_answer(c_join).generation_id == generation + 1


def test_replacing_a_static_member_in_completing_rebalance_rebalances() -> None:
    h = GroupHarness()
    a = h.join_answer(h.join_new("a")).member_id
    b_join = h.join("", client_id="b", instance="b")
    h.join(a)
    old_b = h.join_answer(b_join).member_id
    old_sync = h.sync(old_b, h.group.generation_id, instance="b")
    new_join = h.join("", client_id="b", instance="b")
    assert h.sync_answer(old_sync).error is E.FENCED_INSTANCE_ID
    assert isinstance(new_join, Parked) and h.group.state is S.PREPARING_REBALANCE


def test_static_member_that_does_not_rejoin_stays_until_its_session_expires() -> None:
    h = GroupHarness()
    generation, a, b = static_stable_group(h)
    a_join = h.join(a)  # leader forces a rebalance; b stays silent
    h.advance(SESSION_MS - 1)
    assert isinstance(a_join, Parked) and a_join.ticket in h.parked
    assert b in h.group.members
    h.advance(1)  # b's session ran out, so everyone left has rejoined
    assert b not in h.group.members
    result = h.join_answer(a_join)
    assert result.generation_id == generation + 1 and len(result.members) == 1


def test_static_member_not_rejoined_is_kept_at_the_rebalance_deadline() -> None:
    h = GroupHarness()
    generation, a, b = static_stable_group(h)
    h.join_new("c")
    a_join = h.join(a)
    for _ in range(4):  # b heartbeats but does not rejoin within the rebalance timeout
        h.advance(REBALANCE_MS // 4)
        if a_join.ticket in h.parked:  # type: ignore[union-attr]
            assert h.heartbeat(b, generation, instance="b") is E.REBALANCE_IN_PROGRESS
    leader = h.join_answer(a_join)
    # unlike a dynamic member, it stays: a restarting static member keeps its place
    assert b in {m.member_id for m in leader.members}
    assert h.heartbeat(b, generation, instance="b") is E.ILLEGAL_GENERATION
    h.advance(SESSION_MS)
    assert b not in h.group.members


def test_rebalance_waits_again_when_only_silent_static_members_remain() -> None:
    h = GroupHarness()
    b = h.join_answer(h.join("", client_id="b", instance="b", session_ms=60_000)).member_id
    h.sync(b, 1, {b: b""}, instance="b")
    h.join_new("c")  # c starts a rebalance, then leaves
    c = next(m for m in h.group.members.ids() if m.startswith("c-"))
    h.leave(c)
    h.advance(REBALANCE_MS)  # nobody rejoined but b is still alive: wait once more
    assert h.group.state is S.PREPARING_REBALANCE and b in h.group.members
    rejoined = h.join_answer(h.join(b, instance="b", session_ms=60_000))
    assert rejoined.generation_id == 2 and rejoined.leader == b


def test_static_join_with_unknown_instance_and_a_member_id_is_unknown() -> None:
    h = GroupHarness()
    _, a, _ = static_stable_group(h)
    assert h.join_answer(h.join(a, instance="zzz")).error is E.UNKNOWN_MEMBER_ID
    pending = h.join("", client_id="d")
    assert isinstance(pending, JoinGroupResult)
    refused = h.join_answer(h.join(pending.member_id, instance="d"))  # pending ids: dynamic only
    assert refused.error is E.UNKNOWN_MEMBER_ID
    assert pending.member_id not in h.group.members.pending


def test_leave_by_instance_id() -> None:
    h = GroupHarness()
    _, _, b = static_stable_group(h)
    assert h.leave("", instance="b") is E.NONE
    assert b not in h.group.members and h.group.members.static_member_id("b") is None
    assert h.leave("", instance="b") is E.UNKNOWN_MEMBER_ID


def test_replaced_static_member_that_had_not_synced_must_still_sync() -> None:
    h = GroupHarness()
    a = h.join_answer(h.join_new("a")).member_id
    b_join = h.join("", client_id="b", instance="b")
    h.join(a)
    old_b = h.join_answer(b_join).member_id
    generation = h.group.generation_id
    h.sync(a, generation, {a: b"for-a", old_b: b"for-b"})  # Stable; b never synced
    rejoined = h.join("", client_id="b", instance="b")
    assert isinstance(rejoined, JoinGroupResult) and rejoined.error is E.NONE
    new_b = rejoined.member_id
    for step_ms in (5_000, 5_000, 5_000, 4_999):
        h.advance(step_ms)
        assert h.heartbeat(a, generation) is E.NONE
        assert h.heartbeat(new_b, generation, instance="b") is E.NONE
    h.advance(1)  # the sync deadline: the new id inherited the duty to sync
    assert new_b not in h.group.members
    assert h.group.state is S.PREPARING_REBALANCE


def test_registry_after_shutdown() -> None:
    h = GroupHarness()
    h.shutdown()
    assert h.join_answer(h.join()).error is E.COORDINATOR_NOT_AVAILABLE
    assert h.group.state is S.DEAD
    assert h.heartbeat("m", 1) is E.COORDINATOR_NOT_AVAILABLE
    other = GroupHarness(group_id="other")
    other.registry = h.registry
    assert other.heartbeat("m", 1) is E.NOT_COORDINATOR
