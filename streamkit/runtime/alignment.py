"""Event-time alignment across a worker's tasks (``max_task_drift_ms``, ``max_task_idle_ms``).

Catching up on history, each task of an agent would run through its own backlog: the one
that feeds a repartition topic fastest writes minutes ahead of the others, the downstream
task's stream time jumps with it, and what the others write afterwards for earlier times is
late. An ``Aligner`` paces the tasks whose outputs meet downstream (the tasks of an agent
that feeds a topic its app reads, and the agents feeding one agent's inputs) by event time.

Each member (one task's root source) has a **stream time**: the largest timestamp it handed
out, so far (Kafka Streams' partition time; restored at assignment from the commit's
metadata, ``encode_stream_time``). The **key** of its next record is ``max(stream time,
the record's timestamp)``. A member hands a record out only when its key is no later than the
key of every other member with records, plus the drift; with a drift of 0, ties go to the
member listed first (the lower partition): the records then leave the group in the order of
``heapq.merge`` over the members' inputs by timestamp (``_core/order.py``: sorting by that
key is the same order), the order the Spark backfill folds a repartition topic in.

    >>> a = Aligner("counts", drift_ms=0, idle_ms=0, now_ms=lambda: 0)
    >>> m0, m1 = a.join("stage[0]", (0, 0), [], None), a.join("stage[1]", (0, 1), [], None)
    >>> m0.stream_time, m1.stream_time = 10, 4    # both have handed records out
    >>> m0.next_ts = m1.next_ts = lambda: 7       # and hold one stamped 7
    >>> a.admit(m0, 10), a.admit(m1, 7)           # key 10 waits for partition 1's 7
    (False, True)

A member with nothing to hand out holds back the records keyed after its stream time (it
may still get earlier ones), as Kafka Streams' ``max.task.idle.ms`` does: while the log holds
records of its partition not fetched yet (or does not say yet), for up to ``LAGGING_HOLD_S``;
when it is caught up, for ``idle_ms`` (default 0: a live partition with nothing new holds
nobody back). Past that it is **idle** and holds nobody back until records reach it again.
Both changes are logged (at INFO once a minute per task at most) and shown by ``status``
(``/status``).

Members wait on their task's wake-up event: the member that holds another back wakes it when
it stops (it waits itself, or runs out of records), and a timer wakes the members held back
by an empty one when it turns idle. Only the members a task's first instance reads align
(an agent with ``concurrency`` > 1 has no order to keep).

A task reading several topics the group writes (the join task after a re-key) takes their
records in the order the members handed them out, waiting for an input they may still write
(``merge.py``; ``floor`` is what it asks here).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Container, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streamkit._core.types import TopicPartition
from streamkit.dsl.nodes import Aggregate, Sink
from streamkit.transport.base import Consumer, TransportError

if TYPE_CHECKING:
    from streamkit.runtime.inbox import Inbox, RootSource
    from streamkit.runtime.tasks import PartitionTask

logger = logging.getLogger(__name__)
LAGGING_HOLD_S = 30.0  # how long an empty member whose log holds more holds the others back
LOG_EVERY_S = 60.0  # an idle/active change of one task is logged at INFO at most this often
_NEVER = -(2**62)  # the bound of a member that never had a record: everything waits for it


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class Member:
    """One task's root source in an aligner (see the module docstring)."""

    __slots__ = (
        "blocked_by",
        "empty_since",
        "epoch",
        "flush_first",
        "idle",
        "inboxes",
        "limit",
        "logged_at",
        "moved",
        "name",
        "next_ts",
        "order",
        "source",
        "stream_time",
        "unflushed",
        "wakeup",
    )

    def __init__(self, name: str, order: tuple[int, int], inboxes: Sequence[Inbox], wakeup: asyncio.Event | None) -> None:
        self.name = name
        self.order = order
        self.inboxes = list(inboxes)
        self.wakeup = wakeup
        self.source: RootSource | None = None
        self.stream_time: int | None = None
        self.empty_since: int | None = None  # monotonic ms it ran out of records (None: it has some)
        self.idle = False
        self.limit = _NEVER  # the largest key it may hand out without looking again
        self.epoch = -1
        self.blocked_by: Member | None = None
        self.moved = False  # handed a record out since it last woke the ones it held back
        self.logged_at = 0.0
        self.unflushed = False  # exactly-once: handed records out whose sends may sit in its producer
        self.flush_first: list[Member] = []  # exactly-once: the producers to flush before it may go
        self.next_ts: Callable[[], int | None] = self._next_ts

    def _next_ts(self) -> int | None:
        """The timestamp of the next record this member will hand out (None: none is here)."""
        source = self.source
        if source is not None:
            ts = source.next_chunk_timestamp()
            if ts is not None:
                return ts
        heads = [t for t in (inbox.head_timestamp() for inbox in self.inboxes) if t is not None]
        return min(heads) if heads else None

    def next_key(self) -> int | None:
        ts = self.next_ts()
        if ts is None:
            return None
        st = self.stream_time
        return ts if st is None or ts > st else st

    def __repr__(self) -> str:
        return f"<Member {self.name} st={self.stream_time}>"


