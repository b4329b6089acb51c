"""``streamkit broker`` serving securely: SASL (PLAIN, SCRAM-SHA-256/512) over TLS to every client we
support, wrong passwords refused, nothing before authentication, mTLS, secure by default.

One broker for the module, started as users start it: users added with ``streamkit users add
--password-file``, then ``streamkit broker --listener PLAINTEXT://127.0.0.1:0 --listener
SASL_SSL://127.0.0.1:0 --listener SASL_PLAINTEXT://127.0.0.1:0 --ssl-keystore server.pem`` (the
test CA from ``tests/support/secured.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest_v5
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError

from tests.support import secured
from tests.support.broker import STREAMKIT, BrokerProcess, WireClient, assert_stops_cleanly

USER, PASSWORD = "alice", "alice-secret-7Hq2"
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
KCAT = shutil.which("kcat")
WAIT_S = 20
T = TypeVar("T")


def streamkit(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STREAMKIT), *args], input=stdin, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> secured.Tls:
    return secured.make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def sasl_broker(tls: secured.Tls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("secured") / "data"
    added = streamkit("users", "add", USER, "--data-dir", str(data_dir), "--password-file", "-", stdin=PASSWORD + "\n")
    assert added.returncode == 0, added.stderr
    broker = BrokerProcess(
        data_dir, "--listener", "PLAINTEXT://127.0.0.1:0", "--listener", "SASL_SSL://127.0.0.1:0",
        "--listener", "SASL_PLAINTEXT://127.0.0.1:0", "--ssl-keystore", str(tls.server),
    ).start()
    yield broker
    assert_stops_cleanly(broker)
    assert PASSWORD not in broker.stderr()


def sasl_bootstrap(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.listeners['SASL_SSL']}"


# -- aiokafka ---------------------------------------------------------------------------------


def _aiokafka_settings(broker: BrokerProcess, tls: secured.Tls, mechanism: str, password: str) -> dict[str, object]:
    return {
        "bootstrap_servers": sasl_bootstrap(broker),
        "security_protocol": "SASL_SSL",
        "ssl_context": ssl.create_default_context(cafile=str(tls.ca)),
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": password,
    }


async def _aiokafka_round_trip(settings: dict[str, object], topic: str) -> list[bytes]:
    producer = AIOKafkaProducer(**settings)  # type: ignore[arg-type]
    try:
        await producer.start()
        for i in range(3):
            await producer.send_and_wait(topic, f"v{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **settings)  # type: ignore[arg-type]
    await consumer.start()
    try:
        got: list[bytes] = []
        while len(got) < 3:
            record = await asyncio.wait_for(consumer.getone(), WAIT_S)
            assert record.value is not None
            got.append(record.value)
        return got
    finally:
        await consumer.stop()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_produces_and_consumes_over_sasl_ssl(sasl_broker: BrokerProcess, tls: secured.Tls, mechanism: str) -> None:
    topic = f"aio-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    settings = _aiokafka_settings(sasl_broker, tls, mechanism, PASSWORD)
    assert asyncio.run(_aiokafka_round_trip(settings, topic)) == [b"v0", b"v1", b"v2"]


def test_aiokafka_over_sasl_plaintext(sasl_broker: BrokerProcess) -> None:
    settings = {
        "bootstrap_servers": f"127.0.0.1:{sasl_broker.listeners['SASL_PLAINTEXT']}", "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": USER, "sasl_plain_password": PASSWORD,
    }
    assert asyncio.run(_aiokafka_round_trip(settings, f"aio-sasl-plain-{uuid.uuid4().hex[:6]}")) == [b"v0", b"v1", b"v2"]


def test_aiokafka_wrong_password_is_refused(sasl_broker: BrokerProcess, tls: secured.Tls) -> None:
    settings = _aiokafka_settings(sasl_broker, tls, "SCRAM-SHA-256", "not-the-password")
    with pytest.raises(KafkaError):
        asyncio.run(_aiokafka_round_trip(settings, "never"))
    assert "not-the-password" not in sasl_broker.stderr()


# -- confluent-kafka (librdkafka 2.x) -----------------------------------------------------------


def _confluent(broker: BrokerProcess, tls: secured.Tls, mechanism: str, password: str) -> dict[str, object]:
    return {
        "bootstrap.servers": sasl_bootstrap(broker),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": USER,
        "sasl.password": password,
        "ssl.ca.location": str(tls.ca),
    }


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_and_consumes_over_sasl_ssl(
    sasl_broker: BrokerProcess, tls: secured.Tls, mechanism: str
) -> None:
    topic = f"ck-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    settings = _confluent(sasl_broker, tls, mechanism, PASSWORD)
    producer = Producer(settings)
    for i in range(3):
        producer.produce(topic, f"c{i}".encode())
    assert producer.flush(WAIT_S) == 0
    consumer = Consumer({**settings, "group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        for _ in range(200):
            if len(got) == 3:
                break
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                value = message.value()
                assert value is not None
                got.append(value)
        assert got == [b"c0", b"c1", b"c2"]
    finally:
        consumer.close()


def test_confluent_kafka_wrong_password_is_refused(sasl_broker: BrokerProcess, tls: secured.Tls) -> None:
    errors: list[str] = []
    settings = _confluent(sasl_broker, tls, "SCRAM-SHA-512", "not-the-password")
    producer = Producer({**settings, "error_cb": lambda err: errors.append(str(err))})
    producer.produce("never", b"x")
    for _ in range(50):
        producer.poll(0.1)
        if errors:
            break
    assert any("Authentication failed" in e or "SASL authentication error" in e for e in errors), errors
    producer.purge()
    producer.flush(1)


# -- kafka-python -----------------------------------------------------------------------------


def _kafka_python(broker: BrokerProcess, tls: secured.Tls, mechanism: str, password: str) -> dict[str, object]:
    return {
        "bootstrap_servers": sasl_bootstrap(broker),
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(tls.ca),
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": password,
    }


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_produces_and_consumes_over_sasl_ssl(
    sasl_broker: BrokerProcess, tls: secured.Tls, mechanism: str
) -> None:
    topic = f"kp-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    settings = _kafka_python(sasl_broker, tls, mechanism, PASSWORD)
    producer = KafkaProducer(**settings)
    try:
        for i in range(3):
            producer.send(topic, f"k{i}".encode()).get(timeout=WAIT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=WAIT_S * 1000, **settings)
    try:
        got = []
        for record in consumer:
            got.append(record.value)
            if len(got) == 3:
                break
        assert got == [b"k0", b"k1", b"k2"]
    finally:
        consumer.close()


def test_kafka_python_wrong_password_is_refused(sasl_broker: BrokerProcess, tls: secured.Tls) -> None:
    settings = _kafka_python(sasl_broker, tls, "PLAIN", "not-the-password")
    # kafka-python retries a refused login until its bootstrap timeout, then gives up.
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(**settings, bootstrap_timeout_ms=3000)


# -- kcat (Debian's, an older librdkafka) -------------------------------------------------------


def _kcat(broker: BrokerProcess, tls: secured.Tls, mechanism: str, password: str, *args: str,
          stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    assert KCAT is not None
    return subprocess.run(
        [KCAT, "-b", sasl_bootstrap(broker), "-X", "security.protocol=SASL_SSL", "-X", f"sasl.mechanisms={mechanism}",
         "-X", f"sasl.username={USER}", "-X", f"sasl.password={password}", "-X", f"ssl.ca.location={tls.ca}", *args],
        input=stdin, capture_output=True, timeout=WAIT_S, check=False,
    )


@pytest.mark.skipif(KCAT is None, reason="kcat not installed (scripts/install-system-deps.sh)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_produces_and_consumes_over_sasl_ssl(sasl_broker: BrokerProcess, tls: secured.Tls, mechanism: str) -> None:
    topic = f"kc-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    done = _kcat(sasl_broker, tls, mechanism, PASSWORD, "-P", "-t", topic, stdin=b"a\nb\nc\n")
    assert done.returncode == 0, done.stderr.decode()
    done = _kcat(sasl_broker, tls, mechanism, PASSWORD, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == ["a", "b", "c"]


@pytest.mark.skipif(KCAT is None, reason="kcat not installed (scripts/install-system-deps.sh)")
def test_kcat_wrong_password_is_refused(sasl_broker: BrokerProcess, tls: secured.Tls) -> None:
    done = _kcat(sasl_broker, tls, "SCRAM-SHA-256", "not-the-password", "-L", "-m", "2")
    assert done.returncode != 0
    assert b"Authentication failed" in done.stderr, done.stderr.decode()


# -- nothing before authentication --------------------------------------------------------------


def _tls_socket(port: int, tls: secured.Tls) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(tls.ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def _request(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    client_id = b"raw"
    header = struct.pack(">hhih", api_key, version, correlation, len(client_id)) + client_id
    return struct.pack(">i", len(header) + len(body)) + header + body


def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_a_request_before_authentication_closes_the_connection(sasl_broker: BrokerProcess, tls: secured.Tls) -> None:
    with _tls_socket(sasl_broker.listeners["SASL_SSL"], tls) as sock:
        # ApiVersions v0 is answered (clients ask it before the handshake) ...
        sock.sendall(_request(18, 0, 1, b""))
        size = struct.unpack(">i", sock.recv(4))[0]
        assert size > 0
        # ... Metadata v1 for every topic is not: the connection closes without an answer.
        body = b""
        while len(body) < size:
            body += sock.recv(size - len(body))
        sock.sendall(_request(3, 1, 2, struct.pack(">i", -1)))
        assert _read_all(sock) == b""


def test_an_unknown_mechanism_is_refused_with_the_enabled_ones(sasl_broker: BrokerProcess, tls: secured.Tls) -> None:
    with _tls_socket(sasl_broker.listeners["SASL_SSL"], tls) as sock:
        mechanism = b"GSSAPI"
        sock.sendall(_request(17, 1, 1, struct.pack(">h", len(mechanism)) + mechanism))
        answer = _read_all(sock)  # the answer, then the close
    (size, correlation, error) = struct.unpack(">iih", answer[:10])
    assert (size, correlation, error) == (len(answer) - 4, 1, 33)  # UNSUPPORTED_SASL_MECHANISM
    assert b"SCRAM-SHA-256" in answer and b"PLAIN" in answer


def test_the_plaintext_listener_of_the_same_broker_still_serves(sasl_broker: BrokerProcess) -> None:
    topic = f"plain-{uuid.uuid4().hex[:6]}"

    async def round_trip() -> list[bytes]:
        return await _aiokafka_round_trip({"bootstrap_servers": sasl_broker.bootstrap}, topic)

    assert asyncio.run(round_trip()) == [b"v0", b"v1", b"v2"]


# -- mTLS ---------------------------------------------------------------------------------------


def test_mtls_required_refuses_a_client_without_a_certificate(tls: secured.Tls, tmp_path: Path) -> None:
    cert, key = secured.make_client_cert(tls, "client-alice", "/O=streamkit/CN=alice")
    broker = BrokerProcess(
        tmp_path / "data", "--listener", "SSL://127.0.0.1:0", "--ssl-keystore", str(tls.server),
        "--ssl-truststore", str(tls.ca), "--ssl-client-auth", "required",
    ).start()
    try:
        port = broker.listeners["SSL"]
        no_cert = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL", "ssl.ca.location": str(tls.ca)}
        errors: list[str] = []
        producer = Producer({**no_cert, "error_cb": lambda err: errors.append(str(err))})
        producer.produce("mtls", b"refused")
        assert producer.flush(3) == 1  # never delivered
        producer.purge()
        with_cert = {**no_cert, "ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
        producer = Producer(with_cert)
        producer.produce("mtls", b"accepted")
        assert producer.flush(WAIT_S) == 0
        assert errors, "the client without a certificate saw no error"
    finally:
        assert_stops_cleanly(broker)


# -- secure by default, damaged credentials ------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("--listener", "PLAINTEXT://0.0.0.0:0"),
        ("--host", "0.0.0.0", "--port", "0"),
    ],
)
def test_an_unauthenticated_listener_beyond_loopback_is_refused(args: tuple[str, ...], tmp_path: Path) -> None:
    done = streamkit("broker", "--data-dir", str(tmp_path / "data"), *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to serve PLAINTEXT on 0.0.0.0" in lines[0] and "--allow-insecure" in lines[0]
    assert "Traceback" not in done.stderr


def test_allow_insecure_serves_beyond_loopback(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "--listener", "PLAINTEXT://0.0.0.0:0", "--allow-insecure").start()
    try:
        # Bound on every address: a client reaches it through loopback and gets its metadata.
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.listeners['PLAINTEXT']}"}).list_topics(timeout=10)
        assert len(metadata.brokers) == 1
    finally:
        assert_stops_cleanly(broker)


def test_a_damaged_credential_file_stops_the_broker_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    added = streamkit("users", "add", "bob", "--data-dir", str(data_dir), "--password-file", "-", stdin="bob-pw-1\n")
    assert added.returncode == 0, added.stderr
    path = data_dir / ".broker" / "credentials.json"
    path.write_bytes(path.read_bytes().replace(b'"iterations": 8192', b'"iterations": 4096', 1))
    done = streamkit("broker", "--data-dir", str(data_dir), "--port", "0")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"streamkit: error: the credential file {path} is damaged (checksum mismatch)"]


def test_users_refuses_a_directory_a_broker_serves(sasl_broker: BrokerProcess) -> None:
    done = streamkit("users", "list", "--data-dir", str(sasl_broker.data_dir))
    assert done.returncode == 2
    assert done.stderr.startswith("streamkit: error: a running process (pid ") and "kafka-configs --alter" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_users_add_list_delete(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    password_file = tmp_path / "pw"
    password_file.write_text("carol-pw-Zx1\n")
    done = streamkit("users", "add", "carol", "--data-dir", data_dir, "--password-file", str(password_file),
                     "--mechanism", "SCRAM-SHA-512", "--iterations", "4096")
    assert done.returncode == 0, done.stderr
    listed = streamkit("users", "list", "--data-dir", data_dir)
    assert listed.stdout == "carol\tSCRAM-SHA-512 iterations=4096\n"
    stored = (tmp_path / "data" / ".broker" / "credentials.json").read_text()
    assert "carol-pw-Zx1" not in stored and "carol-pw-Zx1" not in done.stdout + done.stderr
    assert streamkit("users", "delete", "carol", "--data-dir", data_dir).returncode == 0
    assert streamkit("users", "list", "--data-dir", data_dir).stdout == ""
    missing = streamkit("users", "delete", "carol", "--data-dir", data_dir)
    assert missing.returncode == 2 and missing.stderr.strip() == "streamkit: error: no user carol"



# -- users made with AlterUserScramCredentials, a restart, a streamkit worker ----------------------


def test_a_user_added_over_the_wire_logs_in_and_survives_a_restart(sasl_broker: BrokerProcess, tls: secured.Tls) -> None:
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    upsert = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-pw-5")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(WAIT_S)
    sasl_broker.stop()
    sasl_broker.start()
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):  # PLAIN is checked against the SCRAM credential
        settings = {**_aiokafka_settings(sasl_broker, tls, mechanism, "dave-pw-5"), "sasl_plain_username": "dave"}
        topic = f"dave-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
        assert asyncio.run(_aiokafka_round_trip(settings, topic)) == [b"v0", b"v1", b"v2"]
    refused = {**_aiokafka_settings(sasl_broker, tls, "SCRAM-SHA-256", "dave-pw-5"), "sasl_plain_username": "dave"}
    with pytest.raises(KafkaError):  # no SCRAM-SHA-256 credential was made for dave
        asyncio.run(_aiokafka_round_trip(refused, "never"))


def test_a_streamkit_worker_on_the_sasl_ssl_listener_configured_from_the_environment(
    sasl_broker: BrokerProcess, tls: secured.Tls, tmp_path: Path
) -> None:
    app_id = f"sk-secured-{uuid.uuid4().hex[:6]}"
    root = Path(__file__).resolve().parents[3]
    env = {
        **os.environ, "SECURED_APP_ID": app_id, "SECURED_BROKER": f"kafka://{sasl_bootstrap(sasl_broker)}",
        "STREAMKIT_SECURITY_PROTOCOL": "SASL_SSL", "STREAMKIT_SASL_MECHANISM": "SCRAM-SHA-256",
        "STREAMKIT_SASL_USERNAME": USER, "STREAMKIT_SASL_PASSWORD": PASSWORD, "STREAMKIT_SSL_CA_LOCATION": str(tls.ca),
        "PYTHONPATH": f"{root / 'tests' / 'support' / 'apps'}{os.pathsep}{root}",
    }
    log = tmp_path / "worker.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [str(STREAMKIT), "worker", "-A", "secured_wordcount_app:app", "--web-port", "0", "--progress-interval", "0",
             "--state-dir", str(tmp_path / "state")],
            env=env, stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp_path,
        )
    try:
        url = _wait_for(lambda: re.search(r"web: (http://\S+)", log.read_text()) if "assigned " in log.read_text() else None,
                        proc, log)
        producer = Producer({"bootstrap.servers": sasl_broker.bootstrap})  # the test's records: PLAINTEXT listener
        for line in ("a b a", "b a"):
            producer.produce(f"{app_id}-lines", json.dumps(line).encode())
        assert producer.flush(WAIT_S) == 0
        _wait_for(lambda: _count(url.group(1), "a") == 3 and _count(url.group(1), "b") == 2, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    text = log.read_text()
    assert code == 0 and "Traceback" not in text, text[-3000:]
    assert PASSWORD not in text


def _wait_for(check: Callable[[], T | bool | None], proc: subprocess.Popen[bytes], log: Path) -> T:
    deadline = time.monotonic() + 60
    while True:
        found = check()
        if found:
            return found  # type: ignore[return-value]
        assert proc.poll() is None, f"the worker exited:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def _count(url: str, word: str) -> int | None:
    try:
        with urllib.request.urlopen(f"{url}/tables/word_counts/{word}", timeout=5) as answer:
            return int(json.loads(answer.read())["value"])
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 503):
            return None
        raise


def test_a_server_properties_file_and_the_advertised_listener_of_each_connection(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "# Kafka's names\n"
        "listeners=PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0\n"
        "listener.security.protocol.map=OTHER:PLAINTEXT\n"
        "advertised.listeners=OTHER://other.example:19092\n"
        "num.partitions=3\n"
        "zookeeper.connect=unused:2181\n"
    )
    broker = BrokerProcess(tmp_path / "data", "--config", str(config)).start()
    try:
        assert set(broker.listeners) == {"PLAINTEXT", "OTHER"}
        advertised = {}
        for name, port in broker.listeners.items():
            with WireClient("127.0.0.1", port) as wire:
                response = wire.call(MetadataRequest_v5(topics=[], allow_auto_topic_creation=False))
            advertised[name] = [(host, port) for _, host, port, _ in response.brokers]
        assert advertised == {"PLAINTEXT": [("127.0.0.1", broker.listeners["PLAINTEXT"])],
                              "OTHER": [("other.example", 19092)]}
    finally:
        assert_stops_cleanly_but_for(broker, "zookeeper.connect is not used")


def assert_stops_cleanly_but_for(broker: BrokerProcess, expected: str) -> None:
    assert expected in broker.stderr()
    assert_stops_cleanly(broker)


def test_sasl_users_are_the_principals_the_acls_decide_on(tls: secured.Tls, tmp_path: Path) -> None:
    """TLS/SASL and the authorizer together: the principal of a SASL login (``User:bob``) is
    what the ACLs name. bob may read and write topics prefixed ``bob-``; the super user may do
    anything; bob's write to another topic is refused with TOPIC_AUTHORIZATION_FAILED."""
    data_dir = tmp_path / "data"
    users = {"admin": "admin-secret-4Kp", "bob": "bob-secret-9Zr"}
    for user, password in users.items():
        added = streamkit("users", "add", user, "--data-dir", str(data_dir), "--password-file", "-", stdin=password + "\n")
        assert added.returncode == 0, added.stderr
    granted = streamkit(
        "acls", "add", "--data-dir", str(data_dir), "--allow-principal", "User:bob", "--topic", "bob-",
        "--resource-pattern-type", "prefixed", "--operation", "read", "--operation", "write", "--operation", "create",
    )
    assert granted.returncode == 0, granted.stderr
    broker = BrokerProcess(
        data_dir, "--listener", "SASL_SSL://127.0.0.1:0", "--ssl-keystore", str(tls.server),
        "--authorizer", "--super-user", "User:admin",
    ).start()
    try:
        def login(user: str) -> dict[str, object]:
            return {
                "bootstrap.servers": sasl_bootstrap(broker), "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": users[user],
                "ssl.ca.location": str(tls.ca), "message.timeout.ms": 10_000,
            }

        def produce(user: str, topic: str) -> str | None:
            outcome: list[str | None] = []
            producer = Producer(login(user))
            producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(None if err is None else err.name()))
            producer.flush(WAIT_S)
            assert len(outcome) == 1
            return outcome[0]

        assert produce("bob", "bob-orders") is None
        assert produce("bob", "shop-orders") == "TOPIC_AUTHORIZATION_FAILED"
        assert produce("admin", "shop-orders") is None  # a super user
    finally:
        assert_stops_cleanly(broker)
    assert not any(p in broker.stderr() for p in users.values())
