"""The broker: a data directory served over the Kafka wire protocol on one TCP port.

Lifecycle (``async with Broker(...)`` or ``start`` / ``aclose``):

* ``start`` opens the log (off the event loop: recovery may scan segments), loads the user
  credentials (a damaged file stops the start: ``CredentialStoreError``), builds the TLS
  context, starts the group coordinator, registers the append listener that wakes
  long-polling fetches and binds one socket per listener (``listeners.py``); only then are
  ``port`` (the first listener's) and ``ports`` known;
* ``aclose`` stops accepting, closes every connection (cancelling requests in progress),
  closes the coordinator (it answers parked joins), waits for every worker-thread append,
  writes the producer-state snapshots and closes the log, which flushes every partition and
  marks the shutdown clean. It is idempotent.

The constructor does no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from streamkit.log.config import TopicConfig
from streamkit.log.errors import LogError
from streamkit.log.groups.coordinator import GroupCoordinator
from streamkit.log.groups.messages import GroupConfig
from streamkit.log.manager import LogManager, remove_owner, write_owner
from streamkit.log.producers import ProducerIdAllocator, ProducerStates
from streamkit.log.server import apis
from streamkit.log.server.acl_store import AclStore, acl_path
from streamkit.log.server.authorizer import AuthorizerSettings
from streamkit.log.server.config import BrokerConfig
from streamkit.log.server.connection import FrameProtocol, serve_connection
from streamkit.log.server.credentials import CredentialStore
from streamkit.log.server.dispatch import Dispatcher
from streamkit.log.server.group_sync import GroupSync
from streamkit.log.server.listeners import (
    Listener,
    principal_from_certificate,
    server_ssl_context,
)
from streamkit.log.server.notifier import AppendNotifier
from streamkit.log.server.session import ANONYMOUS, Session
from streamkit.log.server.state import BrokerState, load_cluster_id
from streamkit.log.txn.coordinator import TransactionCoordinator

logger = logging.getLogger(__name__)

TXN_EXPIRY_INTERVAL_S = 1.0


class Broker:
    """Serve ``data_dir`` to Kafka clients.

    >>> import asyncio, tempfile
    >>> async def main() -> bool:
    ...     async with Broker(tempfile.mkdtemp(), BrokerConfig(port=0)) as broker:
    ...         return broker.port > 0
    >>> asyncio.run(main())
    True
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        config: BrokerConfig | None = None,
        *,
        topic_defaults: TopicConfig | None = None,
        group_config: GroupConfig | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.config = config or BrokerConfig()
        self._topic_defaults = topic_defaults
        self._group_config = group_config
        self._log: LogManager | None = None
        self._state: BrokerState | None = None
        self._servers: list[asyncio.Server] = []
        self._connections: dict[asyncio.Task[None], FrameProtocol] = {}
        self._stack = contextlib.AsyncExitStack()
        self._tasks: asyncio.TaskGroup | None = None
        self._background: list[asyncio.Task[None]] = []
        self._closed = False

    def _defaults(self) -> TopicConfig | None:
        """The topic configs a topic that sets none has: the broker's ``log.*`` defaults over
        the given ones (kept as defaults, not as the topics' own settings)."""
        if not self.config.topic_defaults:
            return self._topic_defaults
        base = self._topic_defaults or TopicConfig()
        merged = TopicConfig.from_kafka(dict(self.config.topic_defaults), base)
        return dataclasses.replace(merged, overrides=base.overrides)

    @property
    def port(self) -> int:
        if self._state is None:
            raise RuntimeError("the broker is not started")
        return self._state.port

    @property
    def ports(self) -> dict[str, int]:
        """Listener name -> the port it is bound to."""
        if self._state is None:
            raise RuntimeError("the broker is not started")
        return dict(self._state.listener_ports)

    @property
    def producers(self) -> ProducerStates:
        """The log's producer state: in-process transactional appends go through it too."""
        if self._state is None:
            raise RuntimeError("the broker is not started")
        return self._state.producers

    @property
    def transactions(self) -> TransactionCoordinator | None:
        """The transaction coordinator (None with ``transactions=False``), for in-process
        transactional producers (the embedded transport)."""
        if self._state is None:
            raise RuntimeError("the broker is not started")
        return self._state.transactions

    @property
    def coordinator(self) -> GroupCoordinator:
        """The group coordinator: an in-process consumer (the embedded transport's, when this
        process serves its data directory) joins its groups as a member beside the remote ones."""
        if self._state is None:
            raise RuntimeError("the broker is not started")
        return self._state.coordinator

    @property
    def host(self) -> str:
        return self.config.effective_listeners[0].host

    @property
    def log(self) -> LogManager:
        if self._log is None:
            raise RuntimeError("the broker is not started")
        return self._log

    async def start(self) -> None:
        if self._state is not None:
            return
        credentials = CredentialStore.for_data_dir(self.data_dir)
        await asyncio.to_thread(credentials.load)  # before the log: a damaged file stops here
        log = LogManager(
            self.data_dir,
            defaults=self._defaults(),
            default_partitions=self.config.default_partitions,
            retention_check_interval_ms=self.config.retention_check_interval_ms,
        )
        await asyncio.to_thread(log.open)
        self._log = log
        try:
            await self._start_serving(log, credentials)
        except BaseException:
            await asyncio.to_thread(log.close)
            self._log = None
            raise

    async def _start_serving(self, log: LogManager, credentials: CredentialStore) -> None:
        loop = asyncio.get_running_loop()
        tls = server_ssl_context(self.config.tls) if self.config.tls is not None else None
        producers = ProducerStates(self.data_dir, trust_snapshots=log.clean_shutdown)
        notifier = AppendNotifier(loop)
        log.add_append_listener(notifier.on_append)
        coordinator = GroupCoordinator(log.offsets, config=self._group_config)
        state = BrokerState(
            config=self.config,
            log=log,
            producers=producers,
            producer_ids=ProducerIdAllocator(self.data_dir),
            notifier=notifier,
            coordinator=coordinator,
            cluster_id=load_cluster_id(self.data_dir),
            api_table=apis.advertised(transactions=self.config.transactions),
            credentials=credentials,
        )
        if self.config.transactions:
            state.transactions = TransactionCoordinator(
                log, producers, state.producer_ids, state.run_blocking,
                # One limit for OffsetCommit and TxnOffsetCommit, as Kafka's GroupCoordinator has.
                offset_metadata_max_bytes=coordinator.config.offset_metadata_max_bytes,
            )
        if self.config.durable:
            state.group_sync = GroupSync(state.run_blocking)
        if self.config.authorizer:
            settings = AuthorizerSettings(
                self.config.super_users, self.config.allow_everyone_if_no_acl_found
            )
            state.acls = await asyncio.to_thread(AclStore, acl_path(self.data_dir), settings)
        dispatcher = Dispatcher(state)
        try:
            await coordinator.start()
            if state.transactions is not None:
                await state.transactions.recover()
            self._tasks = await self._stack.enter_async_context(asyncio.TaskGroup())
            for listener in self.config.effective_listeners:
                server = await loop.create_server(
                    self._protocol_factory(listener, dispatcher),
                    listener.host or None,
                    listener.port,
                    reuse_address=True,
                    ssl=tls if listener.tls else None,
                    ssl_handshake_timeout=self.config.authentication_timeout_ms / 1000 if listener.tls else None,
                )
                self._servers.append(server)
                state.listener_ports[listener.name] = server.sockets[0].getsockname()[1]
        except BaseException:
            for server in self._servers:
                server.close()
            await self._stack.aclose()  # no task was started yet
            await coordinator.aclose()
            await state.drain_blocking()
            raise
        first = self.config.effective_listeners[0]
        state.port = state.listener_ports[first.name]
        # Other processes pointed at this data directory reach the log through us: through a
        # PLAINTEXT listener if there is one (they are not given credentials).
        owner = next((lst for lst in self.config.effective_listeners if lst.security_protocol == "PLAINTEXT"), first)
        write_owner(self.data_dir, state.advertised_address(owner.name)[0], state.listener_ports[owner.name])
        self._state = state
        if state.transactions is not None:
            self._background.append(self._tasks.create_task(self._expire_transactions(state.transactions)))
        self._background.append(self._tasks.create_task(self._expire_connections()))

    async def _expire_connections(self) -> None:
        """Close connections stuck on an incomplete request or idle (``FrameProtocol.stale``)."""
        request_timeout_s = self.config.request_timeout_ms / 1000
        max_idle_s = self.config.connections_max_idle_ms / 1000
        # A timeout is noticed at most one sweep late.
        interval_s = min(1.0, request_timeout_s / 4, max_idle_s / 4)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_s)
            now = loop.time()
            for protocol in list(self._connections.values()):
                reason = protocol.stale(now, request_timeout_s, max_idle_s)
                if reason is not None:
                    protocol.expire(reason)

    async def _expire_transactions(self, coordinator: TransactionCoordinator) -> None:
        while True:
            await asyncio.sleep(TXN_EXPIRY_INTERVAL_S)
            try:
                await coordinator.expire()
            except (LogError, OSError):
                logger.exception("could not expire transactions")

    def _protocol_factory(self, listener: Listener, dispatcher: Dispatcher) -> Callable[[], FrameProtocol]:
        def make() -> FrameProtocol:
            return FrameProtocol(
                lambda protocol: self._accept(protocol, dispatcher, listener),
                max_frame_bytes=self.config.max_frame_bytes,
                max_in_flight=self.config.max_in_flight,
            )

        return make

    def _accept(self, protocol: FrameProtocol, dispatcher: Dispatcher, listener: Listener) -> None:
        principal = ANONYMOUS
        if listener.tls and not listener.sasl and protocol.transport is not None:
            principal = principal_from_certificate(protocol.transport.get_extra_info("peercert"))
        peer = protocol.peer
        client_host = peer[0] if isinstance(peer, tuple) and peer else ""
        protocol.session = Session.open(
            listener, client_host, principal, asyncio.get_running_loop().time(), self.config.authentication_timeout_ms
        )
        if self._tasks is None or self._closed or len(self._connections) >= self.config.max_connections:
            assert protocol.transport is not None
            protocol.transport.close()
            return
        # A task in our TaskGroup, so shutdown can cancel it cleanly.
        task = self._tasks.create_task(self._serve(protocol, dispatcher))
        self._connections[task] = protocol
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._connections.pop(task, None)

    async def _serve(self, protocol: FrameProtocol, dispatcher: Dispatcher) -> None:
        try:
            await serve_connection(protocol, dispatcher)
        except Exception:
            # One connection's failure must never reach the TaskGroup and cancel the others.
            logger.exception("connection failed")

    def _tasks_to_cancel(self) -> list[asyncio.Task[None]]:
        return [*self._connections, *self._background]

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for server in self._servers:
            server.close()
        for task in list(self._tasks_to_cancel()):
            task.cancel()
        await self._stack.aclose()  # waits for the connection tasks
        state = self._state
        if state is not None and state.group_sync is not None:
            sync = state.group_sync
            logger.info("durable: %d fsync rounds for %d produce requests", sync.rounds, sync.requests)
        if state is not None:
            await state.coordinator.aclose()
            await state.drain_blocking()
            state.notifier.wake_all()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
        if self._log is not None:
            remove_owner(self.data_dir)
            await asyncio.to_thread(self._close_log, state)

    def _close_log(self, state: BrokerState | None) -> None:
        assert self._log is not None
        if state is not None:
            try:
                state.producers.write_snapshots()
            except OSError:
                logger.exception("could not write producer-state snapshots")
        self._log.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
