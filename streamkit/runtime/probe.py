"""Topology discovery: which repartition and ``through`` topics each agent reads.

An agent builds its operator chain before its first ``async for`` step, so running it once
against a probe source, stopped at the first read, reveals every ``group_by``/``through``
it uses. The worker creates and subscribes those topics before consuming, as Kafka Streams
does from its declared topology. Code before the agent's loop therefore runs once more at
startup; it must not have side effects that matter.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from streamkit.agents import Agent
from streamkit.streams import Event, KeyFn, Source, Stream
from streamkit.topics import Topic

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


class _ProbeSource:
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
    found: list[Hop] = []
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
            try:
                await result.aclose()
            except (_ProbeStop, RuntimeError):
                pass
    return found
