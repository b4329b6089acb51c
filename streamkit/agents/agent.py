"""``@app.agent``: an async function over a ``Stream``, run once per input partition.

The function is either a coroutine function (``async def f(stream): async for v in stream:``)
or an async generator function whose ``yield``ed values go to the agent's sinks (topics,
channels, other agents, or callables) and answer RPC requests (``replies.py``).
``concurrency`` runs that many instances per partition; they share the partition's records,
so only with ``concurrency=1`` does an agent see a partition's records strictly in order.

An agent reads topics (one task per partition number) or one in-memory channel
(``app.channel()``: one task for the whole channel). ``@app.agent()`` with neither gets
its own topic, named as Faust names it so a Faust app and a streamkit app share it:
``{app id}-{name}``, the name being ``name=`` when given, else the function's module and
name (``shop.agents.count``; a function of the script run as ``__main__`` takes the
script's module name, as Faust resolves it).

RPC: ``ask`` sends a request (the value, with Faust's reply headers) and waits for the
value the agent yields while processing it; ``map``/``kvmap`` give the replies of many
requests as they come, ``join``/``kvjoin`` all of them in the order asked.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from types import GenericAlias
from typing import TYPE_CHECKING, Any, Union

from streamkit._core.errors import ConfigError
from streamkit.agents.channel import Channel
from streamkit.agents.replies import Replies, request_headers
from streamkit.agents.stream import Stream
from streamkit.topics import ports
from streamkit.topics.topic import Headers, Sent, Topic

if TYPE_CHECKING:
    from streamkit.app.application import App

AgentFn = Callable[[Stream], Any]
Sink = Union[Topic, Channel, "Agent", Callable[[Any], Any]]


def faust_agent_name(fn: Any) -> str:
    """The name Faust gives an agent without ``name=``: ``module.function``; for the script
    run as ``__main__``, the script's package folders (innermost first, as Faust) and stem."""
    module = getattr(fn, "__module__", None) or "__main__"
    if module == "__main__":
        module = _main_module_name()
    return f"{module}.{fn.__name__}"


