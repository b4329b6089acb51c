"""One consumer group's state machine: Kafka's classic GroupCoordinator semantics.

Plain, synchronous, deterministic code: no I/O, no event loop, no clock. Every call takes
``now_ms`` and first fires the timers that fell due by then, in deadline order, each at its
own deadline, as if a timer thread had fired it on time; then it handles the request.

States: ``Empty -> PreparingRebalance -> CompletingRebalance -> Stable`` (+ ``Dead``).

* Empty: no members. A member joining starts a rebalance (after the initial delay).
* PreparingRebalance: JoinGroups are parked. The join completes when every member has
  rejoined and no MEMBER_ID_REQUIRED id is outstanding, or at the rebalance deadline;
  dynamic members that did not rejoin are then removed. The generation goes up by one.
* CompletingRebalance: every parked JoinGroup is answered (the leader also gets the
  member list); SyncGroups are parked until the leader's SyncGroup brings the assignment.
* Stable: SyncGroups are answered at once with the stored assignment.
* Dead: the coordinator shut down; parked requests were answered NOT_COORDINATOR.

Invariants (the tests check them):

* an Empty group has no members; a group without members is Empty, Dead, or in a
  PreparingRebalance that waits out its initial delay or a MEMBER_ID_REQUIRED id;
* the generation never decreases, and goes up by one per completed join;
* every parked request (a ticket) is answered exactly once; one member has at most one
  parked JoinGroup and one parked SyncGroup (a newer one answers the older with
  REBALANCE_IN_PROGRESS); JoinGroups are parked only in PreparingRebalance and SyncGroups
  only in CompletingRebalance;
* every parked request is answered by some deadline: the rebalance deadline for JoinGroup
  (or the new-member timeout), and for SyncGroup the session or sync deadline of a leader
  that does not sync.

Session timers run for members with nothing parked; JoinGroup, SyncGroup, Heartbeat and
OffsetCommit restart them, and so does answering a parked request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import TypeVar

from streamkit.log.groups.errors import GroupErrorCode
from streamkit.log.groups.membership import Member, Membership
from streamkit.log.groups.messages import (
    Delivery,
    GroupConfig,
    GroupState,
    HeartbeatResult,
    JoinGroupRequest,
    JoinGroupResult,
    LeaveGroupResult,
    Parked,
    Step,
    SyncGroupResult,
)
from streamkit.log.groups.outbox import Outbox

R = TypeVar("R")
E = GroupErrorCode
S = GroupState


def random_member_id(client_id: str) -> str:
    """Kafka's member id: ``{client_id}-{uuid}``."""
    return f"{client_id}-{uuid.uuid4()}"


