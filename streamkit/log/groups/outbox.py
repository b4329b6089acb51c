"""The ledger of one group's parked requests: tickets handed out, results owed.

A parked JoinGroup or SyncGroup is a ticket stored on its member (``join_ticket``,
``sync_ticket``). Answering it clears the ticket and queues a ``Delivery``; each state-machine
call ends by taking the queue into its ``Step``. Invariant: a ticket is queued at most once,
because answering it and clearing it from the member happen together here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from streamkit.log.groups.errors import GroupErrorCode
from streamkit.log.groups.membership import Member
from streamkit.log.groups.messages import (
    Delivery,
    JoinGroupResult,
    Parked,
    Step,
    SyncGroupResult,
)

R = TypeVar("R")


class Outbox:
    def __init__(self, group_id: str, tickets: Iterator[int]) -> None:
        self._group_id = group_id
        self._tickets = tickets
        self._queue: list[Delivery] = []

    def park_join(self, member: Member) -> Parked:
        """Park a JoinGroup; an older one of the same member is answered REBALANCE_IN_PROGRESS."""
        self.answer_join(
            member,
            JoinGroupResult(GroupErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id),
        )
        ticket = member.join_ticket = next(self._tickets)
        return Parked(ticket)

    def park_sync(self, member: Member) -> Parked:
        """Park a SyncGroup; an older one of the same member is answered REBALANCE_IN_PROGRESS."""
        self.answer_sync(member, SyncGroupResult(GroupErrorCode.REBALANCE_IN_PROGRESS))
        ticket = member.sync_ticket = next(self._tickets)
        return Parked(ticket)

    def answer_join(self, member: Member, result: JoinGroupResult) -> bool:
        """Answer the member's parked JoinGroup, if it has one."""
        if member.join_ticket is None:
            return False
        self._queue.append(Delivery(member.join_ticket, self._group_id, member.member_id, result))
        member.join_ticket = None
        return True

    def answer_sync(self, member: Member, result: SyncGroupResult) -> bool:
        """Answer the member's parked SyncGroup, if it has one."""
        if member.sync_ticket is None:
            return False
        self._queue.append(Delivery(member.sync_ticket, self._group_id, member.member_id, result))
        member.sync_ticket = None
        return True

    def fail(self, member: Member, error: GroupErrorCode, join_member_id: str) -> None:
        """Answer whatever the member has parked with ``error``."""
        self.answer_join(member, JoinGroupResult(error, member_id=join_member_id))
        self.answer_sync(member, SyncGroupResult(error))

    def take(self) -> tuple[Delivery, ...]:
        queue, self._queue = tuple(self._queue), []
        return queue

    def step(self, reply: R | Parked, kind: type[R]) -> Step[R]:
        """Take the queue into a step; a parked reply answered meanwhile becomes the reply."""
        deliveries = self.take()
        if isinstance(reply, Parked):
            for i, delivery in enumerate(deliveries):
                if delivery.ticket == reply.ticket:
                    result = delivery.result
                    assert isinstance(result, kind)
                    return Step(result, deliveries[:i] + deliveries[i + 1 :])
        return Step(reply, deliveries)
