"""``Stream`` (KStream): the records of an agent's input, one operator chain per agent instance.

A stream is pulled, not pushed: each operator asks the one before it for the next event with
``_get(timeout)``, down to a ``Source`` the runtime provides (a partition task's inbox). No
async generators sit on the per-record path, only plain coroutine calls.

Processing state: an event handed to the agent counts as *processed* once the agent asks for
the next one (or its loop ends), and what its processing deferred (``_core.context.defer``:
a windowed table's ``on_window_close``) has run. The outermost iterator calls ``Source.ack`` at that moment;
the runtime commits an input offset only after everything sent while processing it was
acknowledged. A crash in between re-delivers the record: at-least-once.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import GenericAlias
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from streamkit._core.clock import Clock
from streamkit._core.context import after_event, current_event, settle_event
from streamkit._core.errors import ConfigError
from streamkit._core.types import TopicPartition

if TYPE_CHECKING:
    from streamkit.topics.topic import Topic

T = TypeVar("T")

Header = tuple[str, bytes | None]


@dataclass(slots=True)
class Event:
    """A record as the agent sees it: decoded key and value plus where it came from."""

    # Subscriptable as Faust's (``Event[Order]`` in annotations); a runtime alias only.
    def __class_getitem__(cls, item: Any) -> GenericAlias:
        return GenericAlias(cls, item)

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: Sequence[Header]

    @property
    def message(self) -> Event:
        """Faust's ``event.message``: where the record came from (``topic``, ``partition``,
        ``offset``, ``timestamp``, ``headers``, ``tp``), which this event carries itself."""
        return self

    @property
    def tp(self) -> TopicPartition:
        """Faust's ``message.tp``: the topic and partition the record came from."""
        return TopicPartition(self.topic, self.partition)


class PartitionSet(frozenset[TopicPartition]):
    """The input partitions a stream reads. Faust code reads ``stream.active_partitions`` as a
    set, or calls it: both work (calling gives the set itself)."""

    def __call__(self) -> PartitionSet:
        return self


class StreamEnd(Exception):
    """The source has no more events: its partition was revoked or the worker stops."""


KeyFn = Callable[[Any], Any]


class Source(Protocol):
    """The root of a chain; implemented by the runtime (or a probe while discovering).

    ``clock`` is the worker's: timeouts (``take``'s ``within``, ``get``'s ``timeout``) follow
    it, so a manual clock (``streamkit.testing``) drives them.
    """

    clock: Clock

    async def get(self, timeout: float | None) -> Event | None:
        """The next event; ``None`` when ``timeout`` seconds pass first on ``clock``.
        Raises ``StreamEnd``."""
        ...

    def get_nowait(self) -> Event | None:
        """The next event if it is ready at once, else ``None`` (then ``get`` is awaited).
        Raises ``StreamEnd``. The per-record fast path: no coroutine."""
        ...

    def ack(self) -> None:
        """Everything this source handed out so far has been processed."""
        ...

    def release(self, event: Event) -> None:
        """``event`` is done with early: an operator dropped it (``filter``)."""
        ...

    def through(self, upstream: Stream, topic: Topic | None, key: KeyFn | None, name: str) -> Source:
        """Forward ``upstream`` to ``topic`` (None: the agent's repartition topic ``name``) and
        return the source reading this partition of it."""
        ...


Getter = Callable[[float | None], Awaitable[Event | None]]
NowaitGetter = Callable[[], Event | None]


def _key_function(key: Any, name: str | None) -> tuple[KeyFn, str]:
    """A key extractor and its name from a Record field (``Order.user``) or a callable."""
    descriptor_get = getattr(type(key), "__get__", None)
    field_name = getattr(key, "__name__", None)
    if type(key).__name__ == "member_descriptor" and descriptor_get is not None and field_name:
        def from_field(value: Any) -> Any:
            return key.__get__(value)

        return from_field, name or field_name
    if callable(key):
        fn_name = name or getattr(key, "__name__", None)
        if not fn_name or fn_name == "<lambda>":
            raise ConfigError("group_by with a lambda needs name=: it names the repartition topic")
        return key, fn_name
    raise ConfigError(f"group_by needs a record field or a function, not {key!r}")


