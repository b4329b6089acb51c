"""The only door from processing to a log: one interface (``base``), two drivers.

``embedded`` runs the log in-process (``file://DIR``); ``kafka`` speaks to ``streamkit broker``
or any Kafka cluster through aiokafka (``kafka://host:port``). ``open_log_client(url)`` picks one.

Owns: the protocols (``base``), the drivers (``embedded``, ``kafka``, ``attached``), the
choice of driver for a URL (``connect``), serving a data directory (``serving``), group
placement, Kafka admin tools.
May import: ``log`` and ``_core``; of the wire server (``log.server``) only its ``Broker``, and
only in ``serving``.
"""

from streamkit.transport.base import (
    ConsumerRecord,
    LogClient,
    RebalanceListener,
    RecordMetadata,
    TransportError,
)
from streamkit.transport.connect import open_log_client

__all__ = [
    "ConsumerRecord",
    "LogClient",
    "RebalanceListener",
    "RecordMetadata",
    "TransportError",
    "open_log_client",
]
