"""``ClientOptions``: what a Kafka deployment sets on the clients and topics of a worker.

A frozen value, built from the app's settings (``Settings.client_options``) and given to
``open_log_client``; the Kafka driver applies it to every producer, group consumer and
topic it makes (``kafka.py``), ``security`` to every client it opens. The embedded log (``file://DIR``) has no use for it: its
records are appended to local files by the process that owns the directory, acknowledged
once written, one copy, no group sessions to time out.

Replication: a topic the worker creates gets ``replication_factor`` replicas and, above one
replica, ``min.insync.replicas`` by ``min_insync_replicas`` unless the topic's own config
names one. Kafka Streams leaves min ISR to the broker's default (1 unless the operator set
it), so with ``acks=all`` a record may be acknowledged while one broker holds it. The rule
here: writes go on while one replica is down (rf - 1), and from three replicas on every
acknowledged record is on two brokers (capped at 2, so two brokers down of five still take
writes). A topic of one replica gets no min ISR: the broker's default stands (and
``streamkit broker``, one node, refuses more than one replica as Kafka does).

    >>> [min_insync_replicas(rf) for rf in (1, 2, 3, 5)]
    [None, 1, 2, 2]
    >>> ClientOptions(replication_factor=3).topic_config({"cleanup.policy": "compact"})
    {'cleanup.policy': 'compact', 'min.insync.replicas': '2'}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from streamkit._core.errors import ConfigError
from streamkit.transport.security import PLAINTEXT, ClientSecurity

ACKS = (0, 1, -1)
COMPRESSION_TYPES = ("gzip", "snappy", "lz4", "zstd")


def min_insync_replicas(replication_factor: int) -> int | None:
    """The ``min.insync.replicas`` of a topic of ``replication_factor`` replicas (module doc)."""
    if replication_factor <= 1:
        return None
    return min(2, replication_factor - 1)


@dataclass(frozen=True, slots=True)
class ClientOptions:
    acks: int = -1  # 0, 1 or -1 (all in-sync replicas)
    compression_type: str | None = None  # None: batches go uncompressed
    group_instance_id: str | None = None  # static membership (KIP-345) when set
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1_000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int | None = None  # None: the session timeout (aiokafka's rule)
    request_timeout_ms: int = 30_000
    replication_factor: int = 1
    client_id: str = "streamkit"  # how Kafka's logs, quotas and group listings name the clients
    security: ClientSecurity = PLAINTEXT  # TLS and SASL of every client (``security.py``)

    def __post_init__(self) -> None:
        if self.acks not in ACKS:
            raise ConfigError(f"acks must be 0, 1 or -1 (all), not {self.acks!r}")
        if self.compression_type is not None and self.compression_type not in COMPRESSION_TYPES:
            raise ConfigError(
                f"compression type must be one of {', '.join(COMPRESSION_TYPES)} or none, not {self.compression_type!r}"
            )
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            # Kafka's consumer refuses it too: the session would expire between two heartbeats.
            raise ConfigError(
                f"the heartbeat interval ({self.heartbeat_interval_ms} ms) must be below the session timeout "
                f"({self.session_timeout_ms} ms)"
            )
        if self.replication_factor < 1:
            raise ConfigError(f"replication factor must be >= 1, not {self.replication_factor}")

    @property
    def consumer_request_timeout_ms(self) -> int:
        """A group consumer's request timeout: its JoinGroup waits out a whole rebalance, so
        at least the rebalance timeout and 5 s (Kafka's consumer gives JoinGroup that much;
        aiokafka has one timeout for every request)."""
        rebalance = self.rebalance_timeout_ms or self.session_timeout_ms
        return max(self.request_timeout_ms, rebalance + 5_000)

    @property
    def min_insync_replicas(self) -> int | None:
        return min_insync_replicas(self.replication_factor)

    def topic_config(self, config: Mapping[str, str]) -> dict[str, str]:
        """A new topic's config: ``config``, with the min ISR of the rule unless it names one."""
        out = dict(config)
        isr = self.min_insync_replicas
        if isr is not None and "min.insync.replicas" not in out:
            out["min.insync.replicas"] = str(isr)
        return out
