"""Topology discovery: which repartition and ``through`` topics each agent reads.

An agent builds its operator chain before its first ``async for`` step, so running it once
against a probe source, stopped at the first read, reveals every ``group_by``/``through``
it uses. The worker creates and subscribes those topics before consuming, as Kafka Streams
does from its declared topology.

Side effects: while the probe runs, the app's sender is a ``DiscardingSender``: a
``topic.send``/``agent.send``/``cast`` before the loop is accepted and thrown away (its
acknowledgement says partition and offset -1), so nothing the probe runs reaches the log,
and the worker installs its real sender only afterwards. Anything else the code before the
agent's loop does (a print, a write to a database, a global it changes) happens twice at
start-up, once for the probe and once for real: keep such code idempotent, or move it into
an ``@app.task``. The probe runs no timers or tasks and writes no state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from streamkit._core.clock import SYSTEM_CLOCK
from streamkit.agents.agent import Agent
from streamkit.agents.stream import Event, KeyFn, Source, Stream
from streamkit.topics.topic import Headers, Sent, Topic

logger = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 2.0


class _ProbeStop(BaseException):
    """Stops the probed agent at its first read (a BaseException so ``except Exception`` in
    user code cannot swallow it)."""


@dataclass(frozen=True, slots=True)
class Hop:
    """One ``through``: to ``topic`` (None: the agent's repartition topic ``name``)."""

    topic: Topic | None
    name: str
    rekeys: bool


@dataclass(frozen=True, slots=True)
class DiscardedSend:
    """The acknowledgement of a send the probe threw away."""

    topic: str
    partition: int = -1
    offset: int = -1
    timestamp: int = -1


class DiscardingSender:
    """A ``Sender`` that records nothing: what an agent sends while it is probed."""

    def __init__(self) -> None:
        self.discarded = 0

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
        self.discarded += 1
        future: asyncio.Future[Sent] = asyncio.get_running_loop().create_future()
        future.set_result(DiscardedSend(topic.name))
        return future

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
        self.discarded += 1

    async def declare(self, topic: Topic) -> None:
        return None  # the worker creates topics after the probe


class _ProbeSource:
    clock = SYSTEM_CLOCK

    def __init__(self, found: list[Hop]) -> None:
        self._found = found

    async def get(self, timeout: float | None) -> Event | None:
        raise _ProbeStop

    def get_nowait(self) -> Event | None:
        return None

    def ack(self) -> None:
        return None

    def release(self, event: Event) -> None:
        return None

    def through(self, upstream: Stream, topic: Topic | None, key: KeyFn | None, name: str) -> Source:
        self._found.append(Hop(topic, name, key is not None))
        return _ProbeSource(self._found)


async def discover(agent: Agent) -> list[Hop]:
    """The hops ``agent`` opens before its first read; its sends meanwhile are discarded."""
    found: list[Hop] = []
    app = agent.app
    previous, app.sender = app.sender, DiscardingSender()
    try:
        await _run_probe(agent, found)
    finally:
        app.sender = previous
    return found


async def _run_probe(agent: Agent, found: list[Hop]) -> None:
    result = agent(Stream(_ProbeSource(found)))
    try:
        if agent.is_generator:
            await asyncio.wait_for(result.__anext__(), PROBE_TIMEOUT_S)
        else:
            await asyncio.wait_for(result, PROBE_TIMEOUT_S)
    except (_ProbeStop, StopAsyncIteration, TimeoutError):
        pass
    except Exception as exc:
        logger.warning("agent %s raised while its topology was probed: %r", agent.name, exc)
    finally:
        if agent.is_generator:
            with contextlib.suppress(_ProbeStop, RuntimeError):
                await result.aclose()
