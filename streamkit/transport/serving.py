"""Serving a data directory over the wire from this process: ``serve_directory``.

A process that owns a data directory for a while also serves its log, as ``streamkit
broker`` does, so other processes reach it as Kafka clients: a worker on ``file://DIR``
(``embedded/client.py``), or an attached worker taking the directory over from an owner
that went away (``attached.py``). This module is the transports' one door to the wire server
(``log/server``, a contract in ``pyproject.toml``): it starts a ``Broker``. The embedded
client imports it only when it serves, so the embedded driver alone loads neither the wire
server nor its codecs (kio).
"""

from __future__ import annotations

from streamkit.log.server.broker import Broker
from streamkit.log.server.config import BrokerConfig


async def serve_directory(data_dir: str, *, host: str, port: int, default_partitions: int) -> Broker:
    """A started ``Broker`` over ``data_dir`` at ``host:port`` (port 0: any free one), holding
    the directory's lock; its ``aclose`` closes the log too. Raises what ``Broker.start``
    raises: ``DataDirLockedError`` when another process holds the directory, ``OSError``
    when the port cannot be bound."""
    broker = Broker(data_dir, BrokerConfig(host=host, port=port, default_partitions=default_partitions))
    await broker.start()
    return broker
