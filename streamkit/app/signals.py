"""Signals an app sends as its worker runs (Faust's ``app.on_partitions_assigned`` and kin).

    >>> import streamkit as sk
    >>> app = sk.App("docs-signals")
    >>> @app.on_partitions_assigned.connect
    ... async def assigned(app, assigned, **kwargs):
    ...     print(sorted(str(tp) for tp in assigned))
    >>> len(app.on_partitions_assigned.receivers)
    1

A receiver is called with the app first and keyword arguments after it; it may be async. A
receiver that raises is logged and the others still run: a signal never stops the worker.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


class Signal:
    def __init__(self, name: str) -> None:
        self.name = name
        self.receivers: list[Callable[..., Any]] = []

    def __repr__(self) -> str:
        return f"<Signal {self.name} ({len(self.receivers)} receivers)>"

    def connect(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Add ``fn`` as a receiver (usable as a decorator); returns ``fn``."""
        self.receivers.append(fn)
        return fn

    def disconnect(self, fn: Callable[..., Any]) -> None:
        if fn in self.receivers:
            self.receivers.remove(fn)

    async def send(self, sender: Any, **kwargs: Any) -> None:
        for receiver in list(self.receivers):
            try:
                result = receiver(sender, **kwargs)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("a receiver of %s failed", self.name)
