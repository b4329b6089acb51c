"""What every request handler shares: the log, producer state, settings and helpers.

``run_blocking`` moves a call that may fsync or scan the disk off the event loop and
tracks it, so shutdown can wait for every such call before it closes the log.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from streamkit._core.waiting import drain
from streamkit.log.groups.coordinator import GroupCoordinator
from streamkit.log.manager import LogManager
from streamkit.log.producers import ProducerIdAllocator, ProducerStates
from streamkit.log.server.acl_store import AclStore
from streamkit.log.server.config import BrokerConfig
from streamkit.log.server.credentials import CredentialStore
from streamkit.log.server.group_sync import GroupSync
from streamkit.log.server.notifier import AppendNotifier
from streamkit.log.txn.coordinator import TransactionCoordinator

T = TypeVar("T")


@dataclass
class BrokerState:
    config: BrokerConfig
    log: LogManager
    producers: ProducerStates
    producer_ids: ProducerIdAllocator
    notifier: AppendNotifier
    coordinator: GroupCoordinator
    cluster_id: str
    api_table: dict[int, tuple[int, int]]
    # Users and their SCRAM credentials (``credentials.py``).
    credentials: CredentialStore
    port: int = 0  # the port actually bound (``config.port`` may be 0)
    transactions: TransactionCoordinator | None = None
    group_sync: GroupSync | None = None  # with ``config.durable``
    acls: AclStore | None = None  # with ``config.authorizer``; None allows everything
    # Held while a topic's configs are read and replaced (AlterConfigs, IncrementalAlterConfigs),
    # and while the ACLs change (CreateAcls, DeleteAcls).
    config_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Held while AlterUserScramCredentials changes and saves the credentials.
    credentials_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    listener_ports: dict[str, int] = field(default_factory=dict)  # listener name -> bound port
    _pending: set[asyncio.Future[Any]] = field(default_factory=set)

    def advertised_address(self, listener: str) -> tuple[str, int]:
        """Where clients that came in on ``listener`` are told to connect (Kafka advertises
        the same listener's address); the first listener's for an unknown name."""
        listeners = self.config.effective_listeners
        chosen = next((lst for lst in listeners if lst.name == listener), listeners[0])
        port = chosen.advertised_port or self.listener_ports.get(chosen.name, self.port)
        host = chosen.advertised_host or chosen.host
        if host in ("", "0.0.0.0", "::"):  # every interface: name this host, as Kafka does
            host = self.config.advertised_host or socket.gethostname()
        return host, port

    async def run_blocking(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` in a worker thread; shutdown waits for it even if we are cancelled."""
        fut: asyncio.Future[T] = asyncio.ensure_future(asyncio.to_thread(fn, *args))
        self._pending.add(fut)
        fut.add_done_callback(self._pending.discard)
        return await asyncio.shield(fut)

    async def drain_blocking(self) -> None:
        """Wait for every call started by ``run_blocking``."""
        await drain(self._pending)


def load_cluster_id(data_dir: Path) -> str:
    """A stable cluster id for the data directory, created on first use."""
    path = data_dir / ".broker" / "cluster-id"
    if path.exists():
        text = path.read_text().strip()
        if text:
            return text
    path.parent.mkdir(parents=True, exist_ok=True)
    cluster_id = uuid.uuid4().hex[:22]
    tmp = path.with_name("cluster-id.tmp")
    tmp.write_text(cluster_id + "\n")
    tmp.replace(path)
    return cluster_id
