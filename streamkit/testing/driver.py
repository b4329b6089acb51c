"""``AppDriver``: the real runtime on a throw-away embedded log with a manual clock."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from datetime import datetime
from typing import Any

from streamkit._core.clock import ManualClock
from streamkit._core.errors import StreamkitError
from streamkit.agents.stream import Event
from streamkit.app.application import App
from streamkit.runtime.worker import Worker
from streamkit.topics.topic import Headers, Sent, Topic
from streamkit.transport.embedded.client import EmbeddedLogClient

DEFAULT_START_MS = 1_700_000_000_000


class NotSettledError(StreamkitError):
    """The app kept working past ``process``'s timeout."""


class AppDriver:
    def __init__(
        self,
        app: App,
        *,
        start_ms: int = DEFAULT_START_MS,
        data_dir: str | None = None,
        state_dir: str | None = None,
    ) -> None:
        """``data_dir``: the log's directory (default: a temporary one, deleted at exit);
        ``state_dir``: the tables' local state (default: beside the log, ``<data_dir>.state``)."""
        self.app = app
        self.clock = ManualClock(start_ms)
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="streamkit-test-")
        self.state_dir = state_dir or f"{self.data_dir.rstrip(os.sep)}.state"
        self._own_state = state_dir is None and data_dir is None
        self.client = EmbeddedLogClient(self.data_dir, clock=self.clock)
        self.worker = Worker(app, client=self.client, clock=self.clock, run_timers=False, state_dir=self.state_dir)
        self._reader_seq = 0

    async def __aenter__(self) -> AppDriver:
        try:
            await self.worker.start()
        except BaseException:
            await self.__aexit__(None, None, None)  # a start that fails leaves nothing open
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.worker.stop()
        finally:
            if self._own_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)
            if self._own_state:
                shutil.rmtree(self.state_dir, ignore_errors=True)

    async def send(
        self,
        topic: Topic,
        value: Any = None,
        *,
        key: Any = None,
        headers: Headers | None = None,
        timestamp: int | datetime | None = None,
        partition: int | None = None,
    ) -> Sent:
        """Produce one record and wait for the log to acknowledge it."""
        pending = await topic.send(key=key, value=value, headers=headers, timestamp=timestamp, partition=partition)
        return await pending

    async def process(self, timeout: float = 10.0) -> None:
        """Run until every record in the log was processed and everything sent is stored.

        A commit writes the tables' changes to their changelogs, which pipelines over a
        table's changes (``to_stream``, table joins) read in turn: so this commits and looks
        again until a commit leaves nothing new to process and no table holds a change that
        is not in its changelog yet. (A commit sends the tables' changes one table after
        another; a pipeline reading a changelog this commit wrote may change a table the
        commit had already sent, as a table-table join does, and that change waits for the
        next commit: the log alone does not show it.)

        Records a ``take(..., within=)`` batch holds are not processed until the batch is cut:
        at ``max_`` values, or when ``advance`` moves the clock ``within`` past its first value.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            settled_rounds = 0
            while settled_rounds < 3:
                for _ in range(5):
                    await asyncio.sleep(0)
                if await self.worker.settle():
                    settled_rounds += 1
                else:
                    settled_rounds = 0
                    await asyncio.sleep(0.001)
                if loop.time() > deadline:
                    raise NotSettledError(f"the app was still busy after {timeout} s")
            await self.worker.commit()
            if await self.worker.settle() and not self._unwritten_changes():
                return

    def _unwritten_changes(self) -> bool:
        """Whether a table partition of this worker changed since the last commit."""
        for table in self.worker.state_manager.tables:
            for partition in table.held_partitions:
                state = table.partition_state(partition)
                if state is not None and state.dirty:
                    return True
        return False

    async def advance(self, seconds: float) -> None:
        """Move the clock forward, fire the timers that came due, and process."""
        self.clock.advance(int(seconds * 1000))
        self.worker.clock_advanced()
        await self.worker.timers.run_due()
        await self.process()

    async def read(self, topic: Topic) -> list[Event]:
        """Every record in ``topic`` so far, decoded with the topic's serializers."""
        self._reader_seq += 1
        consumer = self.client.consumer(f"__streamkit-testing-reader-{self._reader_seq}")
        consumer.subscribe([topic.name], _NoRebalance())
        await consumer.start()
        events: list[Event] = []
        try:
            while True:
                fetched = await consumer.getmany(0, 100_000)
                if not fetched:
                    break
                for tp, records in fetched.items():
                    for r in records:
                        events.append(
                            Event(
                                tp.topic,
                                tp.partition,
                                r.offset,
                                r.timestamp,
                                topic.key_serde.loads(r.key),
                                topic.value_serde.loads(r.value),
                                r.headers,
                            )
                        )
        finally:
            await consumer.aclose()
        events.sort(key=lambda e: (e.partition, e.offset))
        return events

    async def dead_letters(self) -> list[Event]:
        return await self.read(self.app.dlq_topic)


class _NoRebalance:
    async def on_partitions_revoked(self, revoked: set[Any]) -> None:
        return None

    async def on_partitions_assigned(self, assigned: set[Any]) -> None:
        return None
