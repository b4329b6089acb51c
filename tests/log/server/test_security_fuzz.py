"""The TLS and SASL handshakes under abuse, while an authenticated producer keeps producing.

A broker in this process (so its authentication timeout can be short) with a SASL_SSL
listener; an aiokafka producer logged in with SCRAM-SHA-256 sends all along. Each abuse opens
its own connection and must end with the broker closing it, having answered nothing but
ApiVersions and the SASL APIs: truncated, oversized and garbage frames and TLS records, the
SASL steps in the wrong order, wrong and malformed tokens, clients that stall. Afterwards the
producer has kept getting acknowledgements and no abuser's request reached the log.

Also here: mTLS principals (``Session.principal``, what the authorizer reads) and a
``streamkit worker`` whose client settings come from STREAMKIT_* variables.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streamkit.log.server import Broker, BrokerConfig
from streamkit.log.server.credentials import CredentialStore
from streamkit.log.server.listeners import TlsSettings, parse_listeners
from streamkit.log.server.scram import SHA_256
from tests.support import secured

USER, PASSWORD = "alice", "fuzz-pw-81"
AUTH_TIMEOUT_MS = 600
CLOSED_WITHIN_S = 5.0
FORBIDDEN_TOPIC = "fuzz-forbidden"


def request(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation, 4) + b"fuzz"
    return struct.pack(">i", len(header) + len(body)) + header + body


def string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def handshake(mechanism: str, correlation: int = 1) -> bytes:
    return request(17, 1, correlation, string(mechanism))


def authenticate(token: bytes, correlation: int = 2) -> bytes:
    return request(36, 1, correlation, struct.pack(">i", len(token)) + token)


def metadata_for(topic: str, correlation: int = 9) -> bytes:
    # Metadata v4: topics, allow_auto_topic_creation=true
    return request(3, 4, correlation, struct.pack(">i", 1) + string(topic) + b"\x01")


def frames_of(data: bytes) -> list[tuple[int, bytes]]:
    """(correlation id, body) of each response frame in ``data``."""
    out = []
    while len(data) >= 8:
        size, correlation = struct.unpack(">ii", data[:8])
        out.append((correlation, data[8 : 4 + size]))
        data = data[4 + size :]
    return out


def auth_bytes(body: bytes) -> bytes:
    """The auth bytes of a SaslAuthenticate v1 response body (b"" for anything else)."""
    try:
        (message_length,) = struct.unpack(">h", body[2:4])
        at = 4 + max(message_length, 0)
        (length,) = struct.unpack(">i", body[at : at + 4])
        return body[at + 4 : at + 4 + length]
    except struct.error:
        return b""


@pytest.fixture
async def secured_broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, secured.Tls]]:
    tls = secured.make_tls(tmp_path / "tls")
    store = CredentialStore.for_data_dir(tmp_path / "data")
    store.set_password(USER, PASSWORD, 4096, (SHA_256,))
    store.save()
    config = BrokerConfig(
        listeners=parse_listeners(["SASL_SSL://127.0.0.1:0"]),
        tls=TlsSettings(keystore=tls.server),
        authentication_timeout_ms=AUTH_TIMEOUT_MS,
        request_timeout_ms=2_000,
    )
    async with Broker(tmp_path / "data", config) as broker:
        yield broker, tls


async def exchange(port: int, context: ssl.SSLContext | None, send: bytes) -> bytes:
    """Connect (TLS when ``context``), send ``send`` and read until the broker closes (it must,
    within ``CLOSED_WITHIN_S``: a client that stalls is closed at its authentication deadline);
    what came back."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1" if context else None
    )
    try:
        if send:
            writer.write(send)
            await writer.drain()
        received = b""
        async with asyncio.timeout(CLOSED_WITHIN_S):
            while chunk := await reader.read(65536):
                received += chunk
        return received
    except (ConnectionError, ssl.SSLError):
        return b""
    finally:
        writer.close()


