"""``ClientSecurity``: how streamkit's Kafka clients authenticate and encrypt (TLS, SASL).

One frozen value per cluster connection, named as Kafka's clients name it: ``security.protocol``
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512, OAUTHBEARER with a token callback given in Python, GSSAPI), ``sasl.username``,
``sasl.password``, ``sasl.jaas.config`` (the Plain/Scram login module's ``username="..."
password="..."``, as Kafka's clients read it), ``sasl.kerberos.service.name``,
``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the broker's host
name against its certificate; empty turns that off); or a ready ``ssl.SSLContext``.

Where it comes from: ``from_properties`` (a mapping of those names), ``from_file`` (a client
properties file, Java syntax, ``--command-config``), ``from_environment`` (each name's variable
is ``STREAMKIT_`` + the name upper-cased with ``.`` and ``-`` as ``_``:
``STREAMKIT_SECURITY_PROTOCOL``, ``STREAMKIT_SASL_PASSWORD``, ...), and the Faust credentials
of ``app/credentials.py``. ``layered`` puts one source over another name by name (the
environment over the app's settings, a ``--command-config`` file over both), and checks the
result: an unknown name or a bad value is one ``ConfigError`` naming the setting (and the
variable or file it came from).

Deliberate differences from Kafka's clients: SASL needs ``sasl.mechanism`` spelled out (Kafka
defaults to GSSAPI, which no managed cluster uses: a forgotten mechanism would fail later and
less clearly); ``sasl.*``/``ssl.*`` settings under a protocol that does not use them are an
error (Kafka ignores them, so a forgotten ``security.protocol`` is a timeout); Java key and
trust stores (``ssl.truststore.*``, ``ssl.keystore.*``) are not read: PEM files are.

Secrets (``sasl.password``, ``ssl.key.password``, ``sasl.jaas.config``) are held as ``Secret``:
its ``repr`` and ``str`` are ``'******'``, so no log line, status page or error shows one.

    >>> s = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT",
    ...     "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "pw"})
    >>> s.password, s.describe()
    (******, 'SASL_PLAINTEXT SCRAM-SHA-256 as alice')
    >>> sorted(s.client_kwargs())
    ['sasl_mechanism', 'sasl_plain_password', 'sasl_plain_username', 'security_protocol']
"""

from __future__ import annotations

