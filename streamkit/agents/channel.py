"""``Channel``: an in-memory channel (Faust's ``app.channel()``), for work inside one process.

A channel is a topic with no log behind it: what is sent to it reaches, in order, every
subscriber that exists at that moment, and nothing else. A subscriber is an agent over the
channel (``@app.agent(channel)``: its instances share one subscription, as instances of an
agent share a partition) or an iteration outside an agent (``async for event in
channel``, ``channel.stream()``), each with its own queue of ``maxsize`` events
(``app.conf.stream_buffer_maxsize`` by default). A full queue makes ``send``/``put`` wait: the
sender slows down to the reader's pace.

Nothing is stored: an event not yet processed when the process stops is lost, and a send
with no subscriber is dropped, as in Faust. An event sent to a channel has no offset (-1)
and no partition (-1); its timestamp is the one given, else the event being processed's,
else now. ``key_type``/``value_type`` are checked when sending, as a topic's are; nothing is
serialized.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Mapping
from datetime import datetime
from types import GenericAlias
from typing import TYPE_CHECKING, Any

from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.context import current_event
from streamkit._core.errors import ConfigError
from streamkit.agents.stream import Event, KeyFn, Source, Stream, StreamEnd
from streamkit.topics.topic import Headers, Topic, timestamp_ms

if TYPE_CHECKING:
    from streamkit.app.application import App

CHANNEL_TOPIC = "<anon>"  # the topic an event sent to a channel names, as Faust's


class ChannelSent:
    """What ``channel.send`` returns, read as a topic send's is: awaitable, and already
    resolved (``done()``, ``result()``) with where the event went (nowhere: -1)."""

    __slots__ = ("offset", "partition", "timestamp", "topic")

    def __init__(self, timestamp: int) -> None:
        self.topic = CHANNEL_TOPIC
        self.partition = -1
        self.offset = -1
        self.timestamp = timestamp

    def __await__(self) -> Generator[Any, None, ChannelSent]:
        return _resolved(self).__await__()

    def done(self) -> bool:
        return True

    def result(self) -> ChannelSent:
        return self

    def exception(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"<ChannelSent timestamp={self.timestamp}>"


async def _resolved(sent: ChannelSent) -> ChannelSent:
    return sent


class Subscription:
    """One subscriber's queue of events; ``close`` ends the readers' streams."""

    def __init__(self, channel: Channel, maxsize: int) -> None:
        self.channel = channel
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize)
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.channel.unsubscribe(self)
        try:
            self.queue.put_nowait(None)  # wakes a reader waiting on an empty queue
        except asyncio.QueueFull:
            pass  # the reader finds the queue non-empty and ``closed`` set after it


class ChannelSource:
    """A stream's source over a subscription (``streams.Source``): nothing to acknowledge."""

    def __init__(self, subscription: Subscription, clock: Clock = SYSTEM_CLOCK) -> None:
        self.subscription = subscription
        self.clock = clock
        self.taken = 0  # events handed out

    def _take(self, event: Event | None) -> Event:
        if event is None:
            self.subscription.queue.put_nowait(None)  # keep the end for every reader
            raise StreamEnd
        current_event.set(event)
        self.taken += 1
        return event

    async def get(self, timeout: float | None) -> Event | None:
        queue = self.subscription.queue
        if self.subscription.closed and queue.empty():
            raise StreamEnd
        if timeout is None:
            return self._take(await queue.get())
        try:
            return self._take(await asyncio.wait_for(queue.get(), timeout))
        except TimeoutError:
            return None

    def get_nowait(self) -> Event | None:
        try:
            event = self.subscription.queue.get_nowait()
        except asyncio.QueueEmpty:
            if self.subscription.closed:
                raise StreamEnd from None
            return None
        return self._take(event)

    def ack(self) -> None:
        return None  # in memory: nothing is committed

    def release(self, event: Event) -> None:
        return None

    def through(self, upstream: Stream, topic: Topic | None, key: KeyFn | None, name: str) -> Source:
        raise ConfigError(
            f"a stream over a channel cannot {'group_by' if topic is None else 'go through a topic'}: "
            "a channel has no partitions; send to a topic and read that in another agent"
        )


