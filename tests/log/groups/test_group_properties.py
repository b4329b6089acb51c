"""Random conversations between a few clients and one group, checked against a client model.

Four clients (three dynamic, one static) send JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
OffsetCommit in any order while time jumps about. Each client remembers what a real one
would (its member id, generation, the member list if it leads); the model also tracks who
owns each member id, when it was last heard from, and what each leader assigned. After every
step it checks:

* each parked request is answered exactly once (the harness), and within the rebalance
  timeout (or the initial delay) of being parked: nothing dangles once time moves on;
* the generation never decreases; the group is Empty exactly when it has no members, has
  exactly one leader when it has members, and that leader is a member;
* the JoinGroup answers of one generation agree on protocol and on who leads; the leader's
  answer lists itself and every member answered with it;
* in Stable, every dynamic member's client holds the group's generation;
* every SyncGroup answer carries exactly the bytes the leader assigned that member (b""
  if it was left out);
* a member id that left the group never comes back, and its requests get
  UNKNOWN_MEMBER_ID (FENCED_INSTANCE_ID for a replaced static member);
* a dynamic member not heard from for a session timeout is gone;
* Heartbeat and OffsetCommit answers match Kafka's checks (§7.5, §7.7) for the group's
  state before the request;
* after a long silence every parked request is answered and the group is Empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from group_harness import SESSION_MS, E, GroupHarness, S
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from streamkit.log.groups import (
    GroupConfig,
    JoinGroupResult,
    Parked,
    SyncGroupResult,
)

CLIENTS = ("a", "b", "c", "s")  # "s" is static (group_instance_id "s")
REBALANCE_CHOICES = (10_000, 25_000)
DELAY_CHOICES = (0, 3_000)
Identity = tuple[str, int]  # (client, incarnation); a static client has one incarnation


@dataclass
class Client:
    name: str
    static: bool
    incarnation: int = 0
    variant: int = 0  # which subscription (protocol metadata) it sends
    next_step: str = "join"  # what a well-behaved client sends next: join, sync or heartbeat
    member_id: str = ""
    generation: int = -1
    led_members: tuple[str, ...] = ()  # member ids it was told to assign, if it leads

    @property
    def identity(self) -> Identity:
        return (self.name, self.incarnation)

    @property
    def instance(self) -> str | None:
        return self.name if self.static else None


@dataclass(frozen=True)
class Sent:
    client: str
    identity: Identity
    kind: str  # "join" or "sync"
    member_id: str
    generation: int
    at_ms: int
    replaces: str | None = None  # a static member's id before this JoinGroup


def protocols_for(client: str, variant: int) -> tuple[tuple[str, bytes], ...]:
    range_ = ("range", f"range-{client}-{variant}".encode())
    rr = ("roundrobin", f"rr-{client}-{variant}".encode())
    return (range_, rr) if variant % 2 == 0 else (rr, range_)


class GroupConversation(RuleBasedStateMachine):
    @initialize(delay_ms=st.sampled_from(DELAY_CHOICES))
    def setup(self, delay_ms: int) -> None:
        config = GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=delay_ms)
        self.h = GroupHarness(config)
        self.bound_ms = max(delay_ms, *REBALANCE_CHOICES)
        self.clients = {name: Client(name, static=name == "s") for name in CLIENTS}
        self.sent: dict[int, Sent] = {}
        self.owner: dict[str, Identity] = {}
        self.last_heard: dict[str, int] = {}
        self.seen: set[str] = set()
        self.gone: set[str] = set()
        # A static member replaced without a rebalance keeps its assignment under its new
        # id: ``alias`` maps the new id to the first id of that place in the group.
        self.alias: dict[str, str] = {}
        self.assigned: dict[int, dict[str, bytes]] = {}  # generation -> member key -> bytes
        self.leaders: dict[int, tuple[str, str]] = {}  # generation -> (leader key, protocol)
        self.processed = 0

    # -- rules ------------------------------------------------------------------------------

    @rule(name=st.sampled_from(CLIENTS), v4=st.booleans(), rebalance_ms=st.sampled_from(REBALANCE_CHOICES))
    def join(self, name: str, v4: bool, rebalance_ms: int) -> None:
        """Join, or rejoin with the same subscription (what a client does on a rebalance)."""
        self.send_join(self.clients[name], v4, rebalance_ms)

    @rule(name=st.sampled_from(CLIENTS), v4=st.booleans())
    def restart(self, name: str, v4: bool) -> None:
        """The client restarted without leaving: a dynamic one forgets its member id."""
        client = self.clients[name]
        client.member_id, client.generation, client.led_members = "", -1, ()
        client.next_step = "join"
        if not client.static:
            client.incarnation += 1  # its old member id is a ghost now
        self.send_join(client, v4, REBALANCE_CHOICES[0])

    @rule(name=st.sampled_from(CLIENTS), variant=st.integers(0, 2))
    def change_subscription(self, name: str, variant: int) -> None:
        client = self.clients[name]
        client.variant = variant
        self.send_join(client, True, REBALANCE_CHOICES[0])

    def send_join(self, client: Client, v4: bool, rebalance_ms: int) -> None:
        group = self.h.registry.get("g")
        replaces = None
        if client.static and group is not None:
            replaces = group.members.static_member_id(client.name)
        self.heard(client.member_id)
        reply = self.h.join(
            client.member_id, client_id=client.name,
            protocols=protocols_for(client.name, client.variant), session_ms=SESSION_MS,
            rebalance_ms=rebalance_ms, instance=client.instance, v4=v4,
        )
        sent = Sent(
            client.name, client.identity, "join", client.member_id, -1, self.h.now, replaces
        )
        self.after(reply, sent)

    @rule(name=st.sampled_from(CLIENTS), data=st.data())
    def sync(self, name: str, data: st.DataObject) -> None:
        client = self.clients[name]
        chosen: list[str] = []
        if client.led_members:
            chosen = data.draw(st.lists(st.sampled_from(client.led_members), unique=True))
            if data.draw(st.booleans()):
                chosen.append("ghost")
        self.sync_now(client, chosen)

    def sync_now(self, client: Client, chosen: list[str]) -> None:
        group = self.h.registry.get("g")
        assignments = {m: f"{client.generation}:{m}".encode() for m in chosen}
        if (
            group is not None
            and group.state is S.COMPLETING_REBALANCE
            and group.members.leader_id == client.member_id
            and group.generation_id == client.generation
        ):  # this SyncGroup will set the generation's assignment
            self.assigned[client.generation] = {
                self.key(m): assignments.get(m, b"") for m in group.members.ids()
            }
        self.heard(client.member_id)
        reply = self.h.sync(
            client.member_id, client.generation, assignments, instance=client.instance
        )
        sent = Sent(client.name, client.identity, "sync", client.member_id, client.generation, self.h.now)
        self.after(reply, sent)

    @rule(name=st.sampled_from(CLIENTS), stale=st.booleans())
    def heartbeat(self, name: str, stale: bool) -> None:
        client = self.clients[name]
        generation = client.generation - 1 if stale else client.generation
        expected = self.expected_check(client.member_id, generation, client.instance, "heartbeat")
        self.heard(client.member_id)
        error = self.h.heartbeat(client.member_id, generation, client.instance)
        assert error is expected, (error, expected)
        self.forget_if_unknown(client, client.member_id, error)
        if error is not E.NONE:
            client.next_step = "join"
        self.after(None, None)

    @rule(name=st.sampled_from(CLIENTS), simple=st.booleans())
    def commit(self, name: str, simple: bool) -> None:
        client = self.clients[name]
        member_id, generation = ("", -1) if simple else (client.member_id, client.generation)
        expected = self.expected_check(member_id, generation, client.instance, "commit")
        self.heard(member_id)
        error = self.h.commit(member_id, generation, client.instance)
        assert error is expected, (error, expected)
        self.after(None, None)

    @rule(name=st.sampled_from(CLIENTS))
    def leave(self, name: str) -> None:
        client = self.clients[name]
        member_id = client.member_id
        group = self.h.registry.get("g")
        was_member = group is not None and member_id in group.members
        error = self.h.leave(member_id, client.instance)
        if member_id in self.gone:
            assert error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID)
        if was_member:
            assert error is E.NONE
        if error is E.NONE:
            client.member_id, client.generation, client.led_members = "", -1, ()
            client.next_step = "join"
        self.after(None, None)

    @rule(order=st.permutations(CLIENTS), v4=st.booleans())
    def everyone_behaves(self, order: list[str], v4: bool) -> None:
        """Each client not waiting for an answer sends what a real client would send next."""
        for name in order:
            client = self.clients[name]
            if any(sent.identity == client.identity for sent in self.sent.values()):
                continue  # still waiting for a parked JoinGroup or SyncGroup
            if client.next_step == "join":
                self.send_join(client, v4, REBALANCE_CHOICES[0])
            elif client.next_step == "sync":
                self.sync_now(client, list(client.led_members))
            else:
                self.heartbeat(name, stale=False)

    @rule(ms=st.sampled_from([0, 1, 999, 1_000, 3_000, 5_000, 9_999, 10_000, 25_000]))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)
        self.after(None, None)

    @rule()
    def long_silence(self) -> None:
        self.h.advance(10 * (self.bound_ms + SESSION_MS) + 300_000)
        self.after(None, None)
        assert not self.h.parked
        group = self.h.registry.get("g")
        assert group is None or (group.state is S.EMPTY and not group.members.pending)

    # -- the model --------------------------------------------------------------------------

    def key(self, member_id: str) -> str:
        return self.alias.get(member_id, member_id)

    def heard(self, member_id: str) -> None:
        if member_id:
            self.last_heard[member_id] = self.h.now

    def expected_check(
        self, member_id: str, generation: int, instance: str | None, kind: str
    ) -> E:
        """Kafka's Heartbeat / OffsetCommit checks, from the group as it is now."""
        group = self.h.registry.get("g")
        if kind == "commit" and generation < 0 and (group is None or group.state is S.EMPTY):
            return E.NONE
        if group is None:
            return E.ILLEGAL_GENERATION if kind == "commit" else E.UNKNOWN_MEMBER_ID
        if group.members.is_fenced(instance, member_id):
            return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if generation != group.generation_id:
            return E.ILLEGAL_GENERATION
        busy = S.PREPARING_REBALANCE if kind == "heartbeat" else S.COMPLETING_REBALANCE
        return E.REBALANCE_IN_PROGRESS if group.state is busy else E.NONE

    def forget_if_unknown(self, client: Client, member_id: str, error: E) -> None:
        if error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID) and client.member_id == member_id:
            client.member_id, client.generation, client.led_members = "", -1, ()

    def after(
        self, reply: JoinGroupResult | SyncGroupResult | Parked | None, sent: Sent | None
    ) -> None:
        """Take the step's answers the way the clients would, then check the model."""
        answered: list[tuple[JoinGroupResult | SyncGroupResult, Sent]] = []
        if isinstance(reply, Parked):
            assert sent is not None
            self.sent[reply.ticket] = sent
        elif reply is not None:
            assert sent is not None
            answered.append((reply, sent))
        for delivery in self.h.delivered[self.processed :]:
            answered.append((delivery.result, self.sent.pop(delivery.ticket)))
            self.heard(delivery.member_id)
        self.processed = len(self.h.delivered)
        joined: list[JoinGroupResult] = []
        for result, sent in answered:
            client = self.clients[sent.client]
            if isinstance(result, JoinGroupResult):
                self.on_join(client, sent, result)
                if result.error is E.NONE:
                    joined.append(result)
            else:
                self.on_sync(client, sent, result)
        self.check_join_answers(joined)
        self.check_membership()
        group = self.h.registry.get("g")
        event(f"state {group.state if group else None}")

    def on_join(self, client: Client, sent: Sent, result: JoinGroupResult) -> None:
        if result.error in (E.NONE, E.MEMBER_ID_REQUIRED):
            self.owner.setdefault(result.member_id, sent.identity)
            assert self.owner[result.member_id] == sent.identity
            self.heard(result.member_id)
        replaces = sent.replaces
        if result.error is E.NONE and replaces is not None and replaces != result.member_id:
            self.alias[result.member_id] = self.key(replaces)
        if client.identity != sent.identity:
            return  # the client restarted since; the answer goes nowhere
        client.next_step = "join"
        if result.error is E.MEMBER_ID_REQUIRED:
            client.member_id = result.member_id
        elif result.error is E.NONE:
            client.member_id, client.generation = result.member_id, result.generation_id
            led = result.leader == result.member_id and result.members
            client.led_members = tuple(m.member_id for m in result.members) if led else ()
            client.next_step = "sync"
        else:
            self.forget_if_unknown(client, sent.member_id, result.error)

    def on_sync(self, client: Client, sent: Sent, result: SyncGroupResult) -> None:
        if result.error is E.NONE:
            expected = self.assigned[sent.generation].get(self.key(sent.member_id), b"")
            assert result.assignment == expected, (result.assignment, expected)
        if client.identity != sent.identity or client.member_id != sent.member_id:
            return
        client.next_step = "heartbeat" if result.error is E.NONE else "join"
        self.forget_if_unknown(client, sent.member_id, result.error)

    def check_join_answers(self, joined: list[JoinGroupResult]) -> None:
        if not joined:
            return
        group = self.h.group
        for result in joined:
            assert result.generation_id <= group.generation_id
            leader = self.key(result.leader), result.protocol_name
            assert self.leaders.setdefault(result.generation_id, leader) == leader
            if result.members:
                ids = [m.member_id for m in result.members]
                assert result.leader == result.member_id and result.member_id in ids
                assert len(set(ids)) == len(ids)
                batch = {r.member_id for r in joined if r.generation_id == result.generation_id}
                assert batch <= set(ids)

    def check_membership(self) -> None:
        group = self.h.registry.get("g")
        if group is None:
            return
        current = set(group.members.ids())
        assert not current & self.gone, "a member id came back"
        self.gone |= self.seen - current
        self.seen |= current
        for member in group.members:
            parked = member.join_ticket is not None or member.sync_ticket is not None
            if member.group_instance_id is None and not parked:
                assert self.h.now - self.last_heard[member.member_id] < SESSION_MS
        if group.state is S.STABLE:
            for member in group.members:
                client = self.clients[self.owner[member.member_id][0]]
                if not client.static and client.member_id == member.member_id:
                    assert client.generation == group.generation_id

    @invariant()
    def nothing_dangles(self) -> None:
        for ticket in self.h.parked:
            assert self.h.now - self.sent[ticket].at_ms < self.bound_ms


GroupConversation.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_group_conversation = GroupConversation.TestCase