def _main_module_name() -> str:
    filename = getattr(sys.modules.get("__main__"), "__file__", None)
    if not filename:
        return "__main__"
    path = Path(filename).absolute()
    # Faust lists the package folders from the innermost out (``pkg/sub/app.py`` is
    # ``sub.pkg.app``); the same order here, so both name the topic alike.
    packages = []
    folder = path.parent
    while (folder / "__init__.py").exists():
        packages.append(folder.stem)
        folder = folder.parent
    return ".".join([*packages, path.stem])


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
        channel: Channel | None = None,
        isolated_partitions: bool = False,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"agent {name!r}: concurrency must be at least 1")
        if isolated_partitions and concurrency > 1:
            raise ConfigError(f"agent {name!r}: concurrency must be 1 with isolated_partitions (as in Faust)")
        if not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
            raise ConfigError(f"agent {name!r} must be an async function (async def)")
        if channel is not None and topics:
            raise ConfigError(f"agent {name!r} reads a channel or topics, not both")
        self.app = app
        self.fn = fn
        self.name = name
        self.topics = list(topics)
        self.in_channel = channel  # the in-memory channel it reads, if not topics
        self.sinks = list(sinks)
        self.concurrency = concurrency
        # One instance per partition, as Faust's isolated_partitions: what every agent over
        # topics gets here (a task per partition number); kept to report it.
        self.isolated_partitions = isolated_partitions
        self.is_generator = inspect.isasyncgenfunction(fn)
        self.__doc__ = fn.__doc__

    def __repr__(self) -> str:
        if self.in_channel is not None:
            return f"<Agent {self.name!r} channel={self.in_channel!r}>"
        return f"<Agent {self.name!r} topics={[t.name for t in self.topics]}>"

    def __call__(self, stream: Stream) -> Any:
        return self.fn(stream)

    @property
    def channel(self) -> Topic | Channel:
        """What the agent reads (Faust's ``agent.channel``): its first topic, or its channel."""
        return self.in_channel if self.in_channel is not None else self.topics[0]

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
        reply_to: str | Topic | Agent | None = None,
        correlation_id: str | None = None,
    ) -> Awaitable[Sent]:
        """Send a record to what the agent reads (its first topic, or its channel); with
        ``reply_to``, as an RPC request whose reply goes to that topic."""
        if reply_to is not None:
            headers = request_headers(headers, _topic_name(reply_to), correlation_id or str(uuid.uuid4()))
        return await self.channel.send(
            key=key, value=value, headers=headers, timestamp=timestamp, partition=partition
        )

    async def cast(
        self,
        value: Any = None,
        *,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | datetime | None = None,
    ) -> None:
        """Send without waiting for a reply (Faust's RPC ``cast``)."""
        await self.send(key=key, value=value, headers=headers, partition=partition, timestamp=timestamp)

    # -- RPC -------------------------------------------------------------------------------

    async def _replies(self, reply_to: str | Topic | Agent | None) -> tuple[Replies, str]:
        """The reply consumer (the worker's, else a script's) listening on the reply topic."""
        name = _topic_name(reply_to or self.app.reply_to)
        replies = self.app.replies
        if replies is None:
            # As topics' sends from a script: the runtime, through the port it installed.
            replies = (await ports.attach_script(self.app)).replies
        assert replies is not None
        await replies.listen(name)
        return replies, name

    async def _request(
        self, replies: Replies, reply_to: str, key: Any, value: Any, **options: Any
    ) -> tuple[str, asyncio.Future[Any]]:
        correlation_id = options.pop("correlation_id", None) or str(uuid.uuid4())
        promise = replies.promise(correlation_id)
        headers = request_headers(options.pop("headers", None), reply_to, correlation_id)
        try:
            await self.channel.send(key=key, value=value, headers=headers, **options)
        except BaseException:
            replies.forget(correlation_id)
            raise
        return correlation_id, promise

    async def ask(
        self,
        value: Any = None,
        *,
        key: Any = None,
        partition: int | None = None,
        timestamp: int | datetime | None = None,
        headers: Headers | None = None,
        reply_to: str | Topic | Agent | None = None,
        correlation_id: str | None = None,
    ) -> Any:
        """Send ``value`` to the agent and return what it yields while processing it.

        The reply comes through ``reply_to`` (default ``app.conf.reply_to``); the agent must
        be an async generator (one that ``yield``s), in this app or any other, Faust's too.
        """
        replies, name = await self._replies(reply_to)
        correlation_id, promise = await self._request(
            replies, name, key, value,
            partition=partition, timestamp=timestamp, headers=headers, correlation_id=correlation_id,
        )
        try:
            return await promise
        finally:
            replies.forget(correlation_id)

    async def kvmap(
        self,
        items: Iterable[tuple[Any, Any]] | AsyncIterable[tuple[Any, Any]],
        reply_to: str | Topic | Agent | None = None,
    ) -> AsyncIterator[Any]:
        """Ask for each ``(key, value)``; yield the replies as they come."""
        replies, name = await self._replies(reply_to)
        pending: list[tuple[str, asyncio.Future[Any]]] = []
        try:
            async for key, value in _aiter(items):
                pending.append(await self._request(replies, name, key, value))
            for next_reply in asyncio.as_completed([promise for _cid, promise in pending]):
                yield await next_reply
        finally:
            for correlation_id, _promise in pending:
                replies.forget(correlation_id)

    async def map(
        self,
        values: Iterable[Any] | AsyncIterable[Any],
        key: Any = None,
        reply_to: str | Topic | Agent | None = None,
    ) -> AsyncIterator[Any]:
        """Ask for each value (all with ``key``); yield the replies as they come."""
        async for reply in self.kvmap(((key, value) async for value in _aiter(values)), reply_to):
            yield reply

    async def kvjoin(
        self,
        items: Iterable[tuple[Any, Any]] | AsyncIterable[tuple[Any, Any]],
        reply_to: str | Topic | Agent | None = None,
    ) -> list[Any]:
        """Ask for each ``(key, value)``; the replies in the order asked, once all came."""
        replies, name = await self._replies(reply_to)
        pending: list[tuple[str, asyncio.Future[Any]]] = []
        try:
            async for key, value in _aiter(items):
                pending.append(await self._request(replies, name, key, value))
            return list(await asyncio.gather(*(promise for _cid, promise in pending)))
        finally:
            for correlation_id, _promise in pending:
                replies.forget(correlation_id)

    async def join(
        self,
        values: Iterable[Any] | AsyncIterable[Any],
        key: Any = None,
        reply_to: str | Topic | Agent | None = None,
    ) -> list[Any]:
        """Ask for each value (all with ``key``); the replies in the order asked."""
        return await self.kvjoin(((key, value) async for value in _aiter(values)), reply_to)


def _topic_name(target: str | Topic | Agent | Channel) -> str:
    if isinstance(target, Agent):
        target = target.channel
    if isinstance(target, Channel):
        raise ConfigError("a channel cannot take replies: it has no name (reply_to needs a topic)")
    if isinstance(target, Topic):
        return target.name
    return target


async def _aiter(items: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item
