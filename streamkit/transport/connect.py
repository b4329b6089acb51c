"""Which driver a broker URL names: ``open_log_client``, the one place that knows every
transport (the protocols in ``base.py`` know none of them)."""

from __future__ import annotations

from urllib.parse import urlparse

from streamkit._core.errors import ConfigError
from streamkit.transport.base import LogClient
from streamkit.transport.options import ClientOptions


def open_log_client(url: str, *, owner: bool = False, options: ClientOptions | None = None) -> LogClient:
    """The driver for ``url``: ``file://DIR`` (embedded) or ``kafka://host:port[,host:port]``.

    ``options`` (a Kafka deployment's settings: acks, compression, group timeouts, static
    membership, replication) apply to a ``kafka://`` log; a ``file://`` log has no use for
    them, whether embedded or joined through its owner's port (``options.py``).

    For ``file://DIR`` owned by another process (a running worker or broker), the client is a
    Kafka client of the owner's loopback port instead of failing on the directory's lock.
    ``owner=True`` (a worker) takes a free directory and serves it to others; on one another
    process owns, it joins the owner's log and takes the directory over when the owner goes
    away (``attached.py``).
    """
    parsed = urlparse(url)
    if parsed.scheme == "file":
        from streamkit.log.manager import directory_owner
        from streamkit.transport.embedded.client import EmbeddedLogClient

        path = (parsed.netloc + parsed.path) or ".streamkit"
        holder = directory_owner(path)
        if holder is not None and holder.address is not None:
            if owner:
                from streamkit.transport.attached import AttachedLogClient

                attached: LogClient = AttachedLogClient(path, holder, url=url)
                return attached
            return open_log_client(f"kafka://{holder.address[0]}:{holder.address[1]}")
        embedded: LogClient = EmbeddedLogClient(path, url=url, serve=owner)
        return embedded
    if parsed.scheme == "kafka":
        from streamkit.transport.kafka import KafkaLogClient

        servers = url[len("kafka://") :].rstrip("/")
        if not servers:
            raise ConfigError(f"broker URL {url!r} names no host: use kafka://host:port")
        kafka: LogClient = KafkaLogClient(servers, url=url, options=options)
        return kafka
    raise ConfigError(f"unsupported broker URL {url!r}: use file://DIR or kafka://host:port")
