"""``@app.agent``: an async function over a ``Stream``, run once per input partition.

The function is either a coroutine function (``async def f(stream): async for v in stream:``)
or an async generator function whose ``yield``ed values go to the agent's sinks (topics,
other agents, or callables). ``concurrency`` runs that many instances per partition; they
share the partition's records, so only with ``concurrency=1`` does an agent see a
partition's records strictly in order.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from types import GenericAlias
from typing import TYPE_CHECKING, Any, Union

from streamkit._core.errors import ConfigError
from streamkit.streams import Stream
from streamkit.topics import Headers, Sent, Topic

if TYPE_CHECKING:
    from streamkit.app import App

AgentFn = Callable[[Stream], Any]
Sink = Union[Topic, "Agent", Callable[[Any], Any]]


class Agent:
    # Subscriptable as Faust's (``Agent[Order]`` in annotations); a runtime alias only.
    def __class_getitem__(cls, item: Any) -> GenericAlias:
        return GenericAlias(cls, item)

    def __init__(
        self,
        app: App,
        fn: AgentFn,
        topics: Sequence[Topic],
        *,
        name: str,
        sinks: Sequence[Sink] = (),
        concurrency: int = 1,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"agent {name!r}: concurrency must be at least 1")
        if not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
            raise ConfigError(f"agent {name!r} must be an async function (async def)")
        self.app = app
        self.fn = fn
        self.name = name
        self.topics = list(topics)
        self.sinks = list(sinks)
        self.concurrency = concurrency
        self.is_generator = inspect.isasyncgenfunction(fn)
        self.__doc__ = fn.__doc__

    def __repr__(self) -> str:
        return f"<Agent {self.name!r} topics={[t.name for t in self.topics]}>"

    def __call__(self, stream: Stream) -> Any:
        return self.fn(stream)

    def repartition_topic_name(self, key_name: str) -> str:
        return f"{self.app.id}-{self.name}-{key_name}-repartition"

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        timestamp: int | datetime | None = None,
        partition: int | None = None,
    ) -> Awaitable[Sent]:
        """Send a record to the agent's (first) input topic."""
        return await self.topics[0].send(
            key=key, value=value, headers=headers, timestamp=timestamp, partition=partition
        )

    async def cast(self, value: Any = None, *, key: Any = None, headers: Headers | None = None) -> None:
        """Send without waiting for the log's acknowledgement."""
        await self.topics[0].send(key=key, value=value, headers=headers)
