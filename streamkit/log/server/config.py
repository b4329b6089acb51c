"""Settings of one wire server (``streamkit broker``), a frozen value.

Listeners and TLS settings are ``listeners.py``'s values; with no listeners the server has one
PLAINTEXT listener at ``host:port`` (the dev mode, and what ``--host/--port`` mean).
"""

from __future__ import annotations

from dataclasses import dataclass

from streamkit._core.errors import ConfigError
from streamkit.log.server.listeners import (
    DEFAULT_SASL_MECHANISMS,
    Listener,
    TlsSettings,
    check_mechanisms,
)
from streamkit.log.server.session import AUTH_TIMEOUT_MS

DEFAULT_PORT = 9092
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Where to listen and what to allow.

    ``advertised_host`` is the host clients are told to connect to (Metadata and
    FindCoordinator answers); it defaults to ``host``. ``port=0`` picks a free port.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    advertised_host: str | None = None
    node_id: int = 0
    auto_create_topics: bool = True
    transactions: bool = True  # serve the transaction APIs (and advertise them)
    default_partitions: int = 1
    max_frame_bytes: int = 100 * MIB  # a larger frame closes its connection
    max_in_flight: int = 16  # requests read ahead of their responses, per connection
    max_connections: int = 1024
    # A request must arrive whole within this long of its first byte, or its connection is
    # closed: half-sent frames cannot hold connection slots (Kafka's request timeout).
    request_timeout_ms: int = 30_000
    # A connection that sends no request and has none in progress for this long is closed
    # (Kafka's connections.max.idle.ms, same default).
    connections_max_idle_ms: int = 600_000
    # Acknowledge a produce (acks 1 or all) only once its records are fsynced, one fsync
    # shared by the requests that arrived meanwhile (``group_sync.py``). Off: acknowledged
    # means in the page cache, on disk within the topic's flush.ms.
    durable: bool = False
    # Kafka's ACLs (``acl_store.py``): off, every request is allowed and the ACL APIs answer
    # SECURITY_DISABLED, as Kafka without ``authorizer.class.name``.
    authorizer: bool = False
    super_users: frozenset[str] = frozenset()  # Kafka's super.users, principals such as User:admin
    allow_everyone_if_no_acl_found: bool = False  # Kafka's allow.everyone.if.no.acl.found
    # Security (``listeners.py``, ``session.py``): empty ``listeners`` is one PLAINTEXT listener
    # at host:port; ``tls`` serves the SSL and SASL_SSL listeners.
    listeners: tuple[Listener, ...] = ()
    tls: TlsSettings | None = None
    sasl_mechanisms: tuple[str, ...] = DEFAULT_SASL_MECHANISMS
    # A connection to a TLS or SASL listener must finish its TLS handshake and SASL login within
    # this long of connecting, or it is closed (``session.py``): a slow or silent client cannot
    # hold a connection slot.
    authentication_timeout_ms: int = AUTH_TIMEOUT_MS
    # Kafka's broker defaults of topic configs, by topic config name (``log.retention.ms`` gives
    # ``("retention.ms", ...)``; ``server_properties.py``): what a topic that sets none has.
    topic_defaults: tuple[tuple[str, str], ...] = ()
    retention_check_interval_ms: int = 300_000  # Kafka's log.retention.check.interval.ms

    def __post_init__(self) -> None:
        check_mechanisms(self.sasl_mechanisms)
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be within 0-65535, not {self.port}")
        if self.default_partitions < 1:
            raise ConfigError(f"default partitions must be at least 1, not {self.default_partitions}")
        if self.max_frame_bytes < 1024:
            raise ConfigError("the maximum frame size must be at least 1024 bytes")
        if self.max_in_flight < 1 or self.max_connections < 1:
            raise ConfigError("in-flight and connection limits must be at least 1")
        if self.retention_check_interval_ms < 1:
            raise ConfigError("the retention check interval must be at least 1 ms")
        if self.request_timeout_ms < 1 or self.connections_max_idle_ms < 1 or self.authentication_timeout_ms < 1:
            raise ConfigError("the request, idle and authentication timeouts must be at least 1 ms")
        for principal in self.super_users:
            kind, sep, name = principal.partition(":")
            if not (kind and sep and name):
                raise ConfigError(f"a super user is a principal TYPE:NAME (User:alice), not {principal!r}")
        if (self.super_users or self.allow_everyone_if_no_acl_found) and not self.authorizer:
            raise ConfigError("super users and allow-everyone-if-no-acl-found need the authorizer")

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host

    @property
    def effective_listeners(self) -> tuple[Listener, ...]:
        if self.listeners:
            return self.listeners
        return (Listener("PLAINTEXT", "PLAINTEXT", self.host, self.port, self.advertised_host),)
