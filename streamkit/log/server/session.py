"""One connection's security state: its listener, its principal and its SASL exchange.

``Session.principal`` is Kafka's ``KafkaPrincipal`` spelled as a string, what an authorizer
reads: ``User:ANONYMOUS`` on PLAINTEXT and on SSL without a client certificate,
``User:`` + the certificate subject's DN with one (mTLS), ``User:NAME`` once SASL succeeded.

On a SASL listener a connection starts unauthenticated: only ApiVersions, SaslHandshake and
SaslAuthenticate are served (``PRE_AUTH_APIS``); anything else closes it, as Kafka's
``SaslServerAuthenticator`` does. The exchange (``authenticate``), per Kafka:

* SaslHandshake names a mechanism: one not enabled answers UNSUPPORTED_SASL_MECHANISM with
  the enabled ones and closes; v1 means the tokens come in SaslAuthenticate requests, v0
  that they come as bare size-prefixed frames (``raw_tokens``), answered the same way;
* PLAIN takes one token ``[authzid] NUL user NUL password`` (authzid empty or the user);
  SCRAM two (``scram.py``);
* any failure answers SASL_AUTHENTICATION_FAILED and closes the connection; the message is
  Kafka's: for SCRAM its fixed text (it names the mechanism, never the user or why), for PLAIN
  ``PlainSaslServer``'s reason ("Authentication failed: Invalid username or password", ...).

Limits (constants below, documented in ``docs/security.md``): frames before authentication
are at most ``PRE_AUTH_MAX_FRAME_BYTES`` (Kafka's ``sasl.server.max.receive.size``), and a
connection on a SASL listener must finish authenticating within
``BrokerConfig.authentication_timeout_ms`` (``AUTH_TIMEOUT_MS`` by default) of connecting, or
it is closed (the broker's connection sweep checks ``auth_deadline``; the TLS handshake has
the same bound, given to asyncio as ``ssl_handshake_timeout``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from streamkit.log.server import apis
from streamkit.log.server.credentials import CredentialStore
from streamkit.log.server.errors import AuthenticationFailed, ScramError
from streamkit.log.server.listeners import Listener
from streamkit.log.server.scram import MECHANISMS, ScramServer

logger = logging.getLogger(__name__)

ANONYMOUS = "User:ANONYMOUS"
PRE_AUTH_APIS = frozenset({apis.API_VERSIONS, apis.SASL_HANDSHAKE, apis.SASL_AUTHENTICATE})
PRE_AUTH_MAX_FRAME_BYTES = 512 * 1024  # Kafka's sasl.server.max.receive.size default
AUTH_TIMEOUT_MS = 10_000
MAX_PLAIN_TOKEN_BYTES = 2048

# ``await check(user, password)``: whether the password is the user's (the blocking PBKDF2
# runs off the event loop).
PlainCheck = Callable[[str, str], Awaitable[bool]]


def failure_message(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


@dataclass(slots=True)
class Session:
    listener: Listener
    client_host: str = ""
    principal: str = ANONYMOUS
    authenticated: bool = True  # False until SASL succeeds on a SASL listener
    mechanism: str | None = None  # chosen by SaslHandshake
    raw_tokens: bool = False  # SaslHandshake v0: tokens come as bare frames
    close_after_response: bool = False  # a refused handshake or authentication
    auth_deadline: float | None = None  # loop time by which SASL must have succeeded
    _scram: ScramServer | None = field(default=None, repr=False)

    @classmethod
    def open(
        cls, listener: Listener, client_host: str, principal: str, now: float, timeout_ms: int = AUTH_TIMEOUT_MS
    ) -> Session:
        session = cls(listener=listener, client_host=client_host, principal=principal)
        if listener.sasl:
            session.authenticated = False
            session.auth_deadline = now + timeout_ms / 1000
        return session

    def allows(self, api_key: int) -> bool:
        return self.authenticated or api_key in PRE_AUTH_APIS

    def choose(self, mechanism: str, enabled: tuple[str, ...], version: int) -> bool:
        """SaslHandshake: whether ``mechanism`` is enabled (else the connection is to close)."""
        if mechanism not in enabled:
            self.close_after_response = True
            return False
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        if mechanism in MECHANISMS:
            self._scram = ScramServer(MECHANISMS[mechanism])
        return True

    async def authenticate(self, token: bytes, store: CredentialStore, check_plain: PlainCheck) -> bytes:
        """One client token in, the server's token out; ``authenticated`` once done.

        Raises ``AuthenticationFailed`` (and marks the connection to close) on any failure.
        """
        mechanism = self.mechanism
        assert mechanism is not None
        try:
            if mechanism == "PLAIN":
                user = await _plain(token, check_plain)
                self._succeed(user)
                return b""
            scram = self._scram
            assert scram is not None
            if not scram.started:
                return scram.first(token, store.credentials_for(scram.mechanism))
            answer = scram.final(token)
            assert scram.username is not None
            self._succeed(scram.username)
            return answer
        except AuthenticationFailed as exc:
            # PLAIN: Kafka's PlainSaslServer tells the client its reason (no secret in it).
            logger.info("SASL %s authentication from %s failed: %s", mechanism, self.client_host, exc)
            self.close_after_response = True
            raise
        except ScramError as exc:
            # The reason goes to the log; the client gets Kafka's fixed text, which does not say
            # whether the user exists, or Kafka's own reason where it gives one.
            logger.info("SASL %s authentication from %s failed: %s", mechanism, self.client_host, exc)
            self.close_after_response = True
            raise AuthenticationFailed(exc.client_message or failure_message(mechanism)) from exc

    def _succeed(self, user: str) -> None:
        self.principal = f"User:{user}"
        self.authenticated = True
        self.auth_deadline = None


async def _plain(token: bytes, check_plain: PlainCheck) -> str:
    """The user of a PLAIN token whose password checks; Kafka's ``PlainSaslServer`` messages."""
    if len(token) > MAX_PLAIN_TOKEN_BYTES:
        raise AuthenticationFailed(f"Invalid SASL/PLAIN response: longer than {MAX_PLAIN_TOKEN_BYTES} bytes")
    try:
        parts = token.decode("utf-8").split("\x00")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
    if len(parts) != 3:
        raise AuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    authzid, user, password = parts
    if not user:
        raise AuthenticationFailed("Authentication failed: username not specified")
    if not password:
        raise AuthenticationFailed("Authentication failed: password not specified")
    if not await check_plain(user, password):
        raise AuthenticationFailed("Authentication failed: Invalid username or password")
    if authzid and authzid != user:
        raise AuthenticationFailed(
            "Authentication failed: Client requested an authorization id that is different from username"
        )
    return user
