"""JoinGroup and the rebalance protocol of the plain group state machine (kafka-wire §7.2, §7.3)."""

from __future__ import annotations

from group_harness import PROTOCOLS, REBALANCE_MS, SESSION_MS, E, GroupHarness, S

from streamkit.log.groups import GroupConfig, JoinGroupMember, JoinGroupResult, Parked


def test_member_id_required_flow() -> None:
    h = GroupHarness()
    first = h.join("", client_id="app")
    assert first == JoinGroupResult(E.MEMBER_ID_REQUIRED, member_id="app-1")
    assert first.generation_id == -1 and first.leader == "" and first.members == ()
    assert h.group.state is S.EMPTY
    assert "app-1" in h.group.members.pending
    joined = h.join_answer(h.join("app-1", client_id="app"))
    assert joined == JoinGroupResult(
        E.NONE, 1, "consumer", "range", "app-1", "app-1",
        (JoinGroupMember("app-1", None, b"range-meta"),),
    )
    assert h.group.state is S.COMPLETING_REBALANCE
    assert not h.group.members.pending


def test_join_before_v4_gets_a_member_id_at_once() -> None:
    h = GroupHarness()
    joined = h.join_answer(h.join("", client_id="old", v4=False))
    assert joined.error is E.NONE and joined.member_id == "old-1" and joined.leader == "old-1"


def test_pending_member_expires_after_its_session_timeout() -> None:
    h = GroupHarness()
    pending = h.join("", client_id="a")
    assert isinstance(pending, JoinGroupResult)
    h.advance(SESSION_MS - 1)
    assert pending.member_id in h.group.members.pending
    h.advance(1)
    assert not h.group.members.pending
    assert h.join(pending.member_id) == JoinGroupResult(E.UNKNOWN_MEMBER_ID, member_id="a-1")


def test_session_timeout_outside_the_limits_is_refused() -> None:
    h = GroupHarness(GroupConfig(min_session_timeout_ms=6_000, max_session_timeout_ms=60_000))
    assert h.join(session_ms=5_999) == JoinGroupResult(E.INVALID_SESSION_TIMEOUT)
    assert h.registry.get("g") is None  # no group is created for a refused join
    assert h.join(session_ms=60_001) == JoinGroupResult(E.INVALID_SESSION_TIMEOUT)
    assert isinstance(h.join(session_ms=6_000), JoinGroupResult)  # MEMBER_ID_REQUIRED
    assert h.join_answer(h.join("c-1", session_ms=1_000)).error is E.INVALID_SESSION_TIMEOUT


def test_unknown_member_id_and_unknown_group() -> None:
    h = GroupHarness()
    assert h.join("ghost") == JoinGroupResult(E.UNKNOWN_MEMBER_ID, member_id="ghost")
    assert h.registry.get("g") is None
    h.stable_group("a")
    assert h.join("ghost") == JoinGroupResult(E.UNKNOWN_MEMBER_ID, member_id="ghost")


def test_empty_group_id_is_invalid() -> None:
    h = GroupHarness(group_id="")
    assert h.join_answer(h.join()).error is E.INVALID_GROUP_ID
    assert h.heartbeat("m", 1) is E.INVALID_GROUP_ID
    assert h.sync_answer(h.sync("m", 1)).error is E.INVALID_GROUP_ID
    assert h.leave("m") is E.INVALID_GROUP_ID


def test_inconsistent_protocols_are_refused() -> None:
    h = GroupHarness()
    h.stable_group("a")
    assert h.join_answer(h.join(protocol_type="connect")).error is E.INCONSISTENT_GROUP_PROTOCOL
    other = (("roundrobin", b""),)
    assert h.join_answer(h.join(protocols=other)).error is E.INCONSISTENT_GROUP_PROTOCOL
    assert h.join_answer(h.join(protocols=())).error is E.INCONSISTENT_GROUP_PROTOCOL
    h = GroupHarness()
    assert h.join_answer(h.join(protocol_type="")).error is E.INCONSISTENT_GROUP_PROTOCOL


def test_a_sole_member_may_change_its_protocols() -> None:
    h = GroupHarness()
    generation, [a] = h.stable_group("a")
    rejoined = h.join_answer(h.join(a, protocols=(("roundrobin", b"rr"),)))
    assert rejoined.error is E.NONE and rejoined.protocol_name == "roundrobin"
    assert rejoined.generation_id == generation + 1


