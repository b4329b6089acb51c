"""Faust's credential objects (``faust.auth``), with Faust's names and signatures, and how an
app's ``broker_credentials``/``ssl_context`` settings become its ``ClientSecurity``.

``SASLCredentials`` (PLAIN by default, SASL_SSL when given an ``ssl_context``, else
SASL_PLAINTEXT), ``OAuthCredentials`` (OAUTHBEARER: ``oauth_cb`` has an async ``token()``),
``GSSAPICredentials`` (Kerberos) and ``SSLCredentials`` (TLS only). As in Faust,
``broker_credentials`` may also be an ``ssl.SSLContext`` (TLS) or a ``(username, password)``
pair (SASL PLAIN), and ``ssl_context`` alone means TLS with that context. streamkit also
takes a ``ClientSecurity`` or a mapping of Kafka's setting names there. Each object's ``repr``
names no password.

    >>> creds = SASLCredentials(username="app", password="s3cret", mechanism="SCRAM-SHA-512")
    >>> creds, security_of(creds, None).describe()
    (<SASLCredentials: username='app' mechanism=SCRAM-SHA-512>, 'SASL_PLAINTEXT SCRAM-SHA-512 as app')
"""

from __future__ import annotations

import abc
import ssl
from collections.abc import Mapping
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit.transport.security import PLAINTEXT, SECRET_NAMES, ClientSecurity, Secret


class Credentials(abc.ABC):
    """Base class of the credential objects (Faust's ``faust.auth.Credentials``)."""

    protocol = "PLAINTEXT"

    @abc.abstractmethod
    def security(self) -> ClientSecurity:
        """These credentials as Kafka's client settings, checked."""


def _with_tls(protocol: str, ssl_context: ssl.SSLContext | None) -> str:
    return protocol.replace("PLAINTEXT", "SSL") if ssl_context is not None else protocol


class SASLCredentials(Credentials):
    """A user name and password over SASL (``mechanism`` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)."""

    protocol = "SASL_PLAINTEXT"
    mechanism = "PLAIN"

    def __init__(
        self, *, username: str | None = None, password: str | None = None,
        ssl_context: ssl.SSLContext | None = None, mechanism: str | None = None,
    ) -> None:
        self.username = username
        self.password = password
        self.ssl_context = ssl_context
        self.protocol = _with_tls(self.protocol, ssl_context)
        if mechanism is not None:
            self.mechanism = str(getattr(mechanism, "value", mechanism))

    def security(self) -> ClientSecurity:
        settings: dict[str, str | Secret] = {"security.protocol": self.protocol, "sasl.mechanism": self.mechanism}
        if self.username is not None:
            settings["sasl.username"] = self.username
        if self.password is not None:
            settings["sasl.password"] = Secret(self.password)
        return ClientSecurity.from_properties(settings, source=" (SASLCredentials)", ssl_context=self.ssl_context)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: username={self.username!r} mechanism={self.mechanism}>"


