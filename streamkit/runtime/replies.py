"""``ReplyConsumer``: the asking side of agent RPC (the ``Replies`` port of ``replies.py``).

Per reply topic, one loop reads partition 0 with a group-less reader from the high
watermark it had when the topic was first listened to, so a reply written after ``listen``
returns is read and older replies (a reused ``reply_to``) are not. Each reply resolves the
promise of its correlation id; a reply nobody waits for (an asker that gave up, another
process sharing the topic) is dropped.

The loop reads only while some promise waits: with none, it sleeps on an event that the
next promise sets. While promises wait and the topic has nothing new, it looks again after
``POLL_FIRST_S``, doubling up to ``POLL_MAX_S`` (a Kafka fetch waits on the broker meanwhile;
the embedded log answers at once), and from ``POLL_FIRST_S`` again after a reply or a new
request: a reply is seen within a few milliseconds of being written.

Under exactly-once (``app.exactly_once``) replies are written in the answering task's
transaction, so they are read committed: a reply of a transaction that aborts (its task was
fenced or lost, and the request is processed again) never resolves a promise; the reply of
the run that commits does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from streamkit._core.types import TopicPartition
from streamkit.agents.replies import decode_response, reply_topic
from streamkit.app.application import App
from streamkit.transport.base import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    LogClient,
    PartitionReader,
    TransportError,
)

logger = logging.getLogger(__name__)
POLL_FIRST_S = 0.0005
POLL_MAX_S = 0.02
READ_MAX_RECORDS = 1000


class ReplyConsumer:
    def __init__(self, app: App, client: LogClient) -> None:
        self.app = app
        self._client = client
        self._reader: PartitionReader | None = None
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._wanted = asyncio.Event()
        self._loops: dict[str, asyncio.Task[None]] = {}
        self._listening: dict[str, asyncio.Future[None]] = {}
        self.replies = 0  # replies that resolved a promise
        self._asked = 0  # promises made: a new one makes the readers look again soon

    async def listen(self, reply_to: str) -> None:
        started = self._listening.get(reply_to)
        if started is None:
            started = self._listening[reply_to] = asyncio.get_running_loop().create_future()
            try:
                offset = await self._open(reply_to)
            except BaseException as exc:
                del self._listening[reply_to]
                started.set_exception(exc)
                started.exception()  # retrieved: this caller raises it
                raise
            task = asyncio.ensure_future(self._read(reply_to, offset))
            task.set_name(f"streamkit:replies:{reply_to}")
            self._loops[reply_to] = task
            started.set_result(None)
        await asyncio.shield(started)

    async def _open(self, reply_to: str) -> int:
        topic = reply_topic(self.app, reply_to)
        await self._client.ensure_topic(topic.name, 1, topic.config)
        if self._reader is None:
            self._reader = self._client.reader(
                isolation_level=READ_COMMITTED if self.app.exactly_once else READ_UNCOMMITTED
            )
        _start, high_watermark = await self._reader.bounds(TopicPartition(reply_to, 0))
        return high_watermark

    def promise(self, correlation_id: str) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        self._asked += 1
        self._wanted.set()
        return future

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    async def _read(self, reply_to: str, offset: int) -> None:
        tp = TopicPartition(reply_to, 0)
        reader = self._reader
        assert reader is not None
        delay = POLL_FIRST_S
        asked = self._asked
        while True:
            if not self._waiting:
                self._wanted.clear()
                await self._wanted.wait()
            try:
                chunk = await reader.read(tp, offset, READ_MAX_RECORDS)
            except TransportError as exc:
                logger.warning("reading replies from %s failed, retrying: %s", reply_to, exc)
                await asyncio.sleep(0.5)
                continue
            for record in chunk.records:
                reply = decode_response(record.value)
                if reply is None:
                    logger.warning("not a reply at %s offset %d: dropped", reply_to, record.offset)
                    continue
                future = self._waiting.pop(reply[0], None)
                if future is not None and not future.done():
                    future.set_result(reply[1])
                    self.replies += 1
            if chunk.records or asked != self._asked:
                delay, asked = POLL_FIRST_S, self._asked
            if chunk.next_offset == offset:
                await asyncio.sleep(delay)
                delay = min(POLL_MAX_S, delay * 2)
            offset = chunk.next_offset

    async def aclose(self) -> None:
        for task in self._loops.values():
            task.cancel()
        await asyncio.gather(*self._loops.values(), return_exceptions=True)
        self._loops.clear()
        self._listening.clear()
        for future in self._waiting.values():
            future.cancel()
        self._waiting.clear()
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.aclose()  # a Kafka reader's close handles aiokafka's fetcher (``kafka_tools.py``)
