"""Inboxes and root sources: how fetched records reach an agent instance, and what is committed.

An ``Inbox`` holds the fetched, not yet handed out records of one input partition for one
agent, in offset order. A ``RootSource`` is the bottom of one instance's operator chain: it
takes records from its inboxes, decodes them and remembers which it handed out and the agent
has not finished (``pending``).

A root source takes records from an inbox a chunk at a time (a slice of a fetched batch)
and hands them to the agent one by one from there: the per-record path touches neither the
inbox nor the event loop. Records of a chunk not yet handed out count as pending too.

Commit position of an inbox: the smallest offset still pending in any of its readers, or,
when none is, the offset after the last record taken. Everything below it was processed;
the worker commits it once the producer has acknowledged what that processing sent.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from streamkit._core import context
from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.serde import RawSerde, SerdeError
from streamkit._core.types import TopicPartition
from streamkit.agents.stream import Event, KeyFn, Source, StreamEnd
from streamkit.topics.topic import Topic
from streamkit.transport.base import ConsumerRecord

if TYPE_CHECKING:
    from streamkit.agents.stream import Stream
    from streamkit.runtime.alignment import Aligner, Member
    from streamkit.runtime.merge import InputMerge

# An agent with records waiting runs without suspending; every CHECK_EVERY records its source
# looks at the clock and lets the event loop turn once it has held it for YIELD_AFTER_S.
CHECK_EVERY = 256
YIELD_AFTER_S = 0.01
# The most records a source takes from an inbox at once (merged inputs alternate per chunk).
CHUNK = 1000

# The event being processed: set per record handed out (lives in _core so tables read it).
current_event = context.current_event


class Gate:
    """Closed while an exactly-once commit seals its transaction (``commits.py``): the sources
    hand out no record, so the outputs in the transaction are exactly those of the records
    below the committed positions."""

    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = False


_ALWAYS_OPEN = Gate()


class DecodeError(SerdeError):
    """A record's key or value did not decode; names where the record is."""


def _loads(serde: Any) -> Callable[[bytes | None], Any] | None:
    """The decoder of a serde, or None for raw bytes (no call per record)."""
    return None if isinstance(serde, RawSerde) else serde.loads


class Inbox:
    def __init__(self, tp: TopicPartition, topic: Topic, wakeup: asyncio.Event, high_water: int = 20_000) -> None:
        self.tp = tp
        self.topic = topic
        # Looked up once, not per record on the hot path.
        self.topic_name = tp.topic
        self.partition = tp.partition
        self.key_loads = _loads(topic.key_serde)
        self.value_loads = _loads(topic.value_serde)
        self._wakeup = wakeup
        self._batches: deque[Sequence[ConsumerRecord]] = deque()
        self._index = 0
        self.size = 0
        self.handed_next: int | None = None
        self.readers: list[RootSource] = []
        self.high_water = high_water
        self.on_low: Callable[[TopicPartition], None] | None = None
        self.paused = False
        # Records fetched into it, counted by an aligned group's order stamps (``merge.py``).
        self.on_put: Callable[[TopicPartition, Sequence[ConsumerRecord]], None] | None = None

    def put(self, records: Sequence[ConsumerRecord]) -> None:
        if not records:
            return
        if self.handed_next is None:
            self.handed_next = records[0].offset
        self._batches.append(records)
        self.size += len(records)
        if self.on_put is not None:
            self.on_put(self.tp, records)
        self._wakeup.set()

    def head_timestamp(self) -> int | None:
        """The timestamp of the next record not taken yet (None: none is here)."""
        index = self._index
        for batch in self._batches:
            if index < len(batch):
                return batch[index].timestamp
            index = 0
        return None

    def take_chunk(self, limit: int = CHUNK, max_timestamp: int | None = None) -> Sequence[ConsumerRecord]:
        """Up to ``limit`` next records, in offset order (empty when there are none); with
        ``max_timestamp``, only the next record and those right after it stamped no later."""
        batches = self._batches
        while batches:
            head = batches[0]
            start = self._index
            if start < len(head):
                if max_timestamp is not None:
                    end = start + 1
                    stop = min(len(head), start + limit)
                    while end < stop and head[end].timestamp <= max_timestamp:
                        end += 1
                    limit = end - start
                if start == 0 and len(head) <= limit:
                    chunk = head
                    batches.popleft()
                else:
                    chunk = head[start : start + limit]
                    self._index = start + len(chunk)
                self.size -= len(chunk)
                self.handed_next = chunk[-1].offset + 1
                if self.paused and self.size < self.high_water // 2 and self.on_low is not None:
                    self.on_low(self.tp)
                return chunk
            batches.popleft()
            self._index = 0
        return ()

    def peek(self, limit: int) -> tuple[Sequence[ConsumerRecord], int, int]:
        """The next records not taken, without taking them: ``(batch, start, end)``, the
        records ``batch[start:end]`` (at most ``limit``, of one fetched batch; none: ``start ==
        end``)."""
        index = self._index
        for batch in self._batches:
            if index < len(batch):
                return batch, index, min(len(batch), index + limit)
            index = 0
        return (), 0, 0

    def commit_position(self) -> int | None:
        if self.handed_next is None:
            return None
        position = self.handed_next
        for reader in self.readers:
            pending = reader.first_pending(self.tp)
            if pending is not None and pending < position:
                position = pending
        return position


