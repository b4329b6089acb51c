"""Where an agent's yielded values go: its sinks (topics, channels, other agents, callables).

The fast path (``forwarder`` when every sink is a topic and the worker runs): per value, the
current event's key and timestamp, the sink's declared value type checked, and the sender's
``send_nowait``: no coroutine unless the producer applies back-pressure. Otherwise each value
goes through ``forward_to_sinks``: ``send`` to topics and agents, a call to callables.
A yielded value of another type than a sink declares is refused as a send's would be: the
record being processed fails (and is dead-lettered), the error naming the sink.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from streamkit.agents.agent import Agent
from streamkit.agents.channel import Channel
from streamkit.agents.stream import Event
from streamkit.app.application import App
from streamkit.runtime.inbox import current_event
from streamkit.runtime.sender import RuntimeSender
from streamkit.topics.topic import Topic

Forward = Callable[[Any], Awaitable[None] | None]


async def _wait_all(waits: list[Awaitable[None]]) -> None:
    for wait in waits:
        await wait


def forwarder(app: App, agent: Agent, topic_sinks: tuple[Topic, ...] | None, sender: RuntimeSender | None) -> Forward:
    """What sends each value ``agent`` yields to its sinks. It returns ``None`` when that is
    done without waiting (the usual case: every sink a topic), else an awaitable the caller
    must await before going on. ``topic_sinks``: the sinks when all are topics, else None."""
    if topic_sinks is None or sender is None:
        return functools.partial(_forward_current, agent)
    sinks = topic_sinks
    send = sender.send_nowait
    get_event = current_event.get
    checks = [check for sink in sinks if (check := sink.value_check) is not None]
    if len(sinks) == 1:
        sink = sinks[0]
        check = checks[0] if checks else None

        def forward_one(value: Any) -> Awaitable[None] | None:
            event = get_event()
            if event is None or app.sender is None:
                return forward_to_sinks(agent, value, event)
            if check is not None:
                check(value)
            return send(sink, event.key, value, event.timestamp)

        return forward_one

    def forward(value: Any) -> Awaitable[None] | None:
        event = get_event()
        if event is None or app.sender is None:
            return forward_to_sinks(agent, value, event)
        for check in checks:
            check(value)
        waits = [w for sink in sinks if (w := send(sink, event.key, value, event.timestamp)) is not None]
        return _wait_all(waits) if waits else None

    return forward


def _forward_current(agent: Agent, value: Any) -> Awaitable[None]:
    return forward_to_sinks(agent, value, current_event.get())


async def forward_to_sinks(agent: Agent, value: Any, event: Event | None) -> None:
    """Send one value to each sink with ``event``'s key and timestamp (the slow path)."""
    key = event.key if event is not None else None
    timestamp = event.timestamp if event is not None else None
    for sink in agent.sinks:
        if isinstance(sink, (Topic, Agent, Channel)):
            await sink.send(key=key, value=value, timestamp=timestamp)
        else:
            result = sink(value)
            if asyncio.iscoroutine(result):
                await result
