"""SyncGroup, Heartbeat, LeaveGroup, OffsetCommit checks and sessions (kafka-wire §7.4-§7.7)."""

from __future__ import annotations

from group_harness import REBALANCE_MS, SESSION_MS, E, GroupHarness, S

from streamkit.log.groups import JoinGroupResult, Parked, SyncGroupResult


def test_followers_wait_for_the_leaders_assignment() -> None:
    h = GroupHarness()
    a = h.join_answer(h.join_new("a")).member_id
    b_join, c_join = h.join_new("b"), h.join_new("c")
    h.join(a)
    b, c = h.join_answer(b_join).member_id, h.join_answer(c_join).member_id
    generation = h.group.generation_id
    b_sync = h.sync(b, generation)
    c_sync = h.sync(c, generation)
    assert isinstance(b_sync, Parked) and isinstance(c_sync, Parked)
    assert h.group.state is S.COMPLETING_REBALANCE
    # the leader leaves c out and names a member that does not exist
    leader_sync = h.sync(a, generation, {a: b"for-a", b: b"for-b", "ghost": b"x"})
    assert leader_sync == SyncGroupResult(E.NONE, b"for-a", "consumer", "range")
    assert h.sync_answer(b_sync) == SyncGroupResult(E.NONE, b"for-b", "consumer", "range")
    assert h.sync_answer(c_sync) == SyncGroupResult(E.NONE, b"", "consumer", "range")
    assert h.group.state is S.STABLE
    # in Stable a SyncGroup gets the stored assignment at once; a new one is ignored
    assert h.sync(b, generation) == SyncGroupResult(E.NONE, b"for-b", "consumer", "range")
    assert h.sync(a, generation, {a: b"other"}) == SyncGroupResult(
        E.NONE, b"for-a", "consumer", "range"
    )


def test_sync_errors() -> None:
    h = GroupHarness()
    assert h.sync("m", 1) == SyncGroupResult(E.UNKNOWN_MEMBER_ID)  # unknown group
    generation, [a, b] = h.stable_group("a", "b")
    assert h.sync("ghost", generation) == SyncGroupResult(E.UNKNOWN_MEMBER_ID)
    assert h.sync(b, generation + 1) == SyncGroupResult(E.ILLEGAL_GENERATION)
    assert h.sync(b, generation, protocol_name="roundrobin") == SyncGroupResult(
        E.INCONSISTENT_GROUP_PROTOCOL
    )
    h.join(a)  # -> PreparingRebalance
    assert h.sync(b, generation) == SyncGroupResult(E.REBALANCE_IN_PROGRESS)


def test_second_parked_sync_supersedes_the_first() -> None:
    h = GroupHarness()
    a = h.join_answer(h.join_new("a")).member_id
    b_join = h.join_new("b")
    h.join(a)
    b = h.join_answer(b_join).member_id
    generation = h.group.generation_id
    first, second = h.sync(b, generation), h.sync(b, generation)
    assert h.sync_answer(first).error is E.REBALANCE_IN_PROGRESS
    h.sync(a, generation, {b: b"b"})
    assert h.sync_answer(second).assignment == b"b"


