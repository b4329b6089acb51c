"""How a backfill or a Spark job reaches the app's log, on the driver and on the executors,
secured as the app is (TLS, SASL: ``transport/security.py``).

``LogAccess`` (the driver's) is built once per backfill from the app's broker and its Kafka
client settings (``Settings.client_options``: ``broker_credentials``/``ssl_context`` with the
``STREAMKIT_*`` environment over them, and ``streamkit backfill --command-config FILE`` over
both). ``TaskLog`` is what a Spark task closure carries to the executors: the log's place and
the security's settings by Kafka's names, secrets as ``Secret``. A ``Secret`` pickles with the
closure (Spark ships a task's closure as bytes it never shows) and prints as ``******``, so a
repr of the closure, a log line or an error shows none. An ``ssl.SSLContext`` or an
OAUTHBEARER token callback cannot be pickled: the executor takes them from the app's own
module (which it imports anyway to rebuild the plan), and puts the settings over them as the
driver did.

A hand-written ``--job`` reads and writes through the data source, whose options are strings
(``data_source_options``): the password goes as ``kafka.sasl.password``, a name Spark's
``spark.redaction.regex`` redacts; an ``ssl.SSLContext`` or a token callback cannot go there,
and such a job is refused by name.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from urllib.parse import urlparse

from streamkit._core.errors import ConfigError
from streamkit.app.application import App
from streamkit.app.credentials import security_of
from streamkit.spark.logs import SourceLog, open_source_log
from streamkit.spark.planning import load_app
from streamkit.transport.kafka_tools import KafkaTools
from streamkit.transport.options import ClientOptions
from streamkit.transport.security import PLAINTEXT, ClientSecurity, Secret

# The settings a data source option carries, by Kafka's names: the secrets as sasl.password and
# ssl.key.password (names Spark redacts), never as sasl.jaas.config.
_OPTION_NAMES = (
    "security.protocol", "sasl.mechanism", "sasl.username", "sasl.kerberos.service.name", "ssl.ca.location",
    "ssl.certificate.location", "ssl.key.location", "ssl.endpoint.identification.algorithm",
)


@dataclass(frozen=True, slots=True)
class TaskLog:
    """The app's log as an executor reaches it (module doc); pickles, and prints no secret."""

    path: str | None
    bootstrap: str | None
    settings: tuple[tuple[str, str | Secret], ...] = ()
    # (app reference, import root) when the security holds Python objects (an SSLContext, a
    # token callback) that the executor takes from the app's module.
    objects_from: tuple[str, str | None] | None = None

    def security(self) -> ClientSecurity:
        if not self.settings:
            return PLAINTEXT
        ssl_context, token_callback = None, None
        if self.objects_from is not None:
            app = load_app(*self.objects_from)
            own = security_of(app.conf.broker_credentials, app.conf.ssl_context)
            ssl_context, token_callback = own.ssl_context, own.token_callback
        return ClientSecurity.from_properties(
            dict(self.settings), ssl_context=ssl_context, token_callback=token_callback
        )

    def open(self, topic: str) -> SourceLog:
        return open_source_log(self.path, self.bootstrap, topic, self.security())


@dataclass(frozen=True, slots=True)
class LogAccess:
    """The app's log as the driver reaches it: its broker URL, the data directory (``file://``)
    or bootstrap servers (``kafka://``), and the Kafka client settings (security included)."""

    app_ref: str
    root: str | None
    broker: str
    path: str | None
    bootstrap: str | None
    options: ClientOptions

    @property
    def security(self) -> ClientSecurity:
        return self.options.security

    def task_log(self) -> TaskLog:
        """What a task closure carries (module doc)."""
        security = self.security
        if security.protocol == "PLAINTEXT" or self.bootstrap is None:
            return TaskLog(self.path, self.bootstrap)
        objects = security.ssl_context is not None or security.token_callback is not None
        return TaskLog(
            self.path, self.bootstrap, tuple(security.properties.items()),
            (self.app_ref, self.root) if objects else None,
        )

    def check(self) -> None:
        """Connect to the brokers once: a refused login or an untrusted certificate is one
        ``BrokerAuthenticationError`` naming the broker and the cause, before Spark starts."""
        bootstrap = self.bootstrap
        if bootstrap is None:
            return
        logger = logging.getLogger("aiokafka")  # its log of the refusal is ours to say, once
        if not logger.handlers:
            logger.addHandler(logging.NullHandler())

        async def connect() -> None:
            async with KafkaTools(bootstrap, security=self.security) as tools:
                await tools.start()

        asyncio.run(connect())

    def open(self, topic: str) -> SourceLog:
        """The driver's reader and writer of ``topic``."""
        return open_source_log(self.path, self.bootstrap, topic, self.security if self.bootstrap else PLAINTEXT)

    def data_source_options(self) -> dict[str, str]:
        """The data source's options that reach the log (module doc: a ``--job``'s reads and writes)."""
        if self.path is not None:
            return {"path": self.path}
        assert self.bootstrap is not None
        out = {"bootstrap": self.bootstrap}
        security = self.security
        if security.protocol == "PLAINTEXT":
            return out
        if security.ssl_context is not None or security.token_callback is not None:
            what = "an ssl.SSLContext" if security.ssl_context is not None else "an OAUTHBEARER token callback"
            raise ConfigError(
                f"a --job reads and writes through the data source, whose options are strings: the app's "
                f"security holds {what}; give it as Kafka's settings instead (docs/security.md: ssl.ca.location, ...)"
            )
        props = {name: value.reveal() if isinstance(value, Secret) else value for name, value in security.properties.items()}
        out.update({f"kafka.{name}": props[name] for name in _OPTION_NAMES if name in props})
        if security.username is not None and "sasl.username" not in props:  # from sasl.jaas.config
            out["kafka.sasl.username"] = security.username
        if security.password is not None:
            out["kafka.sasl.password"] = security.password.reveal()
        if security.key_password is not None:
            out["kafka.ssl.key.password"] = security.key_password.reveal()
        return out


def log_access(app: App, app_ref: str, root: str | None, options: ClientOptions | None = None) -> LogAccess:
    """How the backfill reaches ``app``'s log; ``options`` (the app's client settings with a
    ``--command-config`` over them) default to the app's own."""
    url = urlparse(app.broker)
    if url.scheme == "file":
        path = (url.netloc + url.path) or ".streamkit"
        return LogAccess(app_ref, root, app.broker, path, None, ClientOptions())
    if url.scheme == "kafka":
        return LogAccess(app_ref, root, app.broker, None, url.netloc, options or app.conf.client_options())
    raise ConfigError(f"cannot backfill from broker {app.broker!r}")
