"""Inboxes and root sources: how fetched records reach an agent instance, and what is committed.

An ``Inbox`` holds the fetched, not yet handed out records of one input partition for one
agent, in offset order. A ``RootSource`` is the bottom of one instance's operator chain: it
takes records from its inboxes, decodes them and remembers which it handed out and the agent
has not finished (``pending``).

Commit position of an inbox: the smallest offset still pending in any of its readers, or,
when none is, the offset after the last record handed out. Everything below it was
processed; the worker commits it once the producer has acknowledged what that processing
sent.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING

from streamkit._core.serde import SerdeError
from streamkit._core.types import TopicPartition
from streamkit.streams import Event, KeyFn, Source, StreamEnd
from streamkit.topics import Topic
from streamkit.transport.base import ConsumerRecord

if TYPE_CHECKING:
    from streamkit.streams import Stream

current_event: ContextVar[Event | None] = ContextVar("streamkit_current_event", default=None)


class DecodeError(SerdeError):
    """A record's key or value did not decode; names where the record is."""


class Inbox:
    def __init__(self, tp: TopicPartition, topic: Topic, wakeup: asyncio.Event, high_water: int = 20_000) -> None:
        self.tp = tp
        self.topic = topic
        # Looked up once, not per record on the hot path.
        self.topic_name = tp.topic
        self.partition = tp.partition
        self.key_loads = topic.key_serde.loads
        self.value_loads = topic.value_serde.loads
        self._wakeup = wakeup
        self._batches: deque[Sequence[ConsumerRecord]] = deque()
        self._index = 0
        self.size = 0
        self.handed_next: int | None = None
        self.readers: list[RootSource] = []
        self.high_water = high_water
        self.on_low: Callable[[TopicPartition], None] | None = None
        self.paused = False

    def put(self, records: Sequence[ConsumerRecord]) -> None:
        if not records:
            return
        if self.handed_next is None:
            self.handed_next = records[0].offset
        self._batches.append(records)
        self.size += len(records)
        self._wakeup.set()

    def take(self) -> ConsumerRecord | None:
        batches = self._batches
        while batches:
            head = batches[0]
            if self._index < len(head):
                record = head[self._index]
                self._index += 1
                self.size -= 1
                self.handed_next = record.offset + 1
                if self.paused and self.size < self.high_water // 2 and self.on_low is not None:
                    self.on_low(self.tp)
                return record
            batches.popleft()
            self._index = 0
        return None

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


class RootSource:
    """The bottom of one agent instance's chain over one or more inboxes (merged topics)."""

    def __init__(
        self,
        inboxes: Sequence[Inbox],
        wakeup: asyncio.Event,
        is_stopping: Callable[[], bool],
        dead_letter: DeadLetter,
        open_through: ThroughOpener,
    ) -> None:
        self._inboxes = list(inboxes)
        self._wakeup = wakeup
        self._is_stopping = is_stopping
        self._dead_letter = dead_letter
        self._open_through = open_through
        self._pending: list[tuple[Inbox, ConsumerRecord]] = []
        self._next = 0
        for inbox in self._inboxes:
            inbox.readers.append(self)

    def detach(self) -> None:
        for inbox in self._inboxes:
            if self in inbox.readers:
                inbox.readers.remove(self)

    def first_pending(self, tp: TopicPartition) -> int | None:
        for inbox, record in self._pending:
            if inbox.tp == tp:
                return record.offset
        return None

    @property
    def pending(self) -> list[tuple[Inbox, ConsumerRecord]]:
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

    def _take(self) -> tuple[Inbox, ConsumerRecord] | None:
        inboxes = self._inboxes
        n = len(inboxes)
        if n == 1:
            record = inboxes[0].take()
            return None if record is None else (inboxes[0], record)
        for i in range(n):
            inbox = inboxes[(self._next + i) % n]
            record = inbox.take()
            if record is not None:
                self._next = (self._next + i + 1) % n
                return inbox, record
        return None

    async def get(self, timeout: float | None) -> Event | None:
        deadline: float | None = None
        single = self._inboxes[0] if len(self._inboxes) == 1 else None
        while True:
            if self._is_stopping():
                raise StreamEnd
            # Fast path: a record is waiting (the usual case under load); no loop, no clear.
            if single is not None:
                inbox: Inbox | None = single
                record = single.take()
            else:
                inbox, record = self._take() or (None, None)
            if record is None:
                # Clear, then look again: a put after the clear sets the wakeup, so none is lost.
                self._wakeup.clear()
                inbox, record = self._take() or (None, None)
            if record is None or inbox is None:
                if timeout is None:
                    await self._wakeup.wait()
                    continue
                now = asyncio.get_running_loop().time()
                if deadline is None:
                    deadline = now + timeout
                remaining = deadline - now
                if remaining <= 0:
                    return None
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except TimeoutError:
                    return None
                continue
            try:
                key = inbox.key_loads(record.key)
                value = inbox.value_loads(record.value)
            except SerdeError as exc:
                error = DecodeError(
                    f"record at {inbox.topic_name}-{inbox.partition} offset {record.offset} "
                    f"does not decode: {exc}"
                )
                await self._dead_letter(inbox.tp, record, error)
                continue
            self._pending.append((inbox, record))
            event = Event(
                inbox.topic_name, inbox.partition, record.offset, record.timestamp, key, value, record.headers
            )
            current_event.set(event)
            return event

    def through(self, upstream: Stream, topic: Topic | None, key: KeyFn | None, name: str) -> Source:
        return self._open_through(upstream, topic, key, name)
