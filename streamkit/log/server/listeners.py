"""Listeners in Kafka's syntax, the broker's TLS settings and the secure-by-default rule.

A listener is ``NAME://HOST:PORT`` (Kafka's ``listeners``): NAME is a security protocol
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) or a name that ``listener.security.protocol.map``
maps to one; an empty HOST means every interface (Kafka's too). ``advertised.listeners``
gives, per listener name, the address Metadata and FindCoordinator tell clients who came in
on that listener (default: the listener's own host, and its bound port).

Secure by default (``check_secure``): a listener on a non-loopback address must
authenticate its clients, with SASL or with TLS client certificates required
(``ssl.client.auth=required``); PLAINTEXT, or SSL without required client certificates, on
such an address is refused unless ``allow_insecure``.

Plain values and parsing here; ``server_ssl_context`` reads the certificate files.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from streamkit._core.errors import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_AUTH = ("none", "requested", "required")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(?P<port>\d{1,5})$")


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    security_protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """Kafka's ``ssl.*`` settings of the broker, PEM files only.

    ``keystore``: the private key and certificate chain in one PEM file (Kafka's
    ``ssl.keystore.type=PEM`` key store), or ``certificate`` + ``key`` as two files;
    ``truststore``: the CAs client certificates must chain to (needed unless
    ``client_auth="none"``).
    """

    keystore: Path | None = None
    certificate: Path | None = None
    key: Path | None = None
    key_password: str | None = field(default=None, repr=False)
    truststore: Path | None = None
    client_auth: str = "none"

    def __post_init__(self) -> None:
        if self.client_auth not in CLIENT_AUTH:
            raise ConfigError(f"ssl.client.auth must be one of {', '.join(CLIENT_AUTH)}, not {self.client_auth!r}")
        if self.keystore is None and self.certificate is None:
            raise ConfigError("a TLS listener needs ssl.keystore.location (PEM key and certificate)")
        if self.client_auth != "none" and self.truststore is None:
            raise ConfigError(f"ssl.client.auth={self.client_auth} needs ssl.truststore.location (the client CAs)")


def _default_map() -> dict[str, str]:
    return {p: p for p in SECURITY_PROTOCOLS}


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...``."""
    out = _default_map()
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"bad listener.security.protocol.map entry {item!r}")
        out[name.upper()] = protocol.upper()
    return out


def _parse_one(text: str) -> tuple[str, str, int]:
    match = _LISTENER.match(text.strip())
    if match is None:
        raise ConfigError(f"bad listener {text!r}: expected NAME://HOST:PORT, e.g. SASL_SSL://127.0.0.1:9093")
    port = int(match["port"])
    if port > 65535:
        raise ConfigError(f"bad listener {text!r}: port above 65535")
    return match["name"].upper(), match["host"].strip("[]"), port


def parse_listeners(
    texts: list[str], protocol_map: dict[str, str] | None = None, advertised: list[str] | None = None
) -> tuple[Listener, ...]:
    """Listeners from ``NAME://HOST:PORT`` strings (each may be a comma-separated list)."""
    mapping = protocol_map or _default_map()
    ads: dict[str, tuple[str, int]] = {}
    for text in _items(advertised or []):
        name, host, port = _parse_one(text)
        ads[name] = (host, port)
    out: list[Listener] = []
    for text in _items(texts):
        name, host, port = _parse_one(text)
        protocol = mapping.get(name)
        if protocol is None:
            raise ConfigError(f"listener {name} has no security protocol (add it to listener.security.protocol.map)")
        if any(seen.name == name for seen in out):
            raise ConfigError(f"listener name {name} is given twice")
        ad_host, ad_port = ads.pop(name, (None, None))
        out.append(Listener(name, protocol, host, port, ad_host, ad_port))
    if ads:
        raise ConfigError(f"advertised.listeners names {', '.join(sorted(ads))}, which is not a listener")
    if len({(lst.host, lst.port) for lst in out if lst.port}) < len([lst for lst in out if lst.port]):
        raise ConfigError("two listeners have the same address")
    return tuple(out)


def _items(texts: list[str]) -> list[str]:
    return [item for text in texts for item in (s.strip() for s in text.split(",")) if item]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "" (every interface), 0.0.0.0 is an address; any other name may be anything


def check_secure(
    listeners: tuple[Listener, ...], tls: TlsSettings | None, sasl_mechanisms: tuple[str, ...], *, allow_insecure: bool
) -> None:
    """Refuse a configuration that would serve the log unauthenticated beyond this host."""
    for listener in listeners:
        if listener.tls and tls is None:
            raise ConfigError(f"listener {listener} uses TLS but no ssl.keystore.location is set")
        if listener.sasl and not sasl_mechanisms:
            raise ConfigError(f"listener {listener} uses SASL but sasl.enabled.mechanisms is empty")
        if allow_insecure or is_loopback(listener.host) or listener.sasl:
            continue
        if listener.tls and tls is not None and tls.client_auth == "required":
            continue
        where = listener.host or "every interface"
        raise ConfigError(
            f"refusing to serve {listener.security_protocol} on {where}: clients there would not be "
            "authenticated (use SASL_SSL, SSL with ssl.client.auth=required, a loopback address, "
            "or --allow-insecure)"
        )


def check_mechanisms(mechanisms: tuple[str, ...]) -> tuple[str, ...]:
    for mechanism in mechanisms:
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"SASL mechanism {mechanism!r} is not served (only {', '.join(SASL_MECHANISMS)})")
    return mechanisms


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """The server side TLS context; a file that cannot be read is one ``ConfigError`` line."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    certificate = tls.keystore or tls.certificate
    assert certificate is not None
    try:
        context.load_cert_chain(str(certificate), str(tls.key) if tls.key else None, password=tls.key_password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS key store {certificate}: {_reason(exc)}") from exc
    if tls.truststore is not None:
        try:
            context.load_verify_locations(cafile=str(tls.truststore))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the TLS trust store {tls.truststore}: {_reason(exc)}") from exc
    context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[
        tls.client_auth
    ]
    return context


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        if "PEM lib" in str(exc):  # OpenSSL's word for "no key, or no certificate, in it"
            return "not a PEM file with a private key and its certificate (or a wrong ssl.key.password)"
        return exc.reason or str(exc)
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


# RFC 2253 keywords Java's X500Principal.getName() writes (DefaultKafkaPrincipalBuilder's name).
_RDN_KEYWORDS = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _escape_rdn_value(value: str) -> str:
    out = "".join("\\" + ch if ch in ',+"\\<>;' else ch for ch in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def principal_from_certificate(cert: dict[str, object] | None) -> str:
    """Kafka's principal for a TLS client: ``User:`` + the subject DN in RFC 2253 order (most
    specific first, as ``X500Principal.getName()`` under the DEFAULT ``ssl.principal.mapping.rules``),
    or ``User:ANONYMOUS`` without a certificate.

    Known difference: an attribute type outside Java's RFC 2253 keywords (``emailAddress``, ...)
    is written here by its name and value, where Java writes its OID and DER bytes in hex.
    """
    subject = cert.get("subject") if cert else None
    if not subject or not isinstance(subject, tuple):
        return "User:ANONYMOUS"
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RDN_KEYWORDS.get(k, k)}={_escape_rdn_value(v)}" for k, v in rdn))
    return "User:" + ",".join(rdns)