class Group:
    """The membership and rebalance protocol of one group."""

    def __init__(
        self,
        group_id: str,
        config: GroupConfig,
        tickets: Iterator[int],
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.group_id = group_id
        self.state = S.EMPTY
        self.generation_id = 0
        self.protocol_name: str | None = None
        self.members = Membership()
        self._config = config
        self._outbox = Outbox(group_id, tickets)
        self._new_member_id = new_member_id
        self._now_ms = 0
        self._join_deadline_ms: int | None = None
        self._initial_remaining_ms: int | None = None  # not None while the initial delay runs
        self._new_member_added = False
        self._sync_deadline_ms: int | None = None
        self._pending_sync: set[str] = set()  # members that have not sent SyncGroup yet

    # -- requests ---------------------------------------------------------------------------

    def join(self, now_ms: int, request: JoinGroupRequest) -> Step[JoinGroupResult]:
        now_ms = self._advance(now_ms)
        return self._finish(now_ms, self._join(now_ms, request), JoinGroupResult)

    def sync(
        self,
        now_ms: int,
        member_id: str,
        generation_id: int,
        assignments: Mapping[str, bytes],
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Step[SyncGroupResult]:
        """SyncGroup: followers wait in CompletingRebalance until the leader's arrives."""
        now_ms = self._advance(now_ms)
        error = self._check_member(member_id, generation_id, group_instance_id)
        if error is E.NONE and (
            (protocol_type is not None and protocol_type != self.members.protocol_type)
            or (protocol_name is not None and protocol_name != self.protocol_name)
        ):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        reply: SyncGroupResult | Parked = SyncGroupResult(error)
        if error is E.NONE and self.state is S.PREPARING_REBALANCE:
            reply = SyncGroupResult(E.REBALANCE_IN_PROGRESS)
        elif error is E.NONE:
            reply = self._sync(now_ms, self._member(member_id), assignments)
        return self._finish(now_ms, reply, SyncGroupResult)

    def heartbeat(
        self, now_ms: int, member_id: str, generation_id: int, group_instance_id: str | None = None
    ) -> Step[HeartbeatResult]:
        now_ms = self._advance(now_ms)
        error = self._check_member(member_id, generation_id, group_instance_id)
        if error is E.NONE:
            member = self._member(member_id)
            member.touch(now_ms)
            if self.state is S.PREPARING_REBALANCE:
                error = E.REBALANCE_IN_PROGRESS
        return self._finish(now_ms, HeartbeatResult(error), HeartbeatResult)

    def leave(
        self, now_ms: int, member_id: str, group_instance_id: str | None = None
    ) -> Step[LeaveGroupResult]:
        now_ms = self._advance(now_ms)
        error = self._leave(now_ms, member_id, group_instance_id)
        return self._finish(now_ms, LeaveGroupResult(error), LeaveGroupResult)

    def validate_offset_commit(
        self,
        now_ms: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None = None,
        *,
        transactional: bool = False,
    ) -> Step[GroupErrorCode]:
        """May this member commit offsets now? Restarts its session timer if so.

        ``transactional`` (TxnOffsetCommit) follows Kafka: a request that names no member
        and no generation (v0-v2) is not checked, one that does (v3) is fenced like an
        OffsetCommit (FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION), and a
        rebalance in progress does not refuse it (the transaction decides, not the group).
        """
        now_ms = self._advance(now_ms)
        if generation_id < 0 and self.state is S.EMPTY:
            error = E.NONE  # a "simple consumer": the group only stores offsets
        elif transactional:
            named = generation_id >= 0 or bool(member_id) or group_instance_id is not None
            if self.state is S.DEAD:
                error = E.COORDINATOR_NOT_AVAILABLE
            else:
                error = self._check_member(member_id, generation_id, group_instance_id) if named else E.NONE
        else:
            error = self._check_member(member_id, generation_id, group_instance_id)
            if error is E.NONE:
                self._member(member_id).touch(now_ms)
                if self.state is S.COMPLETING_REBALANCE:
                    error = E.REBALANCE_IN_PROGRESS
        return self._finish(now_ms, error, GroupErrorCode)

    def expire(self, now_ms: int) -> tuple[Delivery, ...]:
        """Fire every timer due by ``now_ms``; return the results of requests that ended."""
        self._advance(now_ms)
        return self._outbox.take()

    def shutdown(self) -> tuple[Delivery, ...]:
        """Go Dead (the coordinator is closing): answer parked requests NOT_COORDINATOR."""
        if self.state is not S.DEAD:
            for member in self.members:
                self._outbox.fail(member, E.NOT_COORDINATOR, member.member_id)
            self.state = S.DEAD
            self.members.pending.clear()
            self._pending_sync.clear()
            self._join_deadline_ms = self._sync_deadline_ms = None
        return self._outbox.take()

    # -- views ------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """The earliest time a timer of this group fires, if any."""
        return min((at for at, _ in self._timers()), default=None)

    def parked_tickets(self) -> set[int]:
        tickets = set()
        for member in self.members:
            tickets |= {t for t in (member.join_ticket, member.sync_ticket) if t is not None}
        return tickets

    # -- JoinGroup --------------------------------------------------------------------------

    def _join(self, now_ms: int, req: JoinGroupRequest) -> JoinGroupResult | Parked:
        if self.state is S.DEAD:
            return JoinGroupResult(E.COORDINATOR_NOT_AVAILABLE, member_id=req.member_id)
        if not self._config.session_timeout_valid(req.session_timeout_ms):
            return JoinGroupResult(E.INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        joining_id = req.member_id
        if not joining_id and req.group_instance_id is not None:
            joining_id = self.members.static_member_id(req.group_instance_id) or ""
        if not self.members.supports(req.protocol_type, req.protocols, joining_id):
            return JoinGroupResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        if req.member_id:
            return self._join_known(now_ms, req)
        member_id = self._new_member_id(req.client_id)
        if req.group_instance_id is not None:
            old_id = self.members.static_member_id(req.group_instance_id)
            if old_id is not None:
                return self._replace_static(now_ms, req, old_id, member_id)
        elif req.require_known_member_id:
            self.members.pending[member_id] = now_ms + req.session_timeout_ms
            return JoinGroupResult(E.MEMBER_ID_REQUIRED, member_id=member_id)
        return self._add_and_rebalance(now_ms, req, member_id)

    def _join_known(self, now_ms: int, req: JoinGroupRequest) -> JoinGroupResult | Parked:
        member_id, instance_id = req.member_id, req.group_instance_id
        if member_id in self.members.pending:
            if instance_id is None:
                return self._add_and_rebalance(now_ms, req, member_id)
            # Pending ids go to dynamic members only; have it rejoin from scratch.
            del self.members.pending[member_id]
            self._try_complete_join(now_ms)
            return JoinGroupResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
        if self.members.is_fenced(instance_id, member_id):
            return JoinGroupResult(E.FENCED_INSTANCE_ID, member_id=member_id)
        member = self.members.get(member_id)
        unknown_instance = instance_id is not None and not self.members.static_member_id(instance_id)
        if member is None or unknown_instance or self.state is S.EMPTY:
            return JoinGroupResult(E.UNKNOWN_MEMBER_ID, member_id=member_id)
        member.touch(now_ms)
        unchanged = member.matches(req.protocols)
        if self.state is S.COMPLETING_REBALANCE and unchanged:
            # Probably lost our JoinGroup response: send the current generation again.
            return self._current_join_result(member)
        if self.state is S.STABLE and unchanged and member_id != self.members.leader_id:
            return self._current_join_result(member)
        # A leader's JoinGroup in Stable forces a rebalance: it may have seen topic
        # changes that the members' metadata does not show.
        self.members.update(member, req)
        return self._park_join_and_rebalance(now_ms, member)

    def _add_and_rebalance(
        self, now_ms: int, req: JoinGroupRequest, member_id: str
    ) -> JoinGroupResult | Parked:
        member = Member.from_request(member_id, req, now_ms)
        member.is_new = True
        member.new_member_deadline_ms = now_ms + self._config.new_member_join_timeout_ms
        if self.state is S.PREPARING_REBALANCE and self._initial_remaining_ms is not None:
            self._new_member_added = True
        self.members.add(member)
        return self._park_join_and_rebalance(now_ms, member)

    def _replace_static(
        self, now_ms: int, req: JoinGroupRequest, old_id: str, new_id: str
    ) -> JoinGroupResult | Parked:
        """A static member restarted: it takes over its instance's place under a new id."""
        leader_before = self.members.leader_id or ""
        member = self._member(old_id)
        self._outbox.fail(member, E.FENCED_INSTANCE_ID, old_id)
        unchanged = member.matches(req.protocols)
        self.members.rename(old_id, new_id)
        if old_id in self._pending_sync:
            self._pending_sync.discard(old_id)
            self._pending_sync.add(new_id)
        self.members.update(member, req)
        member.touch(now_ms)
        if self.state is S.STABLE and unchanged:
            # No rebalance; it syncs and gets its stored assignment. It is told the old
            # leader id so that, even if it was the leader, it does not assign again.
            return JoinGroupResult(
                E.NONE, self.generation_id, self.members.protocol_type or "",
                self.protocol_name or "", leader_before, new_id,
            )
        return self._park_join_and_rebalance(now_ms, member)

    def _park_join_and_rebalance(self, now_ms: int, member: Member) -> Parked:
        parked = self._outbox.park_join(member)
        self._maybe_prepare_rebalance(now_ms)
        self._try_complete_join(now_ms)
        return parked

    def _current_join_result(self, member: Member) -> JoinGroupResult:
        is_leader = member.member_id == self.members.leader_id
        protocol = self.protocol_name or ""
        return JoinGroupResult(
            E.NONE, self.generation_id, self.members.protocol_type or "", protocol,
            self.members.leader_id or "", member.member_id,
            self.members.join_members(protocol) if is_leader else (),
        )

    # -- rebalance --------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, now_ms: int) -> None:
        if self.state in (S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms)

    def _prepare_rebalance(self, now_ms: int) -> None:
        if self.state is S.COMPLETING_REBALANCE:
            self._propagate_assignment(now_ms, E.REBALANCE_IN_PROGRESS)
        self._sync_deadline_ms = None
        self._pending_sync.clear()
        rebalance_timeout_ms = self.members.rebalance_timeout_ms()
        if self.state is S.EMPTY:
            # The first rebalance waits a little for more members (Kafka's InitialDelayedJoin).
            delay_ms = self._config.initial_rebalance_delay_ms
            self._initial_remaining_ms = max(rebalance_timeout_ms - delay_ms, 0)
            self._new_member_added = False
            self._join_deadline_ms = now_ms + delay_ms
        else:
            self._initial_remaining_ms = None
            self._join_deadline_ms = now_ms + rebalance_timeout_ms
        self.state = S.PREPARING_REBALANCE
        self._try_complete_join(now_ms)

    def _try_complete_join(self, now_ms: int) -> None:
        if (
            self.state is S.PREPARING_REBALANCE
            and self._initial_remaining_ms is None
            and self.members.all_joined()
        ):
            self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> None:
        for member in self.members:
            if not member.awaiting_join and member.group_instance_id is None:
                self._drop(member)
        self._initial_remaining_ms = None
        self._new_member_added = False
        if len(self.members) and not self.members.elect_joined_leader():
            # Only static members that did not rejoin are left: wait again, until they
            # rejoin or their sessions expire.
            self._join_deadline_ms = now_ms + self.members.rebalance_timeout_ms()
            return
        self._join_deadline_ms = None
        self.generation_id += 1
        if not len(self.members):
            self.protocol_name = None
            self.state = S.EMPTY
            return
        protocol = self.protocol_name = self.members.select_protocol()
        self.state = S.COMPLETING_REBALANCE
        leader = self.members.leader_id or ""
        everyone = self.members.join_members(protocol)
        for member in self.members:
            result = JoinGroupResult(
                E.NONE, self.generation_id, self.members.protocol_type or "", protocol,
                leader, member.member_id, everyone if member.member_id == leader else (),
            )
            self._outbox.answer_join(member, result)
            member.is_new = False
            member.touch(now_ms)
            self._pending_sync.add(member.member_id)
        self._sync_deadline_ms = now_ms + self.members.rebalance_timeout_ms()

    # -- SyncGroup, LeaveGroup --------------------------------------------------------------

    def _sync(
        self, now_ms: int, member: Member, assignments: Mapping[str, bytes]
    ) -> SyncGroupResult | Parked:
        member.touch(now_ms)
        self._pending_sync.discard(member.member_id)
        if self.state is S.STABLE:
            return SyncGroupResult(
                E.NONE, member.assignment, self.members.protocol_type or "", self.protocol_name or ""
            )
        parked = self._outbox.park_sync(member)
        if member.member_id == self.members.leader_id:
            for m in self.members:  # members the leader left out get empty bytes
                m.assignment = bytes(assignments.get(m.member_id, b""))
            self._propagate_assignment(now_ms, E.NONE)
            self.state = S.STABLE
        return parked

    def _propagate_assignment(self, now_ms: int, error: GroupErrorCode) -> None:
        for member in self.members:
            if error is not E.NONE:
                member.assignment = b""
            result = SyncGroupResult(error)
            if error is E.NONE:
                result = SyncGroupResult(
                    E.NONE, member.assignment, self.members.protocol_type or "",
                    self.protocol_name or "",
                )
            if self._outbox.answer_sync(member, result):
                member.touch(now_ms)

    def _leave(self, now_ms: int, member_id: str, group_instance_id: str | None) -> GroupErrorCode:
        if self.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if not member_id and group_instance_id is not None:  # LeaveGroup v3+ by instance id
            member_id = self.members.static_member_id(group_instance_id) or ""
        if member_id in self.members.pending:
            del self.members.pending[member_id]
            self._try_complete_join(now_ms)
            return E.NONE
        if self.members.is_fenced(group_instance_id, member_id):
            return E.FENCED_INSTANCE_ID
        member = self.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        self._remove_and_rebalance(now_ms, member)
        return E.NONE

    def _remove_and_rebalance(self, now_ms: int, member: Member) -> None:
        self._drop(member)
        if self.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms)
        else:
            self._try_complete_join(now_ms)

    def _drop(self, member: Member) -> None:
        """Remove a member; a request it still has parked is answered UNKNOWN_MEMBER_ID."""
        self._outbox.fail(member, E.UNKNOWN_MEMBER_ID, "")
        self.members.remove(member.member_id)
        self._pending_sync.discard(member.member_id)

    # -- timers -----------------------------------------------------------------------------

    def _timers(self) -> Iterator[tuple[int, Callable[[int], None]]]:
        if self.state is S.PREPARING_REBALANCE and self._join_deadline_ms is not None:
            yield self._join_deadline_ms, self._on_join_deadline
        if self._sync_deadline_ms is not None:
            yield self._sync_deadline_ms, self._on_sync_deadline
        for member_id, deadline_ms in self.members.pending.items():
            yield deadline_ms, partial(self._on_pending_expired, member_id)
        for member in self.members:
            expiry_ms = member.expiry_ms()
            if expiry_ms is not None:
                yield expiry_ms, partial(self._on_member_expired, member.member_id)

    def _advance(self, now_ms: int) -> int:
        now_ms = self._now_ms = max(now_ms, self._now_ms)
        while True:
            due = min(self._timers(), key=lambda timer: timer[0], default=None)
            if due is None or due[0] > now_ms:
                return now_ms
            at_ms, fire = due
            fire(at_ms)

    def _on_join_deadline(self, at_ms: int) -> None:
        remaining_ms = self._initial_remaining_ms
        if remaining_ms is not None and self._new_member_added and remaining_ms > 0:
            # Members keep arriving during the initial delay: wait once more, never
            # longer in total than the rebalance timeout.
            delay_ms = min(self._config.initial_rebalance_delay_ms, remaining_ms)
            self._initial_remaining_ms = remaining_ms - delay_ms
            self._new_member_added = False
            self._join_deadline_ms = at_ms + delay_ms
            return
        self._complete_join(at_ms)

    def _on_sync_deadline(self, at_ms: int) -> None:
        """Members that got their JoinGroup answer but never synced are dropped."""
        self._sync_deadline_ms = None
        laggards = [m for m in self.members if m.member_id in self._pending_sync]
        self._pending_sync.clear()
        for member in laggards:
            self._drop(member)
        if laggards:
            self._prepare_rebalance(at_ms)

    def _on_pending_expired(self, member_id: str, at_ms: int) -> None:
        del self.members.pending[member_id]
        self._try_complete_join(at_ms)

    def _on_member_expired(self, member_id: str, at_ms: int) -> None:
        self._remove_and_rebalance(at_ms, self._member(member_id))

    # -- helpers ----------------------------------------------------------------------------

    def _check_member(
        self, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> GroupErrorCode:
        """The checks SyncGroup, Heartbeat and OffsetCommit share, in Kafka's order."""
        if self.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if self.members.is_fenced(group_instance_id, member_id):
            return E.FENCED_INSTANCE_ID
        if member_id not in self.members or self.state is S.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if generation_id != self.generation_id:
            return E.ILLEGAL_GENERATION
        return E.NONE

    def _member(self, member_id: str) -> Member:
        member = self.members.get(member_id)
        if member is None:
            raise KeyError(member_id)
        return member

    def _finish(self, now_ms: int, reply: R | Parked, kind: type[R]) -> Step[R]:
        # The request itself may have set a timer that is already due (a zero initial
        # rebalance delay): fire it before answering.
        self._advance(now_ms)
        return self._outbox.step(reply, kind)