def test_new_member_triggers_a_rebalance_that_completes_when_all_rejoined() -> None:
    h = GroupHarness()
    generation, [a] = h.stable_group("a")
    b_join = h.join_new("b")
    assert isinstance(b_join, Parked)
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(a, generation) is E.REBALANCE_IN_PROGRESS
    assert h.commit(a, generation) is E.NONE  # the old generation may still commit
    a_join = h.join_answer(h.join(a))
    b_result = h.join_answer(b_join)
    assert a_join.generation_id == b_result.generation_id == generation + 1
    assert a_join.leader == b_result.leader == a  # the leader is kept while it rejoins
    assert [m.member_id for m in a_join.members] == [a, b_result.member_id]
    assert b_result.members == ()
    assert h.group.state is S.COMPLETING_REBALANCE


def test_join_in_completing_rebalance_fails_parked_syncs() -> None:
    h = GroupHarness()
    generation, [a, b] = h.stable_group("a", "b")
    c_join = h.join_new("c")
    a_join = h.join(a)
    assert isinstance(a_join, Parked)  # b has not rejoined yet
    h.advance(SESSION_MS)  # b never does: its session expires, which completes the join
    assert h.group.state is S.COMPLETING_REBALANCE
    assert b not in h.group.members
    generation = h.group.generation_id
    c = h.join_answer(c_join).member_id
    assert h.join_answer(a_join).leader == a
    c_sync = h.sync(c, generation)
    assert isinstance(c_sync, Parked)
    h.join_new("d")  # -> PreparingRebalance: c's parked SyncGroup is told to rejoin
    assert h.sync_answer(c_sync).error is E.REBALANCE_IN_PROGRESS
    assert h.heartbeat(b, generation) is E.UNKNOWN_MEMBER_ID


def test_members_that_do_not_rejoin_are_removed_at_the_rebalance_deadline() -> None:
    h = GroupHarness()
    generation, [a, b, c] = h.stable_group("a", "b", "c")
    assert h.leave(c) is E.NONE
    b_join = h.join(b)
    for _ in range(3):  # a stays alive but does not rejoin
        h.advance(5_000)
        assert h.heartbeat(a, generation) is E.REBALANCE_IN_PROGRESS
    h.advance(REBALANCE_MS - 15_000 - 1)
    assert isinstance(b_join, Parked) and b_join.ticket in h.parked
    h.advance(1)
    result = h.join_answer(b_join)
    assert result.error is E.NONE and result.generation_id == generation + 1
    # the leader did not rejoin: the first member that did leads now
    assert result.leader == b and [m.member_id for m in result.members] == [b]
    assert h.heartbeat(a, generation) is E.UNKNOWN_MEMBER_ID


def test_protocol_is_chosen_by_votes() -> None:
    h = GroupHarness()
    rr_first = (("roundrobin", b"r"), ("range", b"g"))
    range_first = (("range", b"g"), ("roundrobin", b"r"), ("sticky", b"s"))
    a = h.join_answer(h.join_new("a", protocols=rr_first)).member_id
    b_join = h.join_new("b", protocols=range_first)
    c_join = h.join_new("c", protocols=range_first)
    a_result = h.join_answer(h.join(a, protocols=rr_first))
    assert a_result.protocol_name == "range"  # 2 votes to 1
    assert {m.metadata for m in a_result.members} == {b"g"}
    assert h.join_answer(b_join).protocol_name == h.join_answer(c_join).protocol_name == "range"


def test_protocol_vote_tie_goes_to_the_first_vote() -> None:
    h = GroupHarness()
    a = h.join_answer(h.join_new("a", protocols=(("rr", b""), ("range", b"")))).member_id
    b_join = h.join_new("b", protocols=(("range", b""), ("rr", b"")))
    assert h.join_answer(h.join(a, protocols=(("rr", b""), ("range", b"")))).protocol_name == "rr"
    assert h.join_answer(b_join).protocol_name == "rr"


def test_follower_rejoin_in_stable_with_same_metadata_gets_the_current_generation() -> None:
    h = GroupHarness()
    generation, [a, b] = h.stable_group("a", "b")
    again = h.join(b)
    assert again == JoinGroupResult(E.NONE, generation, "consumer", "range", a, b, ())
    assert h.group.state is S.STABLE


def test_follower_rejoin_with_changed_metadata_rebalances() -> None:
    h = GroupHarness()
    _, [a, b] = h.stable_group("a", "b")
    parked = h.join(b, protocols=(("range", b"new-subscription"),))
    assert isinstance(parked, Parked) and h.group.state is S.PREPARING_REBALANCE
    leader = h.join_answer(h.join(a))
    assert {m.member_id: m.metadata for m in leader.members}[b] == b"new-subscription"


def test_leader_rejoin_in_stable_rebalances() -> None:
    h = GroupHarness()
    generation, [a, b] = h.stable_group("a", "b")
    assert isinstance(h.join(a), Parked)
    assert h.group.state is S.PREPARING_REBALANCE
    h.join(b)
    assert h.group.generation_id == generation + 1


