"""A worker on an embedded data directory that another process owns: ``AttachedLogClient``.

One process owns a data directory (``log.manager``: it holds ``DIR/.lock`` and serves the log
on the loopback port recorded in ``DIR/.owner``). A second worker pointed at the directory
(``file://DIR``) joins that log as a Kafka client of the owner's port, as any client of
``streamkit broker`` would: a worker of another app simply reads and writes its own topics;
one of the same app shares the app's partitions through the consumer group.

When the owner goes away (the lock is free), the attached worker takes the directory over:
it opens it (taking the lock, exactly as any owner does) and serves it on the very port it
was attached to, so its own Kafka clients, and those of every other process attached to that
port, reconnect to it as they would to a restarted broker, and rejoin their groups. The lock
is the only arbiter: of two survivors, one gets it and serves the port, the other's
``LogManager.open`` is refused, nothing of the directory having been read, and it stays a
client of that port, now served by the winner. While nobody serves the port (a read-only
reader holds the lock, a command opened the directory itself, or the port is taken), the
client says why in ``unavailable_reason`` (the worker's /health answers 503 with it), logs
it once, and looks again every ``OWNER_POLL_S``; it never opens the directory while another
process holds the lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from streamkit.log.errors import DataDirLockedError
from streamkit.log.manager import DirectoryOwner, directory_owner
from streamkit.transport.base import TransportError
from streamkit.transport.kafka import KafkaLogClient
from streamkit.transport.serving import serve_directory

if TYPE_CHECKING:
    from streamkit.log.server.broker import Broker

logger = logging.getLogger(__name__)
OWNER_POLL_S = 0.25


class AttachedLogClient(KafkaLogClient):
    """A Kafka client of the process that owns ``data_dir``, which takes the directory over
    when that process goes away (module doc)."""

    def __init__(self, data_dir: str, owner: DirectoryOwner, *, url: str, default_partitions: int = 1) -> None:
        assert owner.address is not None
        host, port = owner.address
        super().__init__(f"{host}:{port}", url=url)
        self.data_dir = data_dir
        self._address = (host, port)
        self._owner_pid = owner.pid
        self._joined_pid = owner.pid
        self._default_partitions = default_partitions
        self._broker: Broker | None = None
        self._follow_task: asyncio.Task[None] | None = None
        self._owner_missing: str | None = None  # why nobody serves the directory now
        logger.warning(
            "data dir %s is owned by pid %s serving %s:%d; joining it as a Kafka client",
            data_dir, owner.pid, host, port,
        )

    @property
    def unavailable_reason(self) -> str | None:
        """Why nobody serves the directory now, else whether its server does not answer."""
        return self._owner_missing or super().unavailable_reason

    @property
    def served_at(self) -> str | None:
        """host:port where this process serves the directory, once it took it over."""
        return None if self._broker is None else f"{self._address[0]}:{self._address[1]}"

    async def start(self) -> None:
        if self._follow_task is None:
            self._follow_task = asyncio.ensure_future(self._follow())
            self._follow_task.set_name("streamkit:follow-owner")
        while True:
            try:
                await super().start()
                return
            except TransportError:
                # The owner may be going away as we join: wait for whoever serves the port
                # next (possibly us), unless it is served and still does not answer.
                if self._owner_missing is None and self._served_at_our_port():
                    raise
            await asyncio.sleep(OWNER_POLL_S)

    def owner_changed(self) -> bool:
        """Whether the process this client joined no longer serves the directory (it went
        away; this process or another took it over, or nobody holds it)."""
        if self._broker is not None:
            return True
        owner = directory_owner(self.data_dir)
        return owner is None or owner.address != self._address or owner.pid != self._joined_pid

    def _served_at_our_port(self) -> bool:
        owner = directory_owner(self.data_dir)
        return owner is not None and owner.address == self._address

    async def aclose(self) -> None:
        task, self._follow_task = self._follow_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:
            await super().aclose()
        finally:
            broker, self._broker = self._broker, None
            if broker is not None:
                await broker.aclose()  # the directory's lock goes last, after our clients

    async def _follow(self) -> None:
        """Watch the directory's owner until this process serves the directory itself."""
        while self._broker is None:
            await asyncio.sleep(OWNER_POLL_S)
            owner = await asyncio.to_thread(directory_owner, self.data_dir)
            if owner is None:
                await self._take_over()
            elif owner.address == self._address:
                if self._owner_missing is not None or owner.pid != self._owner_pid:
                    logger.warning(
                        "data dir %s is served by pid %s at %s:%d again; going on as its Kafka client",
                        self.data_dir, owner.pid, *self._address,
                    )
                self._owner_pid = owner.pid
                self._owner_missing = None
            elif owner.address is None and owner.pid == self._owner_pid:
                self._wait(f"the owner of data directory {self.data_dir} (pid {owner.pid}) is stopping: waiting")
            elif owner.address is None:
                self._wait(f"data directory {self.data_dir} is held by pid {owner.pid}, which does not serve it: waiting")
            else:
                self._wait(
                    f"data directory {self.data_dir} is now served by pid {owner.pid} at "
                    f"{owner.address[0]}:{owner.address[1]}, not at {self._address[0]}:{self._address[1]} "
                    "where this worker joined it: waiting (restart this worker to join it there)"
                )

    async def _take_over(self) -> None:
        if self._owner_missing is None:
            logger.warning(
                "the owner of data dir %s (pid %s) went away: taking the directory over",
                self.data_dir, self._owner_pid,
            )
        host, port = self._address
        try:
            broker = await serve_directory(
                self.data_dir, host=host, port=port, default_partitions=self._default_partitions
            )
        except DataDirLockedError as exc:
            # Another process was quicker (or a reader holds the lock): it keeps it.
            self._wait(f"{exc}: waiting for it to be free")
            return
        except OSError as exc:
            self._wait(
                f"the owner of data directory {self.data_dir} went away, and its port {host}:{port} "
                f"cannot be served again ({exc}): waiting"
            )
            return
        self._broker = broker
        self._owner_pid = os.getpid()
        self._owner_missing = None
        logger.warning("took data directory %s over: serving it at %s:%d (pid %d)", self.data_dir, host, port, os.getpid())

    def _wait(self, why: str) -> None:
        if why != self._owner_missing:
            logger.warning("%s (this worker has no log meanwhile)", why)
        self._owner_missing = why