class Aligner:
    """Paces the members of one group of tasks by event time (see the module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        drift_ms: int,
        idle_ms: int,
        lag_of: Callable[[TopicPartition], int | None] = lambda tp: 0,
        flush: Callable[[Member], Awaitable[None]] | None = None,
        now_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        """``lag_of(tp)``: records of ``tp`` in the log past the fetch position (None: not
        known yet). ``flush(member)``: under exactly-once, send what the member's own
        producer holds to the log: a member hands a record out only once the members that
        went before it flushed, so their writes reach a shared topic in the same order."""
        self.name = name
        self._flush = flush
        self._lag_of = lag_of
        self.drift_ms = drift_ms
        self.idle_ms = idle_ms
        self._now_ms = now_ms
        self.members: list[Member] = []
        self.by_order: dict[tuple[int, int], Member] = {}  # (rank, partition) -> its member
        self.epoch = 0  # bumped when a limit may go down: a member joins or stops being idle
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self.waits = 0  # times a member was held back (``status``)

    def join(self, name: str, order: tuple[int, int], inboxes: Sequence[Inbox], wakeup: asyncio.Event | None) -> Member:
        member = Member(name, order, inboxes, wakeup)
        member.empty_since = self._now_ms()
        self.members.append(member)
        self.members.sort(key=lambda m: m.order)
        self.by_order[order] = member
        self.epoch += 1
        return member

    def leave(self, member: Member) -> None:
        if member in self.members:
            self.members.remove(member)
            if self.by_order.get(member.order) is member:
                del self.by_order[member.order]
            member.source = None
            self._wake_held_by(member)

    # -- the per-record check (``RootSource.get_nowait``) -----------------------------------

    def admit(self, member: Member, key: int) -> bool:
        """May ``member`` hand out a record keyed ``key``? When not, it waits: the member
        holding it back is woken if it waits itself, so the earliest always runs."""
        if member.empty_since is not None:
            self._has_records(member)
        limit, blocker = self._limit(member)
        member.limit = limit
        member.epoch = self.epoch
        if key <= limit:
            if self._flush is not None:
                ahead = [m for m in self.members if m.unflushed and m is not member]
                if ahead:
                    member.flush_first = ahead
                    member.epoch = -1  # look again after the flush
                    return False
            member.blocked_by = None
            return True
        self.waits += 1
        member.blocked_by = blocker
        if member.moved:
            member.moved = False
            self._wake_held_by(member)
        if blocker is not None and blocker.blocked_by is not None and blocker.wakeup is not None:
            blocker.wakeup.set()  # it waits on someone that moved since: let it look again
        return False

    async def flush_first(self, member: Member) -> None:
        """Flush the producers of the members ``member`` found ahead of it (exactly-once)."""
        ahead, member.flush_first = member.flush_first, []
        assert self._flush is not None
        for other in ahead:
            if other.unflushed:
                other.unflushed = False
                await self._flush(other)

    def ran_out(self, member: Member) -> None:
        """``member`` has nothing to hand out: it holds back only what is keyed after its
        stream time, until it turns idle; the ones it held back look again."""
        if member.empty_since is None:
            member.empty_since = self._now_ms()
        member.epoch = -1  # its next record takes the slow path: it has records again
        if member.moved:
            member.moved = False
            self._wake_held_by(member)

    def _has_records(self, member: Member) -> None:
        member.empty_since = None
        if member.idle:
            member.idle = False
            self.epoch += 1  # the others' limits may go down again
            self._log(member, "has records again: the tasks aligned with it wait for it again")

    def _limit(self, member: Member) -> tuple[int, Member | None]:
        """The largest key ``member`` may hand out now, and the member that sets it."""
        drift = self.drift_ms
        now = self._now_ms()
        limit: int | None = None
        blocker: Member | None = None
        for other in self.members:
            if other is member:
                continue
            bound = self._bound(other, now)
            if bound is None:
                continue
            if drift > 0:
                bound += drift
            elif member.order > other.order:
                bound -= 1  # a tie goes to the member listed first
            if limit is None or bound < limit:
                limit, blocker = bound, other
        return (2**62 if limit is None else limit), blocker

    def floor(self, ranks: Container[int]) -> int:
        """The smallest key the members of the agents ranked ``ranks`` may still hand out
        (``2**62``: none holds anything back): what a reader of their outputs may rely on
        (``merge.py``). Turns empty members idle as ``admit`` does."""
        now = self._now_ms()
        low = 2**62
        for other in self.members:
            if other.order[0] in ranks:
                bound = self._bound(other, now)
                if bound is not None and bound < low:
                    low = bound
        return low

    def _bound(self, other: Member, now: int) -> int | None:
        """The smallest key ``other`` may still hand out (None: it is idle, it holds nobody
        back): its next record's key, else (empty) its stream time until it turns idle."""
        key = other.next_key()
        if key is not None:
            if other.empty_since is not None:
                self._has_records(other)
            return key
        if other.empty_since is None:
            other.empty_since = now
        if other.idle:
            return None
        lagging = self._lagging(other)
        hold_ms = int(LAGGING_HOLD_S * 1000) if lagging else self.idle_ms
        if now - other.empty_since >= hold_ms:
            other.idle = True
            why = (
                f"the log holds more of its input but nothing reached it for {hold_ms} ms"
                if lagging
                else f"it is caught up and had nothing to process for {hold_ms} ms (max_task_idle_ms)"
            )
            self._log(other, f"is idle: {why}; it no longer holds back the tasks aligned with it")
            return None
        self._wake_at(other.empty_since + hold_ms)
        return _NEVER if other.stream_time is None else other.stream_time

    def lag_of(self, tp: TopicPartition) -> int | None:
        """Records of ``tp`` in the log past the fetch position (None: not known yet)."""
        return self._lag_of(tp)

    def _lagging(self, member: Member) -> bool:
        """Does the log hold records of ``member``'s inputs not fetched yet (or not say)?"""
        for inbox in member.inboxes:
            lag = self._lag_of(inbox.tp)
            if lag is None or lag > 0:
                return True
        return False

    # -- waking ------------------------------------------------------------------------------

    def _wake_held_by(self, member: Member) -> None:
        for other in self.members:
            if other.blocked_by is member and other.wakeup is not None:
                other.wakeup.set()

    def _wake_at(self, at_ms: int) -> None:
        """Wake the waiting members at ``at_ms`` (when an empty member turns idle)."""
        if self._timer_at is not None and self._timer_at <= at_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer_at = at_ms
        self._timer = loop.call_later(max(0.0, (at_ms - self._now_ms()) / 1000) + 0.001, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        for member in self.members:
            if member.blocked_by is not None and member.wakeup is not None:
                member.wakeup.set()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- report ------------------------------------------------------------------------------

    def _log(self, member: Member, what: str) -> None:
        now = time.monotonic()
        level = logging.INFO if now - member.logged_at >= LOG_EVERY_S else logging.DEBUG
        if level == logging.INFO:
            member.logged_at = now
        logger.log(level, "alignment %s: task %s %s", self.name, member.name, what)

    def status(self) -> dict[str, Any]:
        """The group as ``/status`` shows it: each task's stream time and state."""
        tasks = []
        now = self._now_ms()
        for member in self.members:
            if member.idle:
                state = "idle"
            elif member.blocked_by is not None:
                state = f"waiting for {member.blocked_by.name}"
            elif member.empty_since is not None:
                state = f"empty for {now - member.empty_since} ms"
            else:
                state = "running"
            tasks.append({"task": member.name, "stream_time": member.stream_time, "state": state})
        return {
            "drift_ms": self.drift_ms, "idle_ms": self.idle_ms, "waits": self.waits, "tasks": tasks,
        }


class StreamTimes:
    """Keeps aligned tasks' stream times across restarts and moves: the commit carries each
    input partition's (``metadata``); a task assigned here starts from the largest its
    partitions' last commits carry (``partitions_assigned``, before the task reads a record),
    as Kafka Streams restores partition time from its commits."""

    def __init__(self, consumer: Callable[[], Consumer | None]) -> None:
        self._consumer = consumer

    async def partitions_assigned(self, assigned: set[TopicPartition], tasks: list[PartitionTask]) -> None:
        consumer = self._consumer()
        if consumer is None:
            return
        wanted = {
            task: [tp for tp in (TopicPartition(t.name, task.partition) for t in task.agent.topics) if tp in task.inboxes]
            for task in tasks
            if task.context.aligner_for(task.agent) is not None
        }
        tps = sorted({tp for found in wanted.values() for tp in found})

        async def read(tp: TopicPartition) -> int | None:
            try:
                return decode_stream_time(await consumer.committed_metadata(tp))
            except TransportError as exc:
                logger.warning("could not read the stream time of %s from its commit: %s", tp, exc)
                return None

        times = dict(zip(tps, await asyncio.gather(*(read(tp) for tp in tps)), strict=True))
        for task, found in wanted.items():
            known = [ts for tp in found if (ts := times.get(tp)) is not None]
            task.restored_stream_time = max(known) if known else None

    async def partitions_revoked(
        self, revoked: set[TopicPartition], tasks: list[PartitionTask], committed: bool
    ) -> None:
        return None

    @staticmethod
    def metadata(tasks: Iterable[PartitionTask], positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, str]:
        """The commit metadata of ``positions``: each aligned task's stream time."""
        out: dict[TopicPartition, str] = {}
        for task in tasks:
            member = task.member
            # A task not started yet (its tables restoring) keeps the stream time it restored.
            stream_time = task.restored_stream_time if member is None else member.stream_time
            if stream_time is None:
                continue
            for t in task.agent.topics:
                tp = TopicPartition(t.name, task.partition)
                if tp in positions:
                    out[tp] = encode_stream_time(stream_time)
        return out


def encode_stream_time(stream_time: int) -> str:
    """The commit metadata that keeps a partition's stream time across a restart."""
    return json.dumps({"stream_time": stream_time}, separators=(",", ":"))


def decode_stream_time(metadata: str | None) -> int | None:
    """The stream time ``encode_stream_time`` wrote, or None (none, or not ours)."""
    if not metadata:
        return None
    try:
        found = json.loads(metadata)
    except ValueError:
        return None
    value = found.get("stream_time") if isinstance(found, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def keeps_time(output: object) -> bool:
    """Whether a pipeline stage ending in ``output`` answers differently when its records come
    in another order: a window, a join, a table, a fold other than a count or a sum."""
    if isinstance(output, Sink):
        return False
    return not (isinstance(output, Aggregate) and output.kind in ("count", "sum"))


def alignment_groups(
    agents: Sequence[Any], reads: Callable[[Any], set[str]], writes: Callable[[Any], set[str]]
) -> list[list[Any]]:
    """The agents whose tasks align, in groups: an agent that writes a topic some agent of
    the app reads (a repartition or ``through`` topic; ``writes`` includes its hop topics),
    grouped with every agent writing the inputs of the same reader. Agents writing nothing
    the app reads do not align: nothing downstream keeps a stream time of theirs.

    >>> reads = {"left": {"a"}, "right": {"b"}, "join": {"a2", "b2"}, "solo": {"c"}}.get
    >>> writes = {"left": {"a2"}, "right": {"b2"}, "join": {"out"}, "solo": {"d"}}.get
    >>> alignment_groups(["left", "right", "join", "solo"], reads, writes)
    [['left', 'right']]
    """
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent.setdefault(i, i) != i:
            i = parent[i]
        return i

    read_by: dict[str, list[int]] = {}
    for j, agent in enumerate(agents):
        for topic in reads(agent):
            read_by.setdefault(topic, []).append(j)
    feeding: dict[int, list[int]] = {}  # reader -> the agents writing its inputs
    for i, agent in enumerate(agents):
        for topic in writes(agent):
            for j in read_by.get(topic, []):
                feeding.setdefault(j, []).append(i)
    for writers in feeding.values():
        for i in writers:
            parent[find(i)] = find(writers[0])
    groups: dict[int, list[Any]] = {}
    for i in sorted({i for writers in feeding.values() for i in writers}):
        groups.setdefault(find(i), []).append(agents[i])
    return list(groups.values())
