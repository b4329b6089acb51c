"""The runtime's ``Sender``: serialize, choose the partition, produce.

Partitioning follows Kafka's clients: a keyed record goes to ``murmur2(key bytes) % n``; an
unkeyed one to a sticky partition that changes every ``STICKY_BATCH`` records, so unkeyed
output still forms large batches. Without an explicit timestamp a record takes the timestamp
of the event being processed (event time flows downstream), else the clock's time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from streamkit._core.clock import Clock
from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit.runtime.inbox import current_event
from streamkit.topics.topic import Headers, Sent, Topic
from streamkit.transport.base import Header, Producer

STICKY_BATCH = 1000
_KEY_CACHE_LIMIT = 100_000


def normalize_headers(headers: Headers | None) -> Sequence[Header]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[Header] = []
    for name, value in items:
        if isinstance(value, str):
            out.append((name, value.encode()))
        else:
            out.append((name, value))
    return out


class RuntimeSender:
    def __init__(
        self,
        producer: Producer,
        clock: Clock,
        partition_count: Callable[[Topic], Awaitable[int]],
    ) -> None:
        self._producer = producer
        self._clock = clock
        self._partition_count = partition_count
        self._counts: dict[str, int] = {}
        self._key_partitions: dict[int, dict[bytes, int]] = {}  # partition count -> key -> partition
        self._sticky: dict[str, list[int]] = {}
        self._placed: dict[str, dict[bytes, int]] = {}  # topic -> its key -> partition cache
        self._soon: set[asyncio.Future[Any]] = set()  # send_soon's sends waiting for a partition count

    def known_partitions(self, topic: str, count: int) -> None:
        self._counts[topic] = count
        self._placed[topic] = self._key_cache(count)

    async def send(
        self,
        topic: Topic,
        *,
        key: Any,
        value: Any,
        headers: Headers | None,
        timestamp_ms: int | None,
        partition: int | None,
    ) -> Awaitable[Sent]:
        key_bytes = topic.key_serde.dumps(key)
        value_bytes = topic.value_serde.dumps(value)
        count = self._counts.get(topic.name)
        if count is None:
            count = await self._partition_count(topic)
            self.known_partitions(topic.name, count)
        partition = self._place(topic.name, key_bytes, count, partition)
        if timestamp_ms is None:
            event = current_event.get()
            timestamp_ms = event.timestamp if event is not None else self._clock.now_ms()
        return await self._producer.send(
            topic.name,
            key_bytes,
            value_bytes,
            partition=partition,
            headers=normalize_headers(headers) if headers else (),
            timestamp_ms=timestamp_ms,
        )

    def send_soon(
        self,
        topic: Topic,
        *,
        key: Any,
        value: Any,
        headers: Headers | None,
        timestamp_ms: int | None,
        partition: int | None,
    ) -> None:
        """Buffer one record now, from plain (not async) code: it is in the producer before
        this returns, so the next commit's flush covers it (Faust's ``send_soon``)."""
        if timestamp_ms is None:
            event = current_event.get()
            timestamp_ms = event.timestamp if event is not None else self._clock.now_ms()
        wait = self.send_nowait(topic, key, value, timestamp_ms, partition, normalize_headers(headers))
        if wait is not None:  # the partition count is not known yet: send it as soon as it is
            task = asyncio.ensure_future(wait)
            self._soon.add(task)
            task.add_done_callback(self._soon.discard)

    async def declare(self, topic: Topic) -> None:
        """Create ``topic`` unless it exists (Faust's ``maybe_declare``)."""
        self.known_partitions(topic.name, await self._partition_count(topic))

    def send_nowait(
        self,
        topic: Topic,
        key: Any,
        value: Any,
        timestamp_ms: int,
        partition: int | None = None,
        headers: Sequence[Header] = (),
    ) -> Awaitable[None] | None:
        """``send`` for the engine's per-record paths (an agent's yielded values, a
        repartitioning pump): no coroutine, no acknowledgement (failures reach the commit
        protocol through ``flush``). ``headers`` are already normalized.

        Returns ``None``, or an awaitable to wait on before sending more: the partition count
        is not known yet, or the producer applies back-pressure.
        """
        name = topic.name
        placed = self._placed.get(name)
        if placed is None:
            return self._send_later(topic, key, value, timestamp_ms, partition, headers)
        key_bytes = topic.key_serde.dumps(key)
        if partition is None:
            partition = placed.get(key_bytes) if key_bytes is not None else None
            if partition is None:
                partition = self._choose(name, key_bytes, self._counts[name])
        else:
            partition = self._place(name, key_bytes, self._counts[name], partition)
        return self._producer.send_nowait(
            name, partition, key_bytes, topic.value_serde.dumps(value), timestamp_ms, headers
        )

    def place(self, topic: Topic, key: Any) -> int | None:
        """The partition ``send_nowait`` would give a record keyed ``key`` (None: the topic's
        partition count is not known yet)."""
        name = topic.name
        placed = self._placed.get(name)
        if placed is None:
            return None
        key_bytes = topic.key_serde.dumps(key)
        partition = placed.get(key_bytes) if key_bytes is not None else None
        return self._choose(name, key_bytes, self._counts[name]) if partition is None else partition

    async def _send_later(
        self, topic: Topic, key: Any, value: Any, timestamp_ms: int, partition: int | None, headers: Sequence[Header]
    ) -> None:
        await self.send(
            topic, key=key, value=value, headers=list(headers), timestamp_ms=timestamp_ms, partition=partition
        )

    def _place(self, topic: str, key_bytes: bytes | None, count: int, partition: int | None) -> int:
        if partition is None:
            return self._choose(topic, key_bytes, count)
        if not 0 <= partition < count:
            raise ConfigError(f"topic {topic!r} has no partition {partition} (it has {count})")
        return partition

    def _choose(self, topic: str, key: bytes | None, count: int) -> int:
        if count == 1:
            return 0
        if key is None:
            sticky = self._sticky.get(topic)
            if sticky is None or sticky[1] >= STICKY_BATCH:
                sticky = self._sticky[topic] = [random.randrange(count), 0]
            sticky[1] += 1
            return sticky[0]
        cache = self._key_cache(count)
        found = cache.get(key)
        if found is None:
            if len(cache) >= _KEY_CACHE_LIMIT:
                cache.clear()
            found = cache[key] = partition_for_key(key, count)
        return found

    def _key_cache(self, count: int) -> dict[bytes, int]:
        cache = self._key_partitions.get(count)
        if cache is None:
            cache = self._key_partitions[count] = {}
        return cache
