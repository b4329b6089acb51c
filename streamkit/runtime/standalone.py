"""A producer (and reply consumer) for an app that runs no worker: a plain script's sends.

``await topic.send(...)`` and ``await agent.ask(...)`` in a script that starts no worker
(Faust lets its producer start on first use) reach this module through the port the
package root installs (``topics/ports.py``): the first call opens a log client on the app's broker (the embedded log,
or the worker that owns it, or ``kafka://``) and a producer, on the running event loop.

Nothing is lost when the script ends: outside a worker, ``send`` returns once the log has
acknowledged the record (its future is already resolved), so there is nothing left to flush
when the loop closes. The client is closed when the event loop shuts down: an async
generator started on the loop is finalized by ``loop.shutdown_asyncgens()``, which
``asyncio.run`` calls before closing the loop, so a second ``asyncio.run`` in the same
script opens a fresh client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from streamkit._core.clock import SYSTEM_CLOCK
from streamkit.app.application import App
from streamkit.runtime.replies import ReplyConsumer
from streamkit.runtime.sender import RuntimeSender
from streamkit.topics.topic import Headers, NotRunningError, Sent, Topic
from streamkit.transport.base import LogClient, Producer
from streamkit.transport.connect import open_log_client

logger = logging.getLogger(__name__)

_RUNTIMES: dict[int, ScriptRuntime] = {}  # by id(app); replaced when the loop changed


class ScriptRuntime:
    """The sender and reply consumer of one app in one event loop, outside a worker."""

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.loop = loop
        self.client: LogClient = open_log_client(app.broker, options=app.conf.client_options())
        self._producer: Producer | None = None
        self._runtime_sender: RuntimeSender | None = None
        self.replies = ReplyConsumer(app, self.client)
        self._started = asyncio.Lock()
        self._finalizer: AsyncIterator[None] | None = None
        self.closed = False

    async def start(self) -> None:
        async with self._started:
            if self._runtime_sender is not None:
                return
            await self.client.start()
            producer = self.client.producer()
            await producer.start()
            self._producer = producer
            self._runtime_sender = RuntimeSender(producer, SYSTEM_CLOCK, self._partition_count)
            finalizer = self._close_with_loop()
            await finalizer.__anext__()
            self._finalizer = finalizer  # the loop holds it weakly

    async def _close_with_loop(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        _RUNTIMES.pop(id(self.app), None)
        try:
            await self.replies.aclose()
            if self._producer is not None:
                await self._producer.aclose()
            await self.client.aclose()
        except Exception as exc:  # the loop is going away: tell, do not raise into its shutdown
            logger.warning("closing the producer of app %r failed: %r", self.app.id, exc)

    async def _partition_count(self, topic: Topic) -> int:
        return await self.client.ensure_topic(
            topic.name, topic.partitions or self.app.topic_partitions, topic.config
        )

    # -- the Sender protocol ---------------------------------------------------------------

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
        sender = self._runtime_sender
        assert sender is not None
        ack = await sender.send(
            topic, key=key, value=value, headers=headers, timestamp_ms=timestamp_ms, partition=partition
        )
        await ack  # stored before the script goes on: nothing to flush at exit
        return ack

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
        raise NotRunningError(
            f"cannot send_soon to {topic.name!r} outside a worker: use `await topic.send(...)` in a script"
        )

    async def declare(self, topic: Topic) -> None:
        count = await self._partition_count(topic)
        if self._runtime_sender is not None:
            self._runtime_sender.known_partitions(topic.name, count)


async def attach(app: App) -> ScriptRuntime:
    """The started runtime of ``app`` on the running loop (opened on first use)."""
    loop = asyncio.get_running_loop()
    runtime = _RUNTIMES.get(id(app))
    if runtime is None or runtime.loop is not loop or runtime.closed or runtime.app is not app:
        runtime = _RUNTIMES[id(app)] = ScriptRuntime(app, loop)
    await runtime.start()
    return runtime
