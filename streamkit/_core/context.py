"""The event being processed, as a context variable every layer may read.

The runtime sets it for each record it hands to an agent; sends take the event's timestamp
from it (event time flows downstream) and tables take the event's partition (a table key
lives in the partition of the event that wrote it). Kept in ``_core`` so that ``tables/``
reads it without importing the runtime or the stream layer.
"""

from __future__ import annotations

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