class OAuthCredentials(Credentials):
    """OAUTHBEARER over SASL: ``oauth_cb.token()`` (a coroutine) gives each connection its token."""

    protocol = "SASL_PLAINTEXT"
    mechanism = "OAUTHBEARER"

    def __init__(self, *, client_id: str, oauth_cb: Any, ssl_context: ssl.SSLContext | None = None) -> None:
        if not callable(getattr(oauth_cb, "token", None)):
            raise ConfigError("OAuthCredentials: oauth_cb must have a token() method")
        self.client_id = client_id
        self.oauth_cb = oauth_cb
        self.ssl_context = ssl_context
        self.protocol = _with_tls(self.protocol, ssl_context)

    def security(self) -> ClientSecurity:
        return ClientSecurity.from_properties(
            {"security.protocol": self.protocol, "sasl.mechanism": self.mechanism}, source=" (OAuthCredentials)",
            ssl_context=self.ssl_context, token_callback=self.oauth_cb.token,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: client_id={self.client_id!r}>"


class GSSAPICredentials(Credentials):
    """Kerberos over SASL (aiokafka needs the ``gssapi`` package for it)."""

    protocol = "SASL_PLAINTEXT"
    mechanism = "GSSAPI"

    def __init__(
        self, *, kerberos_service_name: str = "kafka", kerberos_domain_name: str | None = None,
        ssl_context: ssl.SSLContext | None = None, mechanism: str | None = None,
    ) -> None:
        self.kerberos_service_name = kerberos_service_name
        self.kerberos_domain_name = kerberos_domain_name
        self.ssl_context = ssl_context
        self.protocol = _with_tls(self.protocol, ssl_context)
        if mechanism is not None:
            self.mechanism = str(getattr(mechanism, "value", mechanism))

    def security(self) -> ClientSecurity:
        return ClientSecurity.from_properties(
            {"security.protocol": self.protocol, "sasl.mechanism": self.mechanism,
             "sasl.kerberos.service.name": self.kerberos_service_name},
            source=" (GSSAPICredentials)", ssl_context=self.ssl_context, kerberos_domain_name=self.kerberos_domain_name,
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: kerberos service={self.kerberos_service_name!r} domain={self.kerberos_domain_name!r}>"


class SSLCredentials(Credentials):
    """TLS without SASL: ``context``, or one made from ``cafile``/``capath``/``cadata``."""

    protocol = "SSL"

    def __init__(
        self, context: ssl.SSLContext | None = None, *, purpose: Any = None,
        cafile: str | None = None, capath: str | None = None, cadata: str | None = None,
    ) -> None:
        if context is None:
            try:
                context = ssl.create_default_context(purpose or ssl.Purpose.SERVER_AUTH, cafile=cafile, capath=capath, cadata=cadata)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"SSLCredentials: cannot load the CA certificates: {exc}") from exc
        self.context = context

    def security(self) -> ClientSecurity:
        return ClientSecurity.from_properties({"security.protocol": "SSL"}, ssl_context=self.context)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: context={self.context}>"


def check_credentials(name: str, value: Any) -> Any:
    """The ``broker_credentials`` setting's check: what ``security_of`` takes, checked now, and
    kept so that no ``repr`` shows a password: a ``(username, password)`` pair becomes
    ``SASLCredentials`` (as Faust's ``to_credentials`` does), a mapping's secrets ``Secret``."""
    if value is None:
        return value
    security_of(value, None)
    if isinstance(value, (tuple, list)):
        username, password = value
        return SASLCredentials(username=username, password=password)
    if isinstance(value, Mapping):
        return {k: Secret(v) if k in SECRET_NAMES and isinstance(v, str) else v for k, v in value.items()}
    return value


def check_ssl_context(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, ssl.SSLContext):
        raise ConfigError(f"setting {name} must be an ssl.SSLContext, not {type(value).__name__}")
    return value


def security_of(credentials: Any, ssl_context: ssl.SSLContext | None) -> ClientSecurity:
    """The ``ClientSecurity`` of an app's ``broker_credentials`` and ``ssl_context`` (module doc)."""
    if credentials is None:
        if ssl_context is None:
            return PLAINTEXT
        return SSLCredentials(ssl_context).security()
    if isinstance(credentials, ClientSecurity):
        return credentials
    if isinstance(credentials, Credentials):
        return credentials.security()
    if isinstance(credentials, ssl.SSLContext):
        return SSLCredentials(credentials).security()
    if isinstance(credentials, Mapping):
        return ClientSecurity.from_properties(credentials, source=" (broker_credentials)", ssl_context=ssl_context)
    if isinstance(credentials, (tuple, list)) and len(credentials) == 2:
        username, password = credentials
        return SASLCredentials(username=username, password=password, ssl_context=ssl_context).security()
    raise ConfigError(
        "setting broker_credentials must be SASLCredentials, SSLCredentials, GSSAPICredentials, OAuthCredentials, "
        f"an ssl.SSLContext, a (username, password) pair, a ClientSecurity or a mapping of Kafka's names, not {type(credentials).__name__}"
    )
