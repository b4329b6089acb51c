"""SCRAM (RFC 5802, RFC 7677) for the broker: credentials as Kafka stores them and the server side
of one exchange. Plain code: no I/O, randomness passed in where a test wants it fixed.

A credential is what Kafka keeps for a SCRAM user (its ``ScramCredential``): the salt, the
iteration count, ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")``, where
``SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)``. The password itself is never
kept; from the credential the server can check a client's proof and prove itself, but cannot
act as the client.

The exchange (``ScramServer``), two client messages:

* client-first ``n,[a=AUTHZID],n=USER,r=CNONCE[,ext...]``: only ``n`` (no channel binding) is
  accepted, as Kafka accepts; an authzid, if given, must be the user. Answer
  ``r=CNONCE+SNONCE,s=SALT,i=ITERATIONS``;
* client-final ``c=BINDING,r=NONCE,p=PROOF``: the binding must be the base64 of the client's
  GS2 header, the nonce the combined one, and ``H(proof XOR HMAC(StoredKey, AuthMessage))``
  must equal StoredKey. Answer ``v=HMAC(ServerKey, AuthMessage)``.

An unknown user is refused at the client-first message, as Kafka's ``ScramSaslServer`` refuses
it (with the same answer to the client as a wrong password). Every failure is ``ScramError``,
whose message names no secret; ``client_message`` is set where Kafka tells the client its own
reason (an authorization id that is not the user), else the client gets Kafka's fixed text.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from streamkit.log.server.errors import ScramError

MIN_ITERATIONS = 4096  # RFC 7677 and Kafka's ScramMechanism minimum
MAX_ITERATIONS = 16384  # Kafka refuses more in AlterUserScramCredentials
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 32
NONCE_BYTES = 24
MAX_MESSAGE_BYTES = 4096  # a SCRAM message is a few hundred bytes; more is refused



@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    hash_name: str
    kafka_type: int  # the mechanism's byte in Kafka's (Describe|Alter)UserScramCredentials


SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SHA_256, SHA_512)}
BY_TYPE: dict[int, ScramMechanism] = {m.kafka_type: m for m in (SHA_256, SHA_512)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(mechanism: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mechanism.hash_name).digest()


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def check_iterations(mechanism: ScramMechanism, iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(
            f"{mechanism.name} iterations must be within {MIN_ITERATIONS}-{MAX_ITERATIONS}, not {iterations}"
        )


def credential_from_salted(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The credential for an already salted password (what AlterUserScramCredentials sends)."""
    check_iterations(mechanism, iterations)
    if not salt:
        raise ScramError("the salt must not be empty")
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(mechanism.hash_name, client_key).digest(),
        server_key=_hmac(mechanism, salted, b"Server Key"),
        iterations=iterations,
    )


def make_credential(
    mechanism: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    check_iterations(mechanism, iterations)
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


def password_matches(mechanism: ScramMechanism, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` derives ``credential`` (how SASL/PLAIN is checked: no second store)."""
    derived = make_credential(mechanism, password, credential.iterations, credential.salt)
    return hmac.compare_digest(derived.stored_key, credential.stored_key)


_NONCE_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _alphanumeric(length: int) -> str:
    return "".join(secrets.choice(_NONCE_CHARS) for _ in range(length))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise ScramError(f"bad base64 in the {what}") from exc


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise ScramError(f"malformed SCRAM {what}")
        out.append((part[0], part[2:]))
    return out


def _sasl_name(text: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is malformed."""
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed SCRAM user name")
    return text.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One SCRAM exchange: ``first`` then ``final``; ``username`` is set once it succeeded.

    ``lookup(user)`` gives the user's credential for this mechanism, or None.
    """

    def __init__(self, mechanism: ScramMechanism, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        # Letters and digits only, as Kafka's (base 36): librdkafka 2.0 garbles a nonce with '-'.
        self._server_nonce = nonce if nonce is not None else _alphanumeric(NONCE_BYTES * 4 // 3)
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.username: str | None = None

    @property
    def started(self) -> bool:
        """Whether the client-first message was answered."""
        return bool(self._server_first)

    def first(self, message: bytes, credential_of: dict[str, ScramCredential]) -> bytes:
        if self._server_first:
            raise ScramError("unexpected SCRAM client-first message")
        text = _decode(message, "client-first message")
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise ScramError("malformed SCRAM client-first message")
        binding, authzid, bare = parts
        if binding != "n":
            raise ScramError("SCRAM channel binding is not supported (only 'n')")
        if authzid and not authzid.startswith("a="):
            raise ScramError("malformed SCRAM authorization identity")
        # n=USER,r=NONCE then extensions (KEY=VALUE: Kafka's ``tokenauth``, not served here).
        fields = bare.split(",")
        if any("=" not in extension for extension in fields[2:]):
            raise ScramError("malformed SCRAM extension")
        attrs = _attributes(",".join(fields[:2]), "client-first message")
        if attrs[0][0] == "m":
            raise ScramError("SCRAM mandatory extensions are not supported")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("malformed SCRAM client-first message")
        user = _sasl_name(attrs[0][1])
        self._credential = credential_of.get(user)
        if self._credential is None:
            raise ScramError("invalid credentials (no such user)")
        if authzid and _sasl_name(authzid[2:]) != user:
            raise ScramError(
                "the SCRAM authorization identity is not the user",
                "Authentication failed: Client requested an authorization id that is different from username",
            )
        self._user = user
        self._gs2_header = f"{binding},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs[1][1] + self._server_nonce
        salt, iterations = self._credential.salt, self._credential.iterations
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        if not self._server_first or self.username is not None:
            raise ScramError("unexpected SCRAM client-final message")
        text = _decode(message, "client-final message")
        attrs = _attributes(text, "client-final message")
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise ScramError("malformed SCRAM client-final message")
        if _unb64(attrs[0][1], "channel binding") != self._gs2_header.encode():
            raise ScramError("SCRAM channel binding does not match the client-first message")
        # Kafka accepts a nonce that *ends* with the combined one (ScramSaslServer): librdkafka
        # before 2.1 sends the client nonce twice.
        if not attrs[1][1].endswith(self._nonce):
            raise ScramError("SCRAM nonce does not match")
        proof = _unb64(attrs[-1][1], "client proof")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        assert credential is not None
        if len(proof) != len(credential.stored_key):
            raise ScramError("invalid credentials")
        signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.mechanism.hash_name, client_key).digest(), credential.stored_key):
            raise ScramError("invalid credentials")
        self.username = self._user
        return f"v={_b64(_hmac(self.mechanism, credential.server_key, auth_message))}".encode()


def _decode(message: bytes, what: str) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError(f"the SCRAM {what} is too long")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScramError(f"the SCRAM {what} is not UTF-8") from exc
