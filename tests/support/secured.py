"""A SASL_SSL listener for the Apache Kafka fixture (``tests/support/kafka.py``).

``make_tls(dir)`` makes, with ``openssl`` (a few milliseconds, P-256 keys), a test CA, a server
certificate signed by it for 127.0.0.1 and localhost (so hostname checking passes), and a
second CA that signed nothing (a client trusting only it must refuse the broker);
``make_client_cert`` signs a client certificate with the test CA (mTLS).
``listener_properties`` are the broker settings of a ``SASL_SSL`` listener: Kafka's PEM key
store (the server's PKCS#8 key and certificate chain in one file), SCRAM-SHA-256/512 and PLAIN
enabled, PLAIN users in the listener's JAAS config; ``scram_format_args`` are the
``kafka-storage format --add-scram`` arguments that create the SCRAM users in the metadata log
before the first start (KRaft keeps SCRAM credentials there).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

LISTENER = "SASL_SSL"
# user -> password; each is a SCRAM-SHA-256 and SCRAM-SHA-512 user and a PLAIN user.
USERS = {"alice": "alice-pw-Zq81xK", "bob": "bob-pw-Lm42vT"}
_CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True, slots=True)
class Tls:
    ca: Path  # the CA that signed the server's certificate (PEM)
    server: Path  # the server's private key and certificate, one PEM file (Kafka's PEM key store)
    other_ca: Path  # a CA that signed nothing here


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


# A leaf certificate's extensions as a strict verifier (Python 3.13's default) wants them.
_LEAF_EXTENSIONS = (
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
)


def make_tls(directory: Path) -> Tls:
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    for name in ("ca", "other-ca"):
        # The extensions Python 3.13's default context checks (VERIFY_X509_STRICT) on a CA.
        _openssl("req", "-x509", *_CURVE, "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.pem"),
                 "-days", "3", "-subj", f"/CN=streamkit test {name}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl("req", *_CURVE, "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"), "-subj", "/CN=localhost")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n" + _LEAF_EXTENSIONS + "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-out", str(d / "server.crt"), "-days", "3", "-extfile", str(d / "server.ext"))
    server = d / "server.pem"
    server.write_text((d / "server.key").read_text() + (d / "server.crt").read_text() + (d / "ca.pem").read_text())
    return Tls(ca=d / "ca.pem", server=server, other_ca=d / "other-ca.pem")


def make_client_cert(tls: Tls, name: str, subject: str) -> tuple[Path, Path]:
    """A client certificate signed by ``tls.ca`` for ``subject`` (``/O=.../CN=...``): (cert, key)."""
    d = tls.ca.parent
    key, csr, cert = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt"
    _openssl("req", *_CURVE, "-keyout", str(key), "-out", str(csr), "-subj", subject)
    ext = d / f"{name}.ext"
    ext.write_text(_LEAF_EXTENSIONS + "extendedKeyUsage=clientAuth\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(tls.ca), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-out", str(cert), "-days", "3", "-extfile", str(ext))
    return cert, key


def listener_properties(tls: Tls) -> dict[str, str]:
    """The broker settings of the ``SASL_SSL`` listener (its address is the caller's)."""
    prefix = f"listener.name.{LISTENER.lower()}."
    plain_users = " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    return {
        prefix + "ssl.keystore.type": "PEM",
        prefix + "ssl.keystore.location": str(tls.server),
        prefix + "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN,OAUTHBEARER",
        prefix + "plain.sasl.jaas.config": f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
        prefix + "scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        prefix + "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        # Kafka's default OAUTHBEARER validator takes unsecured JWTs (alg "none"): enough to hold the
        # client's token callback to the listener; a token without "exp" or "sub" is refused.
        prefix + "oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker";'
        ),
    }


def scram_format_args() -> list[str]:
    args = []
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        for name, password in USERS.items():
            args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return args
