"""The embedded driver's client: the commit log in this process, no sockets (``file://DIR``).

The process that opens the data directory owns it (``LogManager`` takes its lock). With
``serve`` (a worker) it also serves the log over the wire on a loopback port recorded in
``<dir>/.owner`` (``transport/serving.py``), and its consumers then join their groups on that
broker's coordinator beside members in other processes (``consumer.py``).

The client opens the log, wakes its consumers when a partition is appended to, and hands out
the producers, consumers and readers of this package. For transactions it holds the producer
state of every partition and the transaction coordinator: the broker's when it serves the
directory, else its own, recovered first (a transaction a killed process left open is
aborted), so read_committed readers here and over the wire see the same thing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.types import TopicPartition
from streamkit.log.errors import LogError
from streamkit.log.groups.coordinator import GroupCoordinator
from streamkit.log.groups.messages import OFFSET_METADATA_MAX_BYTES
from streamkit.log.manager import LogManager
from streamkit.log.producers import ProducerIdAllocator, ProducerStates
from streamkit.log.txn import TransactionCoordinator
from streamkit.transport.base import TransportError, check_isolation_level
from streamkit.transport.embedded.consumer import EmbeddedConsumer
from streamkit.transport.embedded.producer import EmbeddedProducer
from streamkit.transport.embedded.reader import EmbeddedReader
from streamkit.transport.embedded.transactional import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    EmbeddedTransactionalProducer,
)


class EmbeddedLogClient:
    """A ``LogClient`` over a data directory opened in this process."""

    def __init__(
        self,
        data_dir: str,
        *,
        url: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        default_partitions: int = 1,
        serve: bool = False,
    ) -> None:
        self.data_dir = data_dir
        # ``serve``: this process owns the directory for a while (a worker), so it also
        # serves the log over the wire on a loopback port recorded in ``<dir>/.owner``; other
        # processes pointed at the directory (CLI tools) then go through it.
        self._serve = serve
        self._broker: Any = None
        self.url = url or f"file://{data_dir}"
        self.clock = clock
        self._default_partitions = default_partitions
        self._log: LogManager | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._consumers: list[EmbeddedConsumer] = []
        self._producer_states: ProducerStates | None = None
        self._coordinator: TransactionCoordinator | None = None

    async def producer_states(self) -> ProducerStates:
        """The producer state of every partition: the broker's when this process serves the
        directory, else this client's own (read_committed readers and transactional appends
        must share one)."""
        if self._broker is not None:
            states: ProducerStates = self._broker.producers
            return states
        if self._producer_states is None:
            log = self.log
            self._producer_states = await asyncio.to_thread(
                ProducerStates, log.data_dir, trust_snapshots=log.clean_shutdown
            )
        return self._producer_states

    async def transaction_coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator: the broker's, or this client's own, recovered (open
        transactions of a process that died are aborted) before it is handed out."""
        if self._broker is not None:
            coordinator: TransactionCoordinator | None = self._broker.transactions
            if coordinator is None:
                raise TransportError("the embedded log is served with transactions turned off")
            return coordinator
        if self._coordinator is None:
            states = await self.producer_states()
            log = self.log
            coordinator = TransactionCoordinator(log, states, ProducerIdAllocator(log.data_dir), _run_blocking)
            await coordinator.recover()
            self._coordinator = coordinator
        return self._coordinator

    @property
    def log(self) -> LogManager:
        if self._log is None:
            raise TransportError("the embedded log client is not started")
        return self._log

    async def start(self) -> None:
        if self._log is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self._serve:
            # Imported here: a client that does not serve never loads the wire server (kio).
            from streamkit.transport.serving import serve_directory

            broker = await serve_directory(
                self.data_dir, host="127.0.0.1", port=0, default_partitions=self._default_partitions
            )
            self._broker = broker
            manager = broker.log
        else:
            manager = LogManager(self.data_dir, clock=self.clock, default_partitions=self._default_partitions)
            await asyncio.to_thread(manager.open)
        manager.add_append_listener(self._on_append)
        self._log = manager

    def offset_metadata_max_bytes(self) -> int:
        """The longest commit metadata the log stores: the served broker's group coordinator's
        limit, else Kafka's default (the transaction coordinator of this client has it too)."""
        coordinator = self.group_coordinator()
        return OFFSET_METADATA_MAX_BYTES if coordinator is None else coordinator.config.offset_metadata_max_bytes

    def group_coordinator(self) -> GroupCoordinator | None:
        """The served broker's group coordinator, which this process's consumers join as
        members (``group.py``); None when this process does not serve the log."""
        if self._broker is None:
            return None
        coordinator: GroupCoordinator = self._broker.coordinator
        return coordinator

    @property
    def served_at(self) -> str | None:
        """host:port where this process serves the log over the wire, when it does."""
        return None if self._broker is None else f"127.0.0.1:{self._broker.port}"

    async def aclose(self) -> None:
        log, self._log = self._log, None
        broker, self._broker = self._broker, None
        self._coordinator = None
        self._producer_states = None
        if broker is not None:
            await broker.aclose()  # closes the log too
        elif log is not None:
            await asyncio.to_thread(log.close)

    def _on_append(self, tp: TopicPartition, high_watermark: int) -> None:
        if threading.get_ident() == self._loop_thread:
            self._wake(tp)
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake, tp)

    def _wake(self, tp: TopicPartition) -> None:
        for consumer in self._consumers:
            consumer.notify(tp)

    async def ensure_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> int:
        log = self.log
        if log.has_topic(name):
            return log.describe_topic(name).partitions
        try:
            return log.create_topic(name, partitions, config).partitions
        except LogError as exc:
            if log.has_topic(name):
                return log.describe_topic(name).partitions
            raise TransportError(f"cannot create topic {name!r}: {exc}") from exc

    async def partition_count(self, name: str) -> int | None:
        log = self.log
        return log.describe_topic(name).partitions if log.has_topic(name) else None

    async def delete_records(self, offsets: Mapping[TopicPartition, int]) -> None:
        log = self.log

        def delete() -> None:  # the start offset is made durable: off the event loop
            for tp, offset in offsets.items():
                log.delete_records(tp.topic, tp.partition, offset)

        try:
            await asyncio.to_thread(delete)
        except LogError as exc:
            raise TransportError(f"cannot delete records: {exc}") from exc

    def producer(self) -> EmbeddedProducer:
        return EmbeddedProducer(self)

    def transactional_producer(
        self, transactional_id: str, *, timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    ) -> EmbeddedTransactionalProducer:
        return EmbeddedTransactionalProducer(self, transactional_id, timeout_ms)

    def consumer(
        self, group_id: str, *, auto_offset_reset: str = "earliest", isolation_level: str = "read_uncommitted"
    ) -> EmbeddedConsumer:
        consumer = EmbeddedConsumer(self, group_id, auto_offset_reset, check_isolation_level(isolation_level))
        self._consumers.append(consumer)
        return consumer

    def reader(self, *, isolation_level: str = "read_uncommitted") -> EmbeddedReader:
        return EmbeddedReader(self, check_isolation_level(isolation_level))

    def _forget(self, consumer: EmbeddedConsumer) -> None:
        if consumer in self._consumers:
            self._consumers.remove(consumer)


async def _run_blocking(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)
