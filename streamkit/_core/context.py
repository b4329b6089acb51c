"""The event being processed, as a context variable every layer may read.

The runtime sets it for each record it hands to an agent; sends take the event's timestamp
from it (event time flows downstream) and tables take the event's partition (a table key
lives in the partition of the event that wrote it). Kept in ``_core`` so that ``tables/``
reads it without importing the runtime or the stream layer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Protocol


class EventContext(Protocol):
    """What lower layers read of the current event."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> Any: ...


current_event: ContextVar[Any] = ContextVar("streamkit_current_event", default=None)


# Work that processing an event left to be awaited before the event counts as processed (a
# windowed table's ``on_window_close`` callbacks, which may be async while ``table[k] += 1`` is
# not): the stream awaits it, in order, when the agent asks for the next event. Set per agent
# task by the first one to defer work in it, so no two tasks share a list.
after_event: ContextVar[list[Callable[[], Awaitable[Any]]] | None] = ContextVar(
    "streamkit_after_event", default=None
)


def defer(work: Callable[[], Awaitable[Any]]) -> bool:
    """Run ``work`` before the current event counts as processed; False outside an event
    (then nothing will await it: the caller runs it some other way)."""
    if current_event.get() is None:
        return False
    pending = after_event.get()
    if pending is None:
        pending = []
        after_event.set(pending)
    pending.append(work)
    return True


async def settle_event() -> None:
    """Await what processing the current event deferred (``defer``), in order."""
    pending = after_event.get()
    while pending:
        work = pending.pop(0)
        await work()
