"""``ClientSecurity`` (``security.py``) in aiokafka's terms, and why a secured connection failed.

``aiokafka_security`` gives the keyword arguments every aiokafka client of the Kafka driver and
``KafkaTools`` is built with (an OAUTHBEARER callback wrapped as aiokafka's token provider).

aiokafka ends an OAUTHBEARER login after sending the token: a broker that refuses the token
answers it with an error challenge (RFC 7628), which aiokafka takes as success, and the
connection then fails on its first request ("node not ready"). ``_OAuthAuthenticator``
finishes the exchange as Kafka's clients do (module's end), so a refused token fails the login
with the broker's reason, like a wrong password.

aiokafka reports a refused SASL login or an untrusted certificate only as a log line and then
"Unable to bootstrap": a client that cannot start says nothing of the cause. So when a secured
client fails to connect, ``refusal`` connects to each bootstrap broker once more, by itself,
and turns what the handshake raised into one line naming the broker and the cause
(``BrokerAuthenticationError``: not retriable, the same credentials fail again). A broker
that is simply unreachable gives None there: the caller's usual "cannot reach" stands.
"""

from __future__ import annotations

import asyncio
import inspect
import ssl
from typing import Any

from aiokafka.abc import AbstractTokenProvider
from aiokafka.conn import AIOKafkaConnection, OAuthAuthenticator, create_conn
from aiokafka.errors import KafkaError, SaslAuthenticationFailed, UnsupportedSaslMechanismError

from streamkit.transport.base import TransportError
from streamkit.transport.security import ClientSecurity, TokenCallback


class BrokerAuthenticationError(TransportError):
    """The broker refused this client's TLS handshake or SASL login; the message says which
    broker and why (never a secret). Not retriable."""

    retriable = False


class _TokenProvider(AbstractTokenProvider):  # type: ignore[misc]
    """aiokafka's OAUTHBEARER token provider over a callback (sync or async) giving the token."""

    def __init__(self, callback: TokenCallback) -> None:
        self._callback = callback

    async def token(self) -> str:
        value = self._callback()
        if inspect.isawaitable(value):
            value = await value
        return str(value)


def aiokafka_security(security: ClientSecurity) -> dict[str, Any]:
    """aiokafka's keyword arguments for ``security`` (none for PLAINTEXT)."""
    kwargs = security.client_kwargs()
    callback = kwargs.pop("token_callback", None)
    if callback is not None:
        kwargs["sasl_oauth_token_provider"] = _TokenProvider(callback)
    return kwargs


def _hosts(bootstrap_servers: str) -> list[tuple[str, int]]:
    out = []
    for server in bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


def _cause(exc: BaseException, security: ClientSecurity) -> str | None:
    """The security cause of a failed handshake in words, or None when it is not one."""
    if isinstance(exc, SaslAuthenticationFailed):
        said = str(exc.args[0]) if exc.args else ""
        return f"SASL authentication failed ({security.describe()}): {said or 'refused by the broker'}"
    if isinstance(exc, UnsupportedSaslMechanismError):
        return f"the broker does not enable SASL mechanism {security.mechanism} on this listener"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: the broker's certificate is not trusted ({exc.verify_message}); check ssl.ca.location"
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc}): is this a {security.protocol} listener?"
    return None


async def refusal(bootstrap_servers: str, security: ClientSecurity, timeout_s: float = 10.0) -> BrokerAuthenticationError | None:
    """Why a secured connection to the bootstrap brokers fails, if it is the handshake or the
    login (module doc); None for PLAINTEXT, a broker that connects, or one that is unreachable."""
    if security.protocol == "PLAINTEXT":
        return None
    kwargs = aiokafka_security(security)
    for host, port in _hosts(bootstrap_servers):
        try:
            conn = await asyncio.wait_for(
                create_conn(host, port, request_timeout_ms=int(timeout_s * 1000), **kwargs), timeout_s
            )
        except (KafkaError, OSError, TimeoutError) as exc:
            cause = _cause(exc, security)
            if cause is not None:
                return BrokerAuthenticationError(f"cannot connect to Kafka at {host}:{port}: {cause}")
            continue
        conn.close()
    return None


class _OAuthAuthenticator(OAuthAuthenticator):  # type: ignore[misc]
    """aiokafka's OAUTHBEARER client, with the end of the exchange that RFC 7628 (3.2.3) and
    Kafka's own client (``OAuthBearerSaslClient``) have: when the broker answers the token
    with an error challenge (non-empty bytes, where success is empty), the client sends the
    single byte 0x01, and the broker then fails the SaslAuthenticate with its reason
    (aiokafka raises ``SaslAuthenticationFailed`` with it)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._challenge_answered = False

    async def step(self, payload: bytes | None) -> tuple[bytes, bool] | None:
        if not self._token_sent:
            sent: tuple[bytes, bool] | None = await super().step(payload)
            return sent
        if payload and not self._challenge_answered:
            self._challenge_answered = True
            return b"\x01", True
        return None


_aiokafka_oauth = AIOKafkaConnection.authenticator_oauth


def _authenticator_oauth(conn: Any) -> Any:
    """The OAUTHBEARER authenticator of a connection: ours for streamkit's token providers."""
    provider = conn._sasl_oauth_token_provider
    if isinstance(provider, _TokenProvider):
        return _OAuthAuthenticator(sasl_oauth_token_provider=provider)
    return _aiokafka_oauth(conn)


# aiokafka has no argument for the authenticator: its connection makes it by this method.
AIOKafkaConnection.authenticator_oauth = _authenticator_oauth