import difflib
import os
import re
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit._core.properties import parse_properties

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
NAMES = (
    "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config",
    "sasl.kerberos.service.name", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password", "ssl.endpoint.identification.algorithm",
)
SECRET_NAMES = frozenset({"sasl.password", "ssl.key.password", "sasl.jaas.config"})
_FILES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")
_JAVA_STORES = ("ssl.truststore.", "ssl.keystore.")
# A login module's options: key=value, the value double-quoted (with \" and \\ escapes) or bare.
_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')
_JAAS_HEAD = re.compile(r"^\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S)

TokenCallback = Callable[[], "str | Awaitable[str]"]


class Secret:
    """A secret string: shown as ``******`` everywhere; ``reveal()`` gives it to a client."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "******"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def env_name(name: str) -> str:
    """The environment variable of a Kafka setting name.

    >>> env_name("ssl.endpoint.identification.algorithm")
    'STREAMKIT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM'
    """
    return "STREAMKIT_" + re.sub(r"[.-]", "_", name).upper()


def parse_jaas(text: str, where: str = "sasl.jaas.config") -> tuple[str, dict[str, str]]:
    """The login module's class and options of a one-module JAAS config, as Kafka's clients take it.

    >>> parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b\\\\"c";')
    ('org.apache.kafka.common.security.plain.PlainLoginModule', {'username': 'a', 'password': 'b"c'})
    """
    head = _JAAS_HEAD.match(text)
    if head is None:
        raise ConfigError(f"{where}: expected '<LoginModule class> required key=\"value\" ...;'")
    module, body = head.group(1), head.group(3)
    options: dict[str, str] = {}
    rest = _JAAS_OPTION.sub("", body).strip()
    if rest:
        # Named up to its '=': what follows may be a password whose quotes are broken.
        name, equals, _value = rest.partition("=")
        shown = name.strip()[:20] + ("=..." if equals else "")
        raise ConfigError(f"{where}: cannot read the login module's options near {shown!r}")
    for match in _JAAS_OPTION.finditer(body):
        quoted, bare = match.group(2), match.group(3)
        options[match.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
    return module, options


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """What a Kafka client needs to connect securely (module doc). ``PLAINTEXT()`` is the default."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: Secret | None = None
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: Secret | None = None
    check_hostname: bool = True
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    token_callback: TokenCallback | None = field(default=None, compare=False)
    kerberos_service_name: str = "kafka"
    kerberos_domain_name: str | None = None
    # The Kafka-named settings it was built from (secrets as ``Secret``): what ``layered`` merges.
    properties: Mapping[str, str | Secret] = field(default_factory=dict, compare=False, repr=False)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def describe(self) -> str:
        """One line for logs and errors, with no secret: ``SASL_SSL SCRAM-SHA-256 as alice``."""
        parts = [self.protocol]
        if self.uses_sasl and self.mechanism:
            parts.append(self.mechanism)
            if self.username:
                parts.append(f"as {self.username}")
        return " ".join(parts)

    # -- sources ---------------------------------------------------------------------------

    @classmethod
    def from_properties(
        cls, settings: Mapping[str, Any], *, source: str = "", label: Callable[[str], str] = str,
        ssl_context: ssl.SSLContext | None = None, token_callback: TokenCallback | None = None,
        kerberos_domain_name: str | None = None,
    ) -> ClientSecurity:
        """Checked settings by Kafka's names; ``source`` (" in client.properties") and
        ``label`` (a name's spelling there) make the errors say where a bad one came from."""

        def fail(name: str, problem: str) -> ConfigError:
            return ConfigError(f"{label(name)}{source}: {problem}")

        props: dict[str, str | Secret] = {}
        for name, value in settings.items():
            if name not in NAMES:
                raise fail(name, _unknown(name))
            if not isinstance(value, (str, Secret)):
                raise fail(name, f"must be a string, not {type(value).__name__}")
            props[name] = Secret(value) if name in SECRET_NAMES and isinstance(value, str) else value

        def text(name: str) -> str | None:
            value = props.get(name)
            return value.reveal() if isinstance(value, Secret) else value

        protocol = (text("security.protocol") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise fail("security.protocol", f"unknown protocol {text('security.protocol')!r} (one of {', '.join(PROTOCOLS)})")
        if ssl_context is not None and protocol not in ("SSL", "SASL_SSL"):
            raise fail("security.protocol", f"{protocol} does not use TLS, yet an ssl_context is given")
        sasl_given = [n for n in props if n.startswith("sasl.")]
        if sasl_given and not protocol.startswith("SASL_"):
            raise fail(sasl_given[0], f"is set but security.protocol is {protocol} (no SASL): use SASL_SSL or SASL_PLAINTEXT")
        tls_given = [n for n in props if n.startswith("ssl.")]
        if tls_given and protocol not in ("SSL", "SASL_SSL"):
            raise fail(tls_given[0], f"is set but security.protocol is {protocol} (no TLS): use SSL or SASL_SSL")
        if ssl_context is not None and [n for n in tls_given if n != "ssl.endpoint.identification.algorithm"]:
            raise fail(tls_given[0], "give either an ssl_context or ssl.* settings, not both")
        for name in _FILES:
            path = text(name)
            if path is not None and not Path(path).is_file():
                raise fail(name, f"no such file: {path}")
        if text("ssl.key.location") is not None and text("ssl.certificate.location") is None:
            raise fail("ssl.key.location", "needs ssl.certificate.location (the client certificate) too")
        algorithm = text("ssl.endpoint.identification.algorithm")
        if algorithm is not None and algorithm.lower() not in ("https", ""):
            raise fail("ssl.endpoint.identification.algorithm", f"must be https or empty, not {algorithm!r}")

        mechanism = text("sasl.mechanism")
        username, password = text("sasl.username"), props.get("sasl.password")
        jaas = text("sasl.jaas.config")
        if jaas is not None:
            module, options = parse_jaas(jaas, f"{label('sasl.jaas.config')}{source}")
            if module.rsplit(".", 1)[-1] not in ("PlainLoginModule", "ScramLoginModule"):
                raise fail("sasl.jaas.config", f"login module {module} is not read here (PlainLoginModule or ScramLoginModule)")
            username = username or options.get("username")
            if password is None and "password" in options:
                password = Secret(options["password"])
        if protocol.startswith("SASL_"):
            if mechanism is None:
                raise fail("sasl.mechanism", f"{protocol} needs sasl.mechanism ({', '.join(MECHANISMS)})")
            if mechanism not in MECHANISMS:
                raise fail("sasl.mechanism", f"unknown mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
            if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                if not username:
                    raise fail("sasl.username", f"{mechanism} needs a user name (sasl.username or sasl.jaas.config)")
                if password is None:
                    raise fail("sasl.password", f"{mechanism} needs a password (sasl.password or sasl.jaas.config)")
            if mechanism == "OAUTHBEARER" and token_callback is None:
                raise fail("sasl.mechanism", "OAUTHBEARER needs a token callback, given in Python "
                           "(ClientSecurity.from_properties(..., token_callback=...) or OAuthCredentials)")
        return cls(
            protocol=protocol, mechanism=mechanism if protocol.startswith("SASL_") else None,
            username=username, password=password if isinstance(password, Secret) else None,
            ca_location=text("ssl.ca.location"), certificate_location=text("ssl.certificate.location"),
            key_location=text("ssl.key.location"), key_password=_secret(props.get("ssl.key.password")),
            check_hostname=algorithm is None or algorithm.lower() == "https",
            ssl_context=ssl_context, token_callback=token_callback,
            kerberos_service_name=text("sasl.kerberos.service.name") or "kafka",
            kerberos_domain_name=kerberos_domain_name, properties=props,
        )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> ClientSecurity:
        return cls.from_properties(read_properties_file(path), source=f" (in {path})")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ClientSecurity:
        return cls.from_properties(environment_properties(environ), label=env_name, source=" (environment)")

    def layered(self, over: Mapping[str, str], *, source: str = "", label: Callable[[str], str] = str) -> ClientSecurity:
        """This, with the settings of ``over`` put over its own, name by name, checked again.

        >>> base = ClientSecurity.from_properties({"security.protocol": "SASL_SSL",
        ...     "sasl.mechanism": "PLAIN", "sasl.username": "app", "sasl.password": "old"})
        >>> base.layered({"sasl.password": "new"}).password.reveal()
        'new'
        """
        if not over:
            return self

        def where(name: str) -> str:  # a name from ``over`` is named as ``over`` spells it
            return label(name) if name in over else name

        return ClientSecurity.from_properties(
            {**self.properties, **over}, source=source, label=where, ssl_context=self.ssl_context,
            token_callback=self.token_callback, kerberos_domain_name=self.kerberos_domain_name,
        )

    # -- what aiokafka takes ---------------------------------------------------------------

    def tls_context(self) -> ssl.SSLContext:
        """The TLS context of a client: the given one, or one from the PEM files (the system's
        CAs when ``ssl.ca.location`` is not set)."""
        if self.ssl_context is not None:
            return self.ssl_context
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_location)
        if not self.check_hostname:
            context.check_hostname = False
        if self.certificate_location is not None:
            password = self.key_password.reveal() if self.key_password is not None else None
            try:
                context.load_cert_chain(self.certificate_location, self.key_location, password)
            except ssl.SSLError as exc:
                raise ConfigError(f"ssl.certificate.location/ssl.key.location: cannot load the client certificate: {exc.reason or exc}") from exc
        return context

    def client_kwargs(self) -> dict[str, Any]:
        """aiokafka's keyword arguments for a client (the OAUTHBEARER callback as
        ``token_callback``: the Kafka driver wraps it in aiokafka's token provider)."""
        out: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_tls:
            try:
                out["ssl_context"] = self.tls_context()
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"ssl.ca.location: cannot load the CA certificates from {self.ca_location}: {exc}") from exc
        if self.uses_sasl:
            out["sasl_mechanism"] = self.mechanism
            if self.mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                out["sasl_plain_username"] = self.username
                out["sasl_plain_password"] = self.password.reveal() if self.password is not None else None
            elif self.mechanism == "OAUTHBEARER":
                out["token_callback"] = self.token_callback
            elif self.mechanism == "GSSAPI":
                out["sasl_kerberos_service_name"] = self.kerberos_service_name
                out["sasl_kerberos_domain_name"] = self.kerberos_domain_name
        if out == {"security_protocol": "PLAINTEXT"}:
            return {}
        return out


PLAINTEXT = ClientSecurity()


def _secret(value: str | Secret | None) -> Secret | None:
    return Secret(value) if isinstance(value, str) else value


def _unknown(name: str) -> str:
    if name.startswith(_JAVA_STORES):
        return "Java key and trust stores are not read: give PEM files (ssl.ca.location, ssl.certificate.location, ssl.key.location)"
    close = difflib.get_close_matches(name, NAMES, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown client security setting{hint} (known: {', '.join(NAMES)})"


def read_properties_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """A client properties file's settings; a missing or unreadable file is a ``ConfigError``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read client properties file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"client properties file {path} is not UTF-8 text") from exc
    return parse_properties(text, str(path))


def command_line_security(command_config: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> ClientSecurity:
    """A command's security: the environment's settings, with a ``--command-config`` file's over them."""
    security = ClientSecurity.from_environment(environ) if environment_properties(environ) else PLAINTEXT
    if command_config is None:
        return security
    return security.layered(read_properties_file(command_config), source=f" (in {command_config})")


def environment_properties(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings given in the environment (``env_name`` of each), by Kafka's names."""
    env = os.environ if environ is None else environ
    return {name: env[env_name(name)] for name in NAMES if env_name(name) in env}
