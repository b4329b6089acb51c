"""SCRAM, the credential store, listeners and server.properties: the plain code of broker security."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from streamkit._core.errors import ConfigError
from streamkit.log.server.credentials import CredentialStore
from streamkit.log.server.errors import CredentialStoreError, ScramError
from streamkit.log.server.listeners import (
    Listener,
    TlsSettings,
    check_secure,
    parse_listeners,
    parse_protocol_map,
    principal_from_certificate,
    server_ssl_context,
)
from streamkit.log.server.scram import (
    SHA_256,
    SHA_512,
    ScramServer,
    credential_from_salted,
    make_credential,
    salted_password,
)
from streamkit.log.server.server_properties import read_server_properties

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credentials() -> dict[str, object]:
    return {"user": make_credential(SHA_256, "pencil", 4096, RFC_SALT)}


def test_the_rfc_7677_exchange() -> None:
    server = ScramServer(SHA_256, nonce=RFC_SERVER_NONCE)
    assert server.first(RFC_CLIENT_FIRST, rfc_credentials()) == RFC_SERVER_FIRST  # type: ignore[arg-type]
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.username == "user"


def test_a_wrong_proof_an_unknown_user_and_a_bad_binding_are_refused() -> None:
    wrong_proof = RFC_CLIENT_FINAL[:-8] + b"AAAAAAA="
    server = ScramServer(SHA_256, nonce=RFC_SERVER_NONCE)
    server.first(RFC_CLIENT_FIRST, rfc_credentials())  # type: ignore[arg-type]
    with pytest.raises(ScramError, match="invalid credentials"):
        server.final(wrong_proof)
    assert server.username is None
    # An unknown user is refused at once, as Kafka refuses it (the client is told the same).
    with pytest.raises(ScramError, match="no such user"):
        ScramServer(SHA_256, nonce=RFC_SERVER_NONCE).first(b"n,,n=mallory,r=rOprNGfwEbeRWgbNEkqO", {})
    with pytest.raises(ScramError, match="authorization identity") as refused:
        ScramServer(SHA_256).first(b"n,a=bob,n=user,r=a", rfc_credentials())  # type: ignore[arg-type]
    assert refused.value.client_message == (
        "Authentication failed: Client requested an authorization id that is different from username")
    # Extensions after the nonce are allowed (Kafka's tokenauth=true), malformed ones are not.
    ScramServer(SHA_256).first(b"n,,n=user,r=a,tokenauth=true", rfc_credentials())  # type: ignore[arg-type]
    for first in (b"y,,n=user,r=a", b"p=tls-unique,,n=user,r=a", b"n,,m=ext,n=user,r=a", b"n,,n=user,r=a,junk",
                  b"n,,n=us=er,r=a", b"garbage", b"\xff\xfe", b"n,,n=user,r=" + b"a" * 5000):
        with pytest.raises(ScramError):
            ScramServer(SHA_256).first(first, rfc_credentials())  # type: ignore[arg-type]
    server = ScramServer(SHA_256, nonce=RFC_SERVER_NONCE)
    server.first(RFC_CLIENT_FIRST, rfc_credentials())  # type: ignore[arg-type]
    with pytest.raises(ScramError, match="channel binding"):
        server.final(RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"))
    with pytest.raises(ScramError, match="unexpected"):
        ScramServer(SHA_256).final(RFC_CLIENT_FINAL)


def test_credentials_are_what_kafka_stores() -> None:
    # StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key")
    salted = salted_password(SHA_512, "pw", b"salt", 4096)
    credential = credential_from_salted(SHA_512, salted, b"salt", 4096)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    assert credential.stored_key == hashlib.sha512(client_key).digest()
    assert credential.server_key == hmac.new(salted, b"Server Key", "sha512").digest()
    with pytest.raises(ScramError, match="4096-16384"):
        make_credential(SHA_256, "pw", 1000)


def test_the_store_survives_a_reload_checks_plain_and_detects_damage(tmp_path: Path) -> None:
    store = CredentialStore.for_data_dir(tmp_path)
    store.set_password("alice", "alice-pw", 4096, (SHA_256, SHA_512))
    store.set_password("bob", "bob-pw", 4096, (SHA_256,))
    store.save()
    text = store.path.read_text()
    assert "alice-pw" not in text and "bob-pw" not in text
    loaded = CredentialStore.for_data_dir(tmp_path).load()
    assert loaded.users() == store.users()
    assert loaded.check_plain("alice", "alice-pw") and loaded.check_plain("bob", "bob-pw")
    assert not loaded.check_plain("alice", "bob-pw") and not loaded.check_plain("nobody", "x")
    body = json.loads(text)
    body["users"]["alice"]["SCRAM-SHA-256"]["iterations"] = 4097
    store.path.write_text(json.dumps(body))
    with pytest.raises(CredentialStoreError, match="checksum mismatch"):
        CredentialStore.for_data_dir(tmp_path).load()
    store.path.write_bytes(b"\x00garbage")
    with pytest.raises(CredentialStoreError, match="damaged"):
        CredentialStore.for_data_dir(tmp_path).load()


def test_listeners_in_kafkas_syntax() -> None:
    listeners = parse_listeners(
        ["PLAINTEXT://127.0.0.1:9092,CLIENTS://:9093", "SASL_SSL://[::1]:9094"],
        parse_protocol_map("CLIENTS:SASL_SSL"),
        ["CLIENTS://broker.example:19093"],
    )
    assert listeners == (
        Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),
        Listener("CLIENTS", "SASL_SSL", "", 9093, "broker.example", 19093),
        Listener("SASL_SSL", "SASL_SSL", "::1", 9094),
    )
    for bad, message in [
        (["PLAINTEXT:/127.0.0.1:9092"], "expected NAME://HOST:PORT"),
        (["INTERNAL://127.0.0.1:9092"], "no security protocol"),
        (["PLAINTEXT://127.0.0.1:99999"], "port above 65535"),
        (["PLAINTEXT://127.0.0.1:1", "PLAINTEXT://127.0.0.1:2"], "given twice"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_listeners(bad)


def test_secure_by_default() -> None:
    tls = TlsSettings(keystore=Path("k.pem"), truststore=Path("ca.pem"), client_auth="required")
    mechanisms = ("SCRAM-SHA-256",)
    ok = ["PLAINTEXT://127.0.0.1:1", "PLAINTEXT://localhost:2", "SASL_SSL://0.0.0.0:3", "SSL://10.0.0.1:4",
          "SASL_PLAINTEXT://:5"]
    for listener in ok:
        check_secure(parse_listeners([listener]), tls, mechanisms, allow_insecure=False)
    for refused in ["PLAINTEXT://0.0.0.0:1", "PLAINTEXT://:1", "PLAINTEXT://10.1.2.3:1"]:
        with pytest.raises(ConfigError, match="refusing to serve PLAINTEXT"):
            check_secure(parse_listeners([refused]), None, mechanisms, allow_insecure=False)
        check_secure(parse_listeners([refused]), None, mechanisms, allow_insecure=True)
    no_client_auth = TlsSettings(keystore=Path("k.pem"))
    with pytest.raises(ConfigError, match="refusing to serve SSL"):
        check_secure(parse_listeners(["SSL://0.0.0.0:1"]), no_client_auth, mechanisms, allow_insecure=False)
    with pytest.raises(ConfigError, match=r"no ssl\.keystore\.location"):
        check_secure(parse_listeners(["SSL://127.0.0.1:1"]), None, mechanisms, allow_insecure=False)
    with pytest.raises(ConfigError, match=r"needs ssl\.truststore\.location"):
        TlsSettings(keystore=Path("k.pem"), client_auth="required")


def test_the_certificate_principal_is_the_subject_as_java_spells_it() -> None:
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc."),), (("commonName", "alice"),))}
    assert principal_from_certificate(cert) == "User:CN=alice,O=Acme\\, Inc.,C=US"
    assert principal_from_certificate({}) == "User:ANONYMOUS"
    assert principal_from_certificate(None) == "User:ANONYMOUS"


def test_server_properties(tmp_path: Path) -> None:
    text = (
        "listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093\n"
        "advertised.listeners=SASL_SSL://kafka.example:9093\n"
        "ssl.keystore.type=PEM\nssl.keystore.location=server.pem\nssl.key.password=s3cret\n"
        "ssl.truststore.location=/etc/ca.pem\nssl.client.auth=requested\n"
        "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN\nsuper.users=User:admin;User:ops\n"
        "num.partitions=3\nlog.dirs=data\nzookeeper.connect=ignored:2181\n"
    )
    props = read_server_properties(text, "server.properties", tmp_path)
    assert props.settings["listeners"][1] == Listener("SASL_SSL", "SASL_SSL", "0.0.0.0", 9093, "kafka.example", 9093)
    tls = props.settings["tls"]
    assert (tls.keystore, tls.truststore, tls.client_auth, tls.key_password) == (
        tmp_path / "server.pem", Path("/etc/ca.pem"), "requested", "s3cret")
    assert "s3cret" not in repr(tls)
    assert props.settings["sasl_mechanisms"] == ("SCRAM-SHA-512", "PLAIN")
    assert props.settings["default_partitions"] == 3 and props.data_dir == tmp_path / "data"
    # without an authorizer super.users means nothing (as in Kafka): said as not used
    assert "super_users" not in props.settings and "authorizer" not in props.settings
    assert props.unknown == ["super.users", "zookeeper.connect"]
    authorized = read_server_properties(
        text + "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n"
        "allow.everyone.if.no.acl.found=true\n", "server.properties", tmp_path)
    assert authorized.settings["authorizer"] is True and authorized.settings["allow_everyone_if_no_acl_found"] is True
    assert authorized.settings["super_users"] == frozenset({"User:admin", "User:ops"})
    assert authorized.unknown == ["zookeeper.connect"]
    for bad, message in [
        ("ssl.keystore.type=JKS\n", "PEM files only"),
        ("listener.name.sasl_ssl.ssl.keystore.location=x\n", "per-listener settings"),
        ("num.partitions=many\n", "must be an integer"),
    ]:
        with pytest.raises(ConfigError, match=message):
            read_server_properties(bad, "server.properties", tmp_path)



def test_an_unusable_key_store_is_one_line(tmp_path: Path) -> None:
    not_pem = tmp_path / "server.pem"
    not_pem.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="not a PEM file with a private key and its certificate"):
        server_ssl_context(TlsSettings(keystore=not_pem))
    with pytest.raises(ConfigError, match="No such file or directory"):
        server_ssl_context(TlsSettings(keystore=tmp_path / "missing.pem"))