class Stream:
    """An agent's input; iterate it with ``async for``.

    ``async for value in stream`` gives values, ``stream.items()`` (key, value) pairs and
    ``stream.events()`` whole ``Event``s with offset, timestamp and headers.
    """

    # Subscriptable as Faust's (``Stream[Order]`` in annotations); a runtime alias only.
    def __class_getitem__(cls, item: Any) -> GenericAlias:
        return GenericAlias(cls, item)

    def __init__(
        self,
        source: Source,
        getter: Getter | None = None,
        nowait: NowaitGetter | None = None,
        *,
        partitions: PartitionSet | None = None,
    ) -> None:
        self._source = source
        self._partitions = partitions
        self._get: Getter = getter or source.get
        # A synchronous way to the next event when one is ready: the source's own, or one an
        # operator with a plain (not async) function built on it; None forces the awaited path.
        self._nowait: NowaitGetter | None = nowait if getter is not None else source.get_nowait

    # -- iteration -------------------------------------------------------------------------

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Any:
        if after_event.get():
            await settle_event()
        self._source.ack()
        try:
            if self._nowait is not None:
                event = self._nowait()
                if event is not None:
                    return event.value
            event = await self._get(None)
        except StreamEnd:
            raise StopAsyncIteration from None
        assert event is not None  # no timeout: only StreamEnd stops the wait
        return event.value

    @property
    def active_partitions(self) -> PartitionSet | None:
        """The input partitions this instance reads (Faust's ``stream.active_partitions``):
        an agent over topics has one instance per partition number, so the set holds
        partition p of each of its topics; None for a stream over a channel."""
        return self._partitions

    @property
    def current_event(self) -> Event | None:
        """The event being processed (Faust's ``stream.current_event``), or None outside one."""
        event: Event | None = current_event.get()
        return event

    def items(self) -> AsyncIterator[tuple[Any, Any]]:
        return _Projected(self, lambda e: (e.key, e.value))

    def events(self) -> AsyncIterator[Event]:
        return _Projected(self, lambda e: e)

    def enumerate(self, start: int = 0) -> AsyncIterator[tuple[int, Any]]:
        counter = [start - 1]

        def number(e: Event) -> tuple[int, Any]:
            counter[0] += 1
            return counter[0], e.value

        return _Projected(self, number)

    async def take(self, max_: int, within: float) -> AsyncIterator[list[Any]]:
        """Lists of up to ``max_`` values, each list cut ``within`` seconds after its first
        value at most (on the worker's clock)."""
        if max_ < 1 or within <= 0:
            raise ConfigError("take needs max_ >= 1 and within > 0 seconds")
        clock = self._source.clock
        within_ms = max(1, int(within * 1000))
        while True:
            if after_event.get():
                await settle_event()
            self._source.ack()
            try:
                first = await self._get(None)
            except StreamEnd:
                return
            assert first is not None
            batch = [first.value]
            deadline_ms = clock.monotonic_ms() + within_ms
            while len(batch) < max_:
                remaining_ms = deadline_ms - clock.monotonic_ms()
                if remaining_ms <= 0:
                    break
                try:
                    event = await self._get(remaining_ms / 1000)
                except StreamEnd:
                    yield batch
                    return
                if event is None:
                    break
                batch.append(event.value)
            yield batch

    # -- operators -------------------------------------------------------------------------

    def _chain(self, getter: Getter, nowait: NowaitGetter | None = None) -> Stream:
        return Stream(self._source, getter, nowait, partitions=self._partitions)

    def map(self, fn: Callable[[Any], Any]) -> Stream:
        """Replace each value by ``fn(value)`` (``fn`` may be async)."""
        up = self._get
        if inspect.iscoroutinefunction(fn):
            async def get_async(timeout: float | None) -> Event | None:
                event = await up(timeout)
                if event is not None:
                    event.value = await fn(event.value)
                return event

            return self._chain(get_async)

        async def get(timeout: float | None) -> Event | None:
            event = await up(timeout)
            if event is not None:
                event.value = fn(event.value)
            return event

        up_nowait = self._nowait
        if up_nowait is None:
            return self._chain(get)

        def get_nowait() -> Event | None:
            event = up_nowait()
            if event is not None:
                event.value = fn(event.value)
            return event

        return self._chain(get, get_nowait)

    def filter(self, fn: Callable[[Any], Any]) -> Stream:
        """Keep the values for which ``fn(value)`` is true (``fn`` may be async)."""
        up = self._get
        is_async = inspect.iscoroutinefunction(fn)
        release = self._source.release

        clock = self._source.clock

        async def get(timeout: float | None) -> Event | None:
            deadline_ms = None if timeout is None else clock.monotonic_ms() + int(timeout * 1000)
            while True:
                left = None if deadline_ms is None else max(0, deadline_ms - clock.monotonic_ms()) / 1000
                event = await up(left)
                if event is None:
                    return None
                keep = await fn(event.value) if is_async else fn(event.value)
                if keep:
                    return event
                release(event)

        up_nowait = self._nowait
        if is_async or up_nowait is None:
            return self._chain(get)

        def get_nowait() -> Event | None:
            while True:
                event = up_nowait()
                if event is None or fn(event.value):
                    return event
                release(event)

        return self._chain(get, get_nowait)

    def echo(self, *topics: Topic) -> Stream:
        """Also send every value (with its key) to ``topics``."""
        up = self._get

        async def get(timeout: float | None) -> Event | None:
            event = await up(timeout)
            if event is not None:
                for topic in topics:
                    await topic.send(key=event.key, value=event.value, headers=event.headers)
            return event

        return self._chain(get)

    def group_by(self, key: Any, *, name: str | None = None) -> Stream:
        """Re-key the stream and repartition it through ``<app>-<agent>-<name>-repartition``.

        ``key`` is a record field (``Order.user``) or a function of the value. Records with the
        same new key meet in the same partition, so the rest of the agent sees each key in one
        place, in order.
        """
        key_fn, key_name = _key_function(key, name)
        return Stream(self._source.through(self, None, key_fn, key_name), partitions=self._partitions)

    def through(self, topic: Topic) -> Stream:
        """Send the stream to ``topic`` and continue from what was written there."""
        return Stream(self._source.through(self, topic, None, topic.name), partitions=self._partitions)


class _Projected(Generic[T]):
    """``async for`` over a stream, yielding a projection of each event."""

    __slots__ = ("_project", "_stream")

    def __init__(self, stream: Stream, project: Callable[[Event], T]) -> None:
        self._stream = stream
        self._project = project

    def __aiter__(self) -> _Projected[T]:
        return self

    async def __anext__(self) -> T:
        stream = self._stream
        if after_event.get():
            await settle_event()
        stream._source.ack()
        try:
            if stream._nowait is not None:
                event = stream._nowait()
                if event is not None:
                    return self._project(event)
            event = await stream._get(None)
        except StreamEnd:
            raise StopAsyncIteration from None
        assert event is not None
        return self._project(event)