def test_rejoin_in_completing_rebalance_with_same_metadata_repeats_the_answer() -> None:
    h = GroupHarness()
    first = h.join_answer(h.join_new("a"))
    again = h.join_answer(h.join(first.member_id))
    assert again == first
    assert h.group.state is S.COMPLETING_REBALANCE
    changed = h.join(first.member_id, protocols=(("range", b"other"),))
    assert h.join_answer(changed).generation_id == first.generation_id + 1


def test_pending_member_holds_the_join_until_it_joins_or_expires() -> None:
    h = GroupHarness()
    generation, [a] = h.stable_group("a")
    b_join = h.join_new("b")
    pending = h.join("", client_id="c")
    assert isinstance(pending, JoinGroupResult) and pending.error is E.MEMBER_ID_REQUIRED
    a_join = h.join(a)
    assert isinstance(a_join, Parked)  # waits for the pending member
    h.advance(SESSION_MS)  # the pending id expires: the join completes without it
    assert h.join_answer(a_join).generation_id == generation + 1
    assert h.join_answer(b_join).error is E.NONE


def test_leaving_pending_member_releases_the_join() -> None:
    h = GroupHarness()
    _, [a] = h.stable_group("a")
    pending = h.join("", client_id="c")
    assert isinstance(pending, JoinGroupResult)
    a_join = h.join(a)
    assert isinstance(a_join, Parked)
    assert h.leave(pending.member_id) is E.NONE
    assert h.join_answer(a_join).error is E.NONE


def test_second_join_of_a_member_supersedes_its_parked_one() -> None:
    h = GroupHarness()
    _, [a, b] = h.stable_group("a", "b")
    first = h.join(b, protocols=(("range", b"x"),))
    second = h.join(b, protocols=(("range", b"y"),))
    assert h.join_answer(first).error is E.REBALANCE_IN_PROGRESS
    h.join(a)
    assert h.join_answer(second).error is E.NONE


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    h = GroupHarness(GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=3_000))
    a_join = h.join_new("a")
    assert isinstance(a_join, Parked) and h.group.state is S.PREPARING_REBALANCE
    h.advance(2_000)
    b_join = h.join_new("b")  # arrives during the delay: wait one more delay
    h.advance(1_000)
    assert isinstance(b_join, Parked)
    assert a_join.ticket in h.parked and b_join.ticket in h.parked
    h.advance(2_999)
    assert a_join.ticket in h.parked
    h.advance(1)
    a_result, b_result = h.join_answer(a_join), h.join_answer(b_join)
    assert a_result.generation_id == b_result.generation_id == 1
    assert len(a_result.members) == 2


def test_initial_rebalance_delay_never_exceeds_the_rebalance_timeout() -> None:
    config = GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=3_000)
    h = GroupHarness(config)
    a_join = h.join_new("a", rebalance_ms=7_000)
    for client in "bcdefg":  # one newcomer a second keeps extending the delay
        h.advance(1_000)
        h.join_new(client, rebalance_ms=7_000)
    assert h.group.state is S.PREPARING_REBALANCE
    assert a_join.ticket not in h.answers  # type: ignore[union-attr]
    h.advance(1_000)  # 7 s in: delays of 3 + 3 + 1 s add up to the rebalance timeout
    assert h.join_answer(a_join).error is E.NONE
    assert len(h.join_answer(a_join).members) == 7


def test_new_member_join_is_bounded_by_the_new_member_timeout() -> None:
    config = GroupConfig(min_session_timeout_ms=1_000, new_member_join_timeout_ms=5_000)
    h = GroupHarness(config)
    generation, [a] = h.stable_group("a")
    b_join = h.join_new("b", rebalance_ms=60_000)
    h.advance(4_000)
    assert h.heartbeat(a, generation) is E.REBALANCE_IN_PROGRESS
    h.advance(1_000)  # b gave up long ago, as far as the coordinator can tell
    assert h.join_answer(b_join) == JoinGroupResult(E.UNKNOWN_MEMBER_ID)
    assert len(h.group.members) == 1


def test_join_answers_carry_the_same_generation_leader_and_protocol() -> None:
    h = GroupHarness()
    generation, ids = h.stable_group("a", "b", "c", "d")
    assert generation == h.group.generation_id
    assert h.group.members.leader_id == ids[0]
    description = h.describe()
    assert description.state is S.STABLE and description.protocol_name == "range"
    assert {m.member_id: m.assignment for m in description.members} == {
        m: f"assignment-{m}".encode() for m in ids
    }
    assert all(m.metadata == PROTOCOLS[0][1] for m in description.members)