ThroughOpener = Callable[["Stream", Topic | None, KeyFn | None, str], Source]
DeadLetter = Callable[[TopicPartition, ConsumerRecord, BaseException], Awaitable[None]]
_NO_RECORDS: Sequence[ConsumerRecord] = ()


class RootSource:
    """The bottom of one agent instance's chain over one or more inboxes (merged topics)."""

    def __init__(
        self,
        inboxes: Sequence[Inbox],
        wakeup: asyncio.Event,
        dead_letter: DeadLetter,
        open_through: ThroughOpener,
        clock: Clock = SYSTEM_CLOCK,
        gate: Gate = _ALWAYS_OPEN,
    ) -> None:
        self.clock = clock
        self._gate = gate
        self._inboxes = list(inboxes)
        self._wakeup = wakeup
        self._dead_letter = dead_letter
        self._open_through = open_through
        self.stopping = False  # set by the partition task: the next read raises StreamEnd
        self._pending: list[tuple[Inbox, ConsumerRecord]] = []
        self._next = 0
        self._chunk = _NO_RECORDS
        self._chunk_at = 0
        self._chunk_inbox: Inbox | None = None
        # A chunk merged from several inboxes: the inbox of each record (None: all are
        # _chunk_inbox's).
        self._chunk_inboxes: list[Inbox] | None = None
        self._undecodable: tuple[Inbox, ConsumerRecord, SerdeError] | None = None
        self._countdown = CHECK_EVERY
        self._last_pause = time.monotonic()
        # Event-time alignment with other tasks (``alignment.py``): None when not aligned.
        self._aligner: Aligner | None = None
        self._member: Member | None = None
        # The merge of inputs written by aligned tasks of this worker (``merge.py``): None
        # when the inputs merge by their records' timestamps.
        self._merge: InputMerge | None = None
        for inbox in self._inboxes:
            inbox.readers.append(self)

    def align(self, aligner: Aligner, member: Member) -> None:
        """Hand records out only as ``aligner`` admits them (``alignment.py``)."""
        self._aligner = aligner
        self._member = member
        member.source = self

    def merge(self, merge: InputMerge) -> None:
        """Take records in the order ``merge`` gives (``merge.py``)."""
        self._merge = merge

    def next_chunk_timestamp(self) -> int | None:
        """The timestamp of the next record of the chunk in hand (None: none is left)."""
        at = self._chunk_at
        return self._chunk[at].timestamp if at < len(self._chunk) else None

    def detach(self) -> None:
        for inbox in self._inboxes:
            if self in inbox.readers:
                inbox.readers.remove(self)

    def first_pending(self, tp: TopicPartition) -> int | None:
        for inbox, record in self._pending:
            if inbox.tp == tp:
                return record.offset
        chunk_inboxes = self._chunk_inboxes
        if chunk_inboxes is not None:
            chunk = self._chunk
            for at in range(self._chunk_at, len(chunk)):
                if chunk_inboxes[at].tp == tp:
                    return chunk[at].offset
            return None
        chunk_inbox = self._chunk_inbox
        if chunk_inbox is not None and chunk_inbox.tp == tp and self._chunk_at < len(self._chunk):
            return self._chunk[self._chunk_at].offset
        return None

    @property
    def busy(self) -> bool:
        """A record was handed out and its processing has not finished."""
        return bool(self._pending)

    @property
    def pending(self) -> list[tuple[Inbox, ConsumerRecord]]:
        """The records handed out and not finished (what a failure dead-letters)."""
        return list(self._pending)

    def ack(self) -> None:
        if self._pending:
            self._pending.clear()

    def release(self, event: Event) -> None:
        pending = self._pending
        for i in range(len(pending) - 1, -1, -1):
            inbox, record = pending[i]
            if record.offset == event.offset and inbox.tp.partition == event.partition and inbox.tp.topic == event.topic:
                del pending[i]
                return

    def _refill(self) -> bool:
        """Take the next chunk; False when all inboxes are empty.

        Of several inboxes (merged topics, the two sides of a join), the one whose next record
        has the lowest timestamp goes first (the first of them on a tie), and its chunk ends
        before a record stamped later than another inbox's next one: so the agent sees the
        records it holds in timestamp order across partitions, whatever the order the fetches
        came in (Kafka Streams' choice of the next record of a task). Within a partition,
        offset order stays.

        When every inbox holds records, the chunk is merged from all of them at once
        (``_merge_chunk``), in that same order: records interleaving by timestamp then cost a
        comparison each, not a refill each."""
        inboxes = self._inboxes
        n = len(inboxes)
        self._chunk_inboxes = None
        merge = self._merge
        if merge is not None:
            got = merge.take()
            if got is None:
                return False
            self._chunk, self._chunk_inboxes = got
            self._chunk_at = 0
            self._chunk_inbox = None
            return True
        if n > 1:
            if self._merge_chunk():
                return True
            heads = [(ts, i) for i, inbox in enumerate(inboxes) if (ts := inbox.head_timestamp()) is not None]
            if not heads:
                return False
            _ts, first = min(heads)
            others = [(ts, i) for ts, i in heads if i != first]
            bound = None
            if others:
                # Records stamped like the other inbox's next one go first only from the
                # inbox listed earlier: ties break the same way record by record.
                bound_ts, bound_inbox = min(others)
                bound = bound_ts if first < bound_inbox else bound_ts - 1
            self._chunk = inboxes[first].take_chunk(CHUNK, bound)
            self._chunk_at = 0
            self._chunk_inbox = inboxes[first]
            return True
        for i in range(n):
            inbox = inboxes[(self._next + i) % n]
            chunk = inbox.take_chunk()
            if chunk:
                self._next = (self._next + i + 1) % n
                self._chunk = chunk
                self._chunk_at = 0
                self._chunk_inbox = inbox
                return True
        return False

    def _merge_chunk(self) -> bool:
        """A chunk of records from every inbox in the order ``_refill`` hands them out one by
        one; False (nothing taken) unless every inbox holds records.

        Each inbox's next records (one fetched batch's worth, up to ``CHUNK``) are looked at,
        not taken; the merge repeatedly takes the record with the lowest ``(timestamp, inbox
        index)`` among the inboxes' next ones, and stops where an inbox's looked-at records
        end: past that the choice depends on records not looked at (or not fetched yet), so
        the next refill makes it. Records put in an inbox meanwhile go behind the ones looked
        at, so every choice here is the one a refill per record would make. The records
        merged are then taken from their inboxes (commit positions and back-pressure as for
        any chunk); those not handed out yet stay pending (``first_pending``)."""
        inboxes = self._inboxes
        peeks = []
        for inbox in inboxes:
            batch, start, end = inbox.peek(CHUNK)
            if start == end:
                return False
            peeks.append((batch, start, end))
        records: list[ConsumerRecord] = []
        owners: list[Inbox] = []
        taken = [0] * len(inboxes)
        if len(inboxes) == 2:
            (a, i, a_end), (b, j, b_end) = peeks
            a_inbox, b_inbox = inboxes
            a_start, b_start = i, j
            append, own = records.append, owners.append
            ra, rb = a[i], b[j]
            for _ in range(CHUNK):
                if ra.timestamp <= rb.timestamp:  # a tie goes to the first inbox
                    append(ra)
                    own(a_inbox)
                    i += 1
                    if i == a_end:
                        break
                    ra = a[i]
                else:
                    append(rb)
                    own(b_inbox)
                    j += 1
                    if j == b_end:
                        break
                    rb = b[j]
            taken = [i - a_start, j - b_start]
        else:
            at = [start for _batch, start, _end in peeks]
            while len(records) < CHUNK:
                _ts, k = min((peeks[k][0][at[k]].timestamp, k) for k in range(len(peeks)))
                records.append(peeks[k][0][at[k]])
                owners.append(inboxes[k])
                at[k] += 1
                taken[k] += 1
                if at[k] == peeks[k][2]:
                    break
        for inbox, count in zip(inboxes, taken, strict=True):
            if count:
                inbox.take_chunk(count)
        self._chunk = records
        self._chunk_at = 0
        self._chunk_inbox = None
        self._chunk_inboxes = owners
        return True

    def get_nowait(self) -> Event | None:
        """The next record, decoded, if one is waiting and the agent need not let the event
        loop turn first; else ``None`` (``get`` then waits, yields or dead-letters)."""
        if self.stopping:
            raise StreamEnd
        if self._gate.closed:
            return None
        self._countdown -= 1
        if self._countdown <= 0:
            return None
        at = self._chunk_at
        chunk = self._chunk
        member = self._member
        if at >= len(chunk):
            if not self._refill():
                if member is not None:
                    assert self._aligner is not None
                    self._aligner.ran_out(member)
                return None
            at = 0
            chunk = self._chunk
        record = chunk[at]
        if member is not None:
            # Aligned: the record's key is the stream time it leaves this task at.
            ts = record.timestamp
            st = member.stream_time
            leaves_at = ts if st is None or ts > st else st
            aligner = self._aligner
            assert aligner is not None
            if (leaves_at > member.limit or member.epoch != aligner.epoch) and not aligner.admit(member, leaves_at):
                return None
            member.stream_time = leaves_at
            member.moved = member.unflushed = True
        self._chunk_at = at + 1
        owners = self._chunk_inboxes
        inbox = self._chunk_inbox if owners is None else owners[at]
        assert inbox is not None
        key_loads = inbox.key_loads
        value_loads = inbox.value_loads
        try:
            key = record.key if key_loads is None else key_loads(record.key)
            value = record.value if value_loads is None else value_loads(record.value)
        except SerdeError as exc:
            self._undecodable = (inbox, record, exc)
            return None
        self._pending.append((inbox, record))
        event = Event(inbox.topic_name, inbox.partition, record.offset, record.timestamp, key, value, record.headers)
        current_event.set(event)
        return event

    async def get(self, timeout: float | None) -> Event | None:
        """The next event, or ``None`` once ``timeout`` seconds passed on ``clock``. With a
        manual clock the wait ends when the clock was advanced past it and the source woken
        (``Worker.clock_advanced``); real time only bounds each wait before a re-check."""
        deadline_ms: int | None = None
        while True:
            if self._undecodable is not None:
                inbox, record, exc = self._undecodable
                self._undecodable = None
                error = DecodeError(
                    f"record at {inbox.topic_name}-{inbox.partition} offset {record.offset} "
                    f"does not decode: {exc}"
                )
                await self._dead_letter(inbox.tp, record, error)
            if self._countdown <= 0:
                await self._pause_if_due()
            # Fast path: a record is waiting (the usual case under load); no clear, no wait.
            event = self.get_nowait()
            if event is not None:
                return event
            member = self._member
            if member is not None and member.flush_first:
                # Aligned under exactly-once: what the tasks ahead of this one sent goes to
                # the log before this one sends (each task has its own producer).
                assert self._aligner is not None
                await self._aligner.flush_first(member)
                continue
            if self._undecodable is not None or self._countdown <= 0:
                continue
            # Clear, then look again: a put after the clear sets the wakeup, so none is lost.
            self._wakeup.clear()
            event = self.get_nowait()
            if event is not None:
                return event
            if self._undecodable is not None or self._countdown <= 0:
                continue
            # A merge holding records back looks again shortly: what it waits for (another
            # task's progress) sets no wake-up.
            poll_s = self._merge.poll_s if self._merge is not None and self._merge.waiting else None
            if timeout is None:
                if poll_s is None:
                    await self._wakeup.wait()
                    continue
                remaining_s = poll_s
            else:
                now_ms = self.clock.monotonic_ms()
                if deadline_ms is None:
                    deadline_ms = now_ms + int(timeout * 1000)
                remaining_ms = deadline_ms - now_ms
                if remaining_ms <= 0:
                    return None
                remaining_s = remaining_ms / 1000 if poll_s is None else min(poll_s, remaining_ms / 1000)
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining_s)
            except TimeoutError:
                pass  # look at the clock again

    async def _pause_if_due(self) -> None:
        """Let the event loop turn if this source has held it for ``YIELD_AFTER_S``: fetches,
        producer hand-overs and commits then run while the agent works, not after an
        inbox-full of records (latency, and overlap with the broker's work)."""
        self._countdown = CHECK_EVERY
        now = time.monotonic()
        if now - self._last_pause >= YIELD_AFTER_S:
            await asyncio.sleep(0)
            self._last_pause = time.monotonic()

    def through(self, upstream: Stream, topic: Topic | None, key: KeyFn | None, name: str) -> Source:
        return self._open_through(upstream, topic, key, name)