def test_a_member_that_never_syncs_is_removed_at_the_sync_deadline() -> None:
    h = GroupHarness()
    a = h.join_answer(h.join_new("a")).member_id
    b_join = h.join_new("b")
    h.join(a)
    b = h.join_answer(b_join).member_id
    generation = h.group.generation_id
    assert h.sync_answer(h.sync(a, generation, {a: b"a", b: b"b"})).error is E.NONE
    assert h.group.state is S.STABLE
    for _ in range(4):  # b heartbeats but never syncs
        h.advance(REBALANCE_MS // 4)
        if b in h.group.members:
            h.heartbeat(b, generation)
            h.heartbeat(a, generation)
    assert b not in h.group.members
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(b, generation) is E.UNKNOWN_MEMBER_ID


def test_a_leader_that_never_syncs_releases_parked_followers() -> None:
    h = GroupHarness()
    a = h.join_answer(h.join_new("a")).member_id
    b_join = h.join_new("b")
    h.join(a)
    b = h.join_answer(b_join).member_id
    b_sync = h.sync(b, h.group.generation_id)
    h.advance(SESSION_MS)  # the leader is silent: its session expires
    assert h.sync_answer(b_sync).error is E.REBALANCE_IN_PROGRESS
    assert a not in h.group.members


def test_heartbeat_in_each_state() -> None:
    h = GroupHarness()
    assert h.heartbeat("m", 0) is E.UNKNOWN_MEMBER_ID  # unknown group
    a = h.join_answer(h.join_new("a")).member_id
    assert h.group.state is S.COMPLETING_REBALANCE
    assert h.heartbeat(a, 1) is E.NONE
    assert h.heartbeat(a, 0) is E.ILLEGAL_GENERATION
    assert h.heartbeat("ghost", 1) is E.UNKNOWN_MEMBER_ID
    h.sync(a, 1, {a: b""})
    assert h.group.state is S.STABLE
    assert h.heartbeat(a, 1) is E.NONE
    h.join_new("b")
    assert h.heartbeat(a, 1) is E.REBALANCE_IN_PROGRESS
    assert h.leave(a) is E.NONE
    h.advance(REBALANCE_MS)  # b is parked alone: the join completes, then b goes silent
    h.advance(SESSION_MS)
    assert h.group.state is S.EMPTY
    assert h.heartbeat(a, h.group.generation_id) is E.UNKNOWN_MEMBER_ID
    assert h.sync_answer(h.sync(a, h.group.generation_id)).error is E.UNKNOWN_MEMBER_ID


def test_session_expiry_evicts_a_silent_member_and_rebalances() -> None:
    h = GroupHarness()
    generation, [a, b] = h.stable_group("a", "b")
    h.advance(SESSION_MS - 1)
    assert h.heartbeat(a, generation) is E.NONE
    h.advance(1)
    assert b not in h.group.members  # b never heartbeated
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(b, generation) is E.UNKNOWN_MEMBER_ID
    assert h.heartbeat(a, generation) is E.REBALANCE_IN_PROGRESS
    rejoined = h.join_answer(h.join(a))
    assert rejoined.generation_id == generation + 1 and len(rejoined.members) == 1


def test_session_expiry_is_exact() -> None:
    h = GroupHarness()
    generation, [a] = h.stable_group("a")
    h.advance(SESSION_MS - 1)
    assert a in h.group.members
    h.advance(1)
    assert h.group.state is S.EMPTY and h.group.generation_id == generation + 1


def test_commit_and_join_keep_the_session_alive() -> None:
    h = GroupHarness()
    generation, [a, b] = h.stable_group("a", "b")
    for _ in range(4):
        h.advance(SESSION_MS - 1)
        assert h.commit(a, generation) is E.NONE
        assert h.join_answer(h.join(b)).generation_id == generation  # follower, no change
    assert h.group.state is S.STABLE


def test_leave_rebalances_and_the_last_leave_empties_the_group() -> None:
    h = GroupHarness()
    generation, [a, b] = h.stable_group("a", "b")
    assert h.leave("ghost") is E.UNKNOWN_MEMBER_ID
    assert h.leave(a) is E.NONE
    assert h.group.state is S.PREPARING_REBALANCE
    rejoined = h.join_answer(h.join(b))
    assert rejoined.generation_id == generation + 1 and rejoined.leader == b
    assert h.leave(b) is E.NONE
    assert h.group.state is S.EMPTY
    assert h.group.generation_id == generation + 2
    assert h.leave(b) is E.UNKNOWN_MEMBER_ID
    assert h.leave("x") is E.UNKNOWN_MEMBER_ID


def test_leave_answers_the_members_parked_join() -> None:
    h = GroupHarness()
    _, [a, b] = h.stable_group("a", "b")
    b_join = h.join(b, protocols=(("range", b"changed"),))
    assert h.leave(b) is E.NONE
    assert h.join_answer(b_join) == JoinGroupResult(E.UNKNOWN_MEMBER_ID)
    assert h.join_answer(h.join(a)).members[0].member_id == a


def test_leave_answers_the_members_parked_sync() -> None:
    h = GroupHarness()
    a = h.join_answer(h.join_new("a")).member_id
    b_join = h.join_new("b")
    h.join(a)
    b = h.join_answer(b_join).member_id
    b_sync = h.sync(b, h.group.generation_id)
    assert h.leave(b) is E.NONE
    assert h.sync_answer(b_sync).error is E.UNKNOWN_MEMBER_ID


def test_offset_commit_checks() -> None:
    h = GroupHarness()
    assert h.commit("", 3) is E.ILLEGAL_GENERATION  # unknown group, not a simple consumer
    assert h.registry.get("g") is None
    assert h.commit("", -1) is E.NONE  # a simple consumer creates the group
    assert h.group.state is S.EMPTY
    a = h.join_answer(h.join_new("a")).member_id
    assert h.commit(a, 1) is E.REBALANCE_IN_PROGRESS  # CompletingRebalance
    h.sync(a, 1, {a: b""})
    assert h.commit(a, 1) is E.NONE  # Stable
    assert h.commit(a, 0) is E.ILLEGAL_GENERATION
    assert h.commit("ghost", 1) is E.UNKNOWN_MEMBER_ID
    assert h.commit("", -1) is E.UNKNOWN_MEMBER_ID  # not a simple consumer's group any more
    h.join_new("b")
    assert h.commit(a, 1) is E.NONE  # PreparingRebalance: the old generation may commit
    assert h.leave(a) is E.NONE
    h.advance(REBALANCE_MS + SESSION_MS)
    assert h.group.state is S.EMPTY
    assert h.commit("", -1) is E.NONE


def test_shutdown_answers_parked_requests_and_the_group_goes_dead() -> None:
    h = GroupHarness()
    _, [a, b] = h.stable_group("a", "b")
    parked = h.join(b, protocols=(("range", b"new"),))
    h.shutdown()
    assert h.join_answer(parked).error is E.NOT_COORDINATOR
    assert h.group.state is S.DEAD and not h.registry.parked_tickets()
    assert h.heartbeat(a, 1) is E.COORDINATOR_NOT_AVAILABLE
    assert h.join_answer(h.join(a)).error is E.COORDINATOR_NOT_AVAILABLE
    assert h.commit(a, 1) is E.COORDINATOR_NOT_AVAILABLE
    assert h.leave(a) is E.COORDINATOR_NOT_AVAILABLE
    assert h.sync_answer(h.sync(a, 1)).error is E.COORDINATOR_NOT_AVAILABLE
    assert h.describe().state is S.DEAD
    assert h.registry.listings() == []


def test_describe_and_list() -> None:
    h = GroupHarness()
    pending = h.join("", client_id="a")
    assert isinstance(pending, JoinGroupResult)
    assert h.registry.describe("g").state is S.EMPTY  # type: ignore[union-attr]
    assert h.registry.describe("nope") is None
    a = h.join_answer(h.join(pending.member_id, client_id="a")).member_id
    description = h.describe()
    assert description.state is S.COMPLETING_REBALANCE
    assert description.protocol_name == "" and description.members[0].metadata == b""
    assert description.members[0].client_id == "a"
    assert description.members[0].client_host == "/127.0.0.1"
    h.sync(a, 1, {a: b"mine"})
    member = h.describe().members[0]
    assert (member.member_id, member.metadata, member.assignment) == (a, b"range-meta", b"mine")
    [listing] = h.registry.listings()
    assert (listing.group_id, listing.protocol_type, listing.state) == ("g", "consumer", S.STABLE)