async def raw_tls_bytes(port: int, payload: bytes) -> bool:
    """Send ``payload`` as the first bytes of a plain TCP connection to a TLS port; whether the
    broker closed it in time."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        async with asyncio.timeout(CLOSED_WITHIN_S):
            while await reader.read(65536):
                pass
        return True
    except ConnectionError:
        return True
    finally:
        writer.close()


async def test_the_handshakes_under_abuse_grant_nothing(secured_broker: tuple[Broker, secured.Tls]) -> None:
    broker, tls = secured_broker
    port = broker.ports["SASL_SSL"]
    context = ssl.create_default_context(cafile=str(tls.ca))
    acked = 0
    producing = True

    async def produce_all_along() -> None:
        nonlocal acked
        producer = AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_SSL", ssl_context=context,
            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER, sasl_plain_password=PASSWORD,
        )
        await producer.start()
        try:
            while producing:
                await producer.send_and_wait("fuzz-ok", b"x")
                acked += 1
                await asyncio.sleep(0.01)
        finally:
            await producer.stop()

    producer_task = asyncio.create_task(produce_all_along())
    rng = random.Random(27)
    cases: dict[str, Callable[[], Awaitable[bytes]]] = {
        "metadata before the handshake": lambda: exchange(port, context, metadata_for(FORBIDDEN_TOPIC)),
        "produce-sized frame before login": lambda: exchange(port, context, struct.pack(">i", 1 << 20) + b"\0" * 64),
        "negative frame size": lambda: exchange(port, context, struct.pack(">i", -5)),
        "garbage header": lambda: exchange(port, context, struct.pack(">i", 12) + rng.randbytes(12)),
        "authenticate before the handshake": lambda: exchange(port, context, authenticate(b"n,,n=alice,r=abc")),
        "scram garbage token": lambda: exchange(port, context, handshake("SCRAM-SHA-256") + authenticate(rng.randbytes(80))),
        "scram final first": lambda: exchange(
            port, context, handshake("SCRAM-SHA-256") + authenticate(b"c=biws,r=abc,p=AAAA")),
        "scram then metadata": lambda: exchange(
            port, context, handshake("SCRAM-SHA-256") + authenticate(b"n,,n=alice,r=abc") + metadata_for(FORBIDDEN_TOPIC)),
        "plain wrong password": lambda: exchange(
            port, context, handshake("PLAIN") + authenticate(b"\0alice\0wrong") + metadata_for(FORBIDDEN_TOPIC)),
        "plain malformed": lambda: exchange(port, context, handshake("PLAIN") + authenticate(b"alice-only")),
        "plain oversized token": lambda: exchange(port, context, handshake("PLAIN") + authenticate(b"\0a\0" + b"p" * 4000)),
        "handshake twice": lambda: exchange(port, context, handshake("PLAIN") + handshake("PLAIN", 2)),
        "v0 handshake, raw garbage token": lambda: exchange(
            port, context, request(17, 0, 1, string("SCRAM-SHA-256")) + struct.pack(">i", 40) + rng.randbytes(40)),
        "half a frame, then silence": lambda: exchange(port, context, struct.pack(">i", 100) + b"\0" * 10),
        "silent after TLS": lambda: exchange(port, context, b""),
    }
    # Kafka's messages: SCRAM's fixed text, PLAIN's own reason.
    told = {
        "scram garbage token": b"Authentication failed during authentication due to invalid credentials "
                               b"with SASL mechanism SCRAM-SHA-256",
        "plain wrong password": b"Authentication failed: Invalid username or password",
        "plain malformed": b"Invalid SASL/PLAIN response: expected 3 tokens, got 1",
    }
    for name, case in cases.items():
        answer = await case()
        assert told.get(name, b"") in answer, (name, answer)
        for correlation, body in frames_of(answer):
            # Only handshake (1) and authenticate (2) answers ever come back, and never a finished
            # login: SCRAM's server-final ("v=...") is never sent.
            assert correlation in (1, 2), (name, correlation)
            assert not auth_bytes(body).startswith(b"v="), name
    # Below TLS: garbage, a truncated ClientHello then silence, a plaintext Kafka request.
    hello = bytes.fromhex("16030100a5010000a10303") + rng.randbytes(40)
    for payload in (rng.randbytes(200), hello[:30], request(18, 0, 1, b"")):
        assert await raw_tls_bytes(port, payload)
    before = acked
    await asyncio.sleep(0.3)
    producing = False
    await producer_task
    assert acked > before > 10, "the authenticated producer stalled"
    assert FORBIDDEN_TOPIC not in broker.log.list_topics(), "an unauthenticated request reached the log"


async def test_mtls_principal_is_the_certificate_subject(tmp_path: Path) -> None:
    tls = secured.make_tls(tmp_path / "tls")
    cert, key = secured.make_client_cert(tls, "alice", "/O=streamkit/OU=tests/CN=alice")
    config = BrokerConfig(
        listeners=parse_listeners(["SSL://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"]),
        tls=TlsSettings(keystore=tls.server, truststore=tls.ca, client_auth="requested"),
    )
    async with Broker(tmp_path / "data", config) as broker:
        with_cert = ssl.create_default_context(cafile=str(tls.ca))
        with_cert.load_cert_chain(str(cert), str(key))
        without = ssl.create_default_context(cafile=str(tls.ca))
        principals = []
        for port, context in ((broker.ports["SSL"], with_cert), (broker.ports["SSL"], without),
                              (broker.ports["PLAINTEXT"], None)):
            _, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1" if context else None)
            await asyncio.sleep(0.1)
            principals += [p.session.principal for p in broker._connections.values() if p.session is not None]
            writer.close()
            await asyncio.sleep(0.1)
        assert principals == ["User:CN=alice,OU=tests,O=streamkit", "User:ANONYMOUS", "User:ANONYMOUS"]


async def test_a_v0_handshake_takes_bare_tokens(secured_broker: tuple[Broker, secured.Tls]) -> None:
    """SaslHandshake v0 (old clients): the token follows as a bare size-prefixed frame, the
    answer likewise; after it the connection is logged in and Metadata is answered."""
    broker, tls = secured_broker
    context = ssl.create_default_context(cafile=str(tls.ca))
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", broker.ports["SASL_SSL"], ssl=context, server_hostname="127.0.0.1")
    try:
        token = f"\0{USER}\0{PASSWORD}".encode()
        writer.write(request(17, 0, 1, string("PLAIN")) + struct.pack(">i", len(token)) + token + metadata_for("v0-ok"))
        handshake_size = struct.unpack(">i", await reader.readexactly(4))[0]
        answer = await reader.readexactly(handshake_size)
        assert struct.unpack(">ih", answer[:6]) == (1, 0)  # correlation 1, no error
        assert await reader.readexactly(4) == b"\0\0\0\0"  # PLAIN's empty server token, bare
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        metadata = await reader.readexactly(size)
        assert struct.unpack(">i", metadata[:4]) == (9,) and b"v0-ok" in metadata
    finally:
        writer.close()