class Channel:
    """An in-memory channel.

    >>> import asyncio, streamkit as sk
    >>> app = sk.App("docs-channel")
    >>> greetings = app.channel(value_type=str)
    >>> async def main():
    ...     events = greetings.__aiter__()         # subscribe first: sends reach subscribers
    ...     await greetings.send(value="hi", key=b"k")
    ...     event = await events.__anext__()
    ...     return event.key, event.value, event.offset
    >>> asyncio.run(main())
    (b'k', 'hi', -1)
    """

    def __class_getitem__(cls, item: Any) -> GenericAlias:
        return GenericAlias(cls, item)

    def __init__(
        self, app: App, *, key_type: Any = None, value_type: Any = None, maxsize: int | None = None
    ) -> None:
        if maxsize is not None and maxsize < 1:
            raise ConfigError(f"a channel's maxsize must be at least 1, not {maxsize}")
        self.app = app
        self.key_type = key_type
        self.value_type = value_type
        self.maxsize = maxsize
        # The declared types are checked as a topic's are (nothing is serialized).
        self._types = Topic(app, CHANNEL_TOPIC, key_type=key_type, value_type=value_type)
        self._subscriptions: list[Subscription] = []

    def __repr__(self) -> str:
        return f"<Channel value_type={getattr(self.value_type, '__name__', self.value_type)}>"

    # -- subscribers -----------------------------------------------------------------------

    def subscribe(self) -> Subscription:
        """A new subscriber: every event sent from now on is queued for it."""
        subscription = Subscription(self, self.maxsize or int(self.app.conf.stream_buffer_maxsize))
        self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscriptions)

    def stream(self) -> Stream:
        """A stream of this channel's values from now on (a new subscriber)."""
        return Stream(ChannelSource(self.subscribe()))

    def __aiter__(self) -> _ChannelIterator:
        """``async for event in channel``: the events sent from now on (a new subscriber)."""
        return _ChannelIterator(self.subscribe())

    # -- sending ---------------------------------------------------------------------------

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        timestamp: int | datetime | None = None,
        partition: int | None = None,
    ) -> ChannelSent:
        """Deliver one event to every subscriber (waiting while a subscriber's queue is full).
        ``partition`` is accepted and ignored, as a channel has none."""
        self._types.check(key, value)
        ts = timestamp_ms(timestamp)
        if ts is None:
            processing = current_event.get()
            ts = processing.timestamp if processing is not None else int(time.time() * 1000)
        await self.put(Event(CHANNEL_TOPIC, -1, -1, ts, key, value, _header_pairs(headers)))
        return ChannelSent(ts)

    async def put(self, event: Event) -> None:
        """Deliver ``event`` as it is to every subscriber (Faust's ``channel.put``)."""
        for subscription in list(self._subscriptions):
            await subscription.queue.put(event)

    def empty(self) -> bool:
        """Whether no subscriber has an event waiting."""
        return all(s.queue.empty() for s in self._subscriptions)

    async def maybe_declare(self) -> None:
        return None  # nothing to create


class _ChannelIterator:
    """``async for event in channel``: whole ``Event``s, as Faust's channel iteration gives."""

    def __init__(self, subscription: Subscription) -> None:
        self._source = ChannelSource(subscription)

    def __aiter__(self) -> _ChannelIterator:
        return self

    async def __anext__(self) -> Event:
        try:
            event = await self._source.get(None)
        except StreamEnd:
            raise StopAsyncIteration from None
        assert event is not None
        return event

    async def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None after ``timeout`` seconds (Faust's ``channel.get``)."""
        try:
            return await self._source.get(timeout)
        except StreamEnd:
            return None

    def close(self) -> None:
        self._source.subscription.close()


def _header_pairs(headers: Headers | None) -> list[tuple[str, bytes | None]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(name, value.encode() if isinstance(value, str) else value) for name, value in items]
