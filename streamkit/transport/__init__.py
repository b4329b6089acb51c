"""The only door from processing to a log: one interface (``base``), two drivers.

``embedded`` runs the log in-process (``file://DIR``); ``kafka`` speaks to ``streamkit broker``
or any Kafka cluster through aiokafka (``kafka://host:port``). ``open_log_client(url)`` picks one.
"""

from streamkit.transport.base import (
    ConsumerRecord,
    LogClient,
    RebalanceListener,
    RecordMetadata,
    TransportError,
    open_log_client,
)

__all__ = [
    "ConsumerRecord",
    "LogClient",
    "RebalanceListener",
    "RecordMetadata",
    "TransportError",
    "open_log_client",
]
