"""Wakes long-polling fetches when data is appended to a partition they wait on.

``on_append`` is registered as the log's append listener and may be called from any thread
(appends run on the event loop or, for fsyncing topics, in worker threads). Waiters register
*before* they re-read the log, so an append that lands between their read and their wait
still wakes them: no wakeup is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable

from streamkit._core.types import TopicPartition


class AppendNotifier:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def on_append(self, tp: TopicPartition, high_watermark: int) -> None:
        if tp not in self._waiters:  # the common case: nobody waits on this partition
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(tp)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the broker is shutting down
                self._loop.call_soon_threadsafe(self._wake, tp)

    def _wake(self, tp: TopicPartition) -> None:
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    def register(self, tps: Iterable[TopicPartition]) -> asyncio.Future[None]:
        """A future resolved by the next append to any of ``tps``; pass it to ``discard``."""
        fut: asyncio.Future[None] = self._loop.create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        return fut

    def discard(self, fut: asyncio.Future[None], tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            waiting = self._waiters.get(tp)
            if waiting is not None:
                waiting.discard(fut)
                if not waiting:
                    del self._waiters[tp]

    def wake_all(self) -> None:
        for tp in list(self._waiters):
            self._wake(tp)
