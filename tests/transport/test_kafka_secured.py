"""streamkit as a client of a secured Apache Kafka: the session's Kafka has a SASL_SSL listener
(``tests/support/secured.py``: a CA made with openssl, SCRAM-SHA-256/512 and PLAIN users).

A ``streamkit worker`` counts words over SASL_SSL with SCRAM-SHA-256, configured from the
environment only; the CLI creates, lists, produces and consumes with ``--command-config``
(SCRAM and PLAIN); OAUTHBEARER takes its token from a callback, and a token Kafka refuses is named with Kafka's
answer (a worker: one line, exit code 2); a wrong password and an untrusted CA each end a command and a worker with
one line naming the broker and the cause, exit code 2, within seconds. The password shows up
nowhere: not in the worker's log, ``/status``, ``/topology`` or any command's output.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streamkit.log.records import NewRecord
from streamkit.transport.kafka_tools import KafkaTools
from streamkit.transport.security import ClientSecurity
from tests.support import secured
from tests.support.kafka import KafkaCluster

ROOT = Path(__file__).resolve().parents[2]
APPS = ROOT / "tests" / "support" / "apps"
USER = "alice"
PASSWORD = secured.USERS[USER]
FAILS_WITHIN_S = 10.0
LINES = ["the quick brown fox", "jumps over the lazy dog", "the end"]


def _properties(path: Path, kafka: KafkaCluster, mechanism: str, *, password: str = PASSWORD, ca: Path | None = None) -> Path:
    assert kafka.tls is not None
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    path.write_text(
        "# a client properties file as Kafka's tools take it\n"
        "security.protocol = SASL_SSL\n"
        f"sasl.mechanism: {mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required \\\n"
        f'    username="{USER}" \\\n    password="{password}";\n'
        f"ssl.ca.location={ca or kafka.tls.ca}\n"
    )
    return path


def _cli(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamkit.cli", *args], input=stdin, capture_output=True, text=True, timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_the_cli_creates_lists_produces_and_consumes_over_sasl_ssl(kafka: KafkaCluster, tmp_path: Path, mechanism: str) -> None:
    config = _properties(tmp_path / "client.properties", kafka, mechanism)
    target = ["--bootstrap", kafka.sasl_ssl_bootstrap, "--command-config", str(config)]
    topic = f"secured-{mechanism.lower()}-{uuid.uuid4().hex[:6]}"
    outputs = []
    done = _cli("topics", "create", topic, "--partitions", "2", *target)
    outputs.append(done)
    assert done.returncode == 0, done.stderr
    done = _cli("topics", "list", *target)
    outputs.append(done)
    assert done.returncode == 0 and topic in done.stdout.split(), done.stderr
    done = _cli("produce", topic, "-K", ":", *target, stdin="a:1\nb:2\nc:3\n")
    outputs.append(done)
    assert done.returncode == 0, done.stderr
    done = _cli("consume", topic, "--from-beginning", "--print-keys", *target)
    outputs.append(done)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["a\t1", "b\t2", "c\t3"]
    for out in outputs:
        assert PASSWORD not in out.stdout + out.stderr


@pytest.mark.parametrize(
    ("case", "cause"),
    [("wrong password", r"SASL authentication failed \(SASL_SSL SCRAM-SHA-256 as alice\): .*invalid credentials"),
     ("untrusted CA", r"TLS: the broker's certificate is not trusted \(.*\); check ssl\.ca\.location")],
)
def test_a_refused_cli_command_says_why_in_one_line_with_exit_code_2(kafka: KafkaCluster, tmp_path: Path, case: str, cause: str) -> None:
    assert kafka.tls is not None
    wrong = "not-" + PASSWORD
    if case == "wrong password":
        config = _properties(tmp_path / "client.properties", kafka, "SCRAM-SHA-256", password=wrong)
    else:
        config = _properties(tmp_path / "client.properties", kafka, "SCRAM-SHA-256", ca=kafka.tls.other_ca)
    started = time.monotonic()
    done = _cli("topics", "list", "--bootstrap", kafka.sasl_ssl_bootstrap, "--command-config", str(config))
    assert time.monotonic() - started < FAILS_WITHIN_S
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"streamkit: error: cannot connect to Kafka at {kafka.sasl_ssl_bootstrap}: ")
    assert re.search(cause, lines[0]), lines[0]
    assert wrong not in done.stderr and PASSWORD not in done.stderr


def _security_env(kafka: KafkaCluster, password: str, ca: Path) -> dict[str, str]:
    return {
        "STREAMKIT_SECURITY_PROTOCOL": "SASL_SSL", "STREAMKIT_SASL_MECHANISM": "SCRAM-SHA-256",
        "STREAMKIT_SASL_USERNAME": USER, "STREAMKIT_SASL_PASSWORD": password, "STREAMKIT_SSL_CA_LOCATION": str(ca),
    }


def _worker(
    kafka: KafkaCluster, tmp_path: Path, app_id: str, password: str = PASSWORD, ca: Path | None = None
) -> subprocess.Popen[str]:
    assert kafka.tls is not None
    env = {
        **os.environ, **_security_env(kafka, password, ca or kafka.tls.ca), "SECURED_APP_ID": app_id,
        "SECURED_BROKER": f"kafka://{kafka.sasl_ssl_bootstrap}",
        "PYTHONPATH": f"{APPS}{os.pathsep}{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "secured_wordcount_app:app", "--web-port", "0",
         "--progress-interval", "0", "--state-dir", str(tmp_path / "state")],
        env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "worker.log").open("w"), text=True, cwd=tmp_path,
    )


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return str(answer.read().decode())


def _count(url: str, word: str) -> int | None:
    """The table's count of ``word``; None while it cannot answer (503 restoring, 404 not yet counted)."""
    try:
        value = json.loads(_get(f"{url}/tables/word_counts/{word}"))["value"]
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 503):
            return None
        raise
    return int(value)


def test_a_worker_counts_words_over_sasl_ssl_configured_from_the_environment(kafka: KafkaCluster, tmp_path: Path) -> None:
    app_id = f"secured-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "worker.log"
    proc = _worker(kafka, tmp_path, app_id)
    try:
        deadline = time.monotonic() + 60
        while not (re.search(r"web: (http://\S+)", log.read_text()) and "assigned " in log.read_text()):
            assert proc.poll() is None, f"the worker exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the worker did not start:\n{log.read_text()}"
            time.sleep(0.2)
        found = re.search(r"web: (http://\S+)", log.read_text())
        assert found is not None
        url = found.group(1)
        producer = Producer({"bootstrap.servers": kafka.bootstrap})  # the test's own records: PLAINTEXT
        for line in LINES:
            producer.produce(f"{app_id}-lines", json.dumps(line).encode())
        assert producer.flush(10) == 0
        expected = Counter(" ".join(LINES).split())
        deadline = time.monotonic() + 30
        while True:
            got = {word: _count(url, word) for word in expected}
            if got == dict(expected) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert got == dict(expected)
        pages = _get(f"{url}/status") + _get(f"{url}/topology")
        assert PASSWORD not in pages
        assert app_id in pages  # the pages answered, about this app
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert PASSWORD not in text
    assert "Traceback" not in text


@pytest.mark.parametrize(
    ("case", "cause"),
    [("wrong password", "SASL authentication failed (SASL_SSL SCRAM-SHA-256 as alice): "),
     ("untrusted CA", "TLS: the broker's certificate is not trusted (")],
)
def test_a_refused_worker_stops_with_one_line_and_exit_code_2(kafka: KafkaCluster, tmp_path: Path, case: str, cause: str) -> None:
    assert kafka.tls is not None
    wrong = "not-" + PASSWORD
    started = time.monotonic()
    app_id = f"secured-{uuid.uuid4().hex[:6]}"
    if case == "wrong password":
        proc = _worker(kafka, tmp_path, app_id, password=wrong)
    else:
        proc = _worker(kafka, tmp_path, app_id, ca=kafka.tls.other_ca)
    try:
        code = proc.wait(FAILS_WITHIN_S + 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert time.monotonic() - started < FAILS_WITHIN_S + 5
    text = (tmp_path / "worker.log").read_text()
    assert code == 2, text
    errors = [line for line in text.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, text
    assert errors[0].startswith(f"streamkit: error: cannot connect to Kafka at {kafka.sasl_ssl_bootstrap}: {cause}")
    assert wrong not in text and PASSWORD not in text and "Traceback" not in text


def _unsecured_jwt(subject: str, expires_in_s: int = 600) -> str:
    """A JWT with alg "none", which Kafka's default OAUTHBEARER validator accepts (the fixture's
    listener) while its ``exp`` is ahead."""
    now = int(time.time())

    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now - 1200, 'exp': now + expires_in_s})}."


def test_oauthbearer_with_a_token_callback_over_sasl_ssl(kafka: KafkaCluster) -> None:
    assert kafka.tls is not None
    calls: list[str] = []

    async def token() -> str:
        calls.append("token")
        return _unsecured_jwt(USER)

    security = ClientSecurity.from_properties(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "ssl.ca.location": str(kafka.tls.ca)},
        token_callback=token,
    )
    topic = f"secured-oauth-{uuid.uuid4().hex[:6]}"

    async def roundtrip() -> list[bytes | None]:
        async with KafkaTools(kafka.sasl_ssl_bootstrap, security=security) as tools:
            await tools.create_topic(topic, 1, {})
            await tools.produce(topic, 0, [NewRecord(key=b"k", value=b"v1", timestamp=1), NewRecord(key=b"k", value=b"v2", timestamp=2)])
            got = await tools.fetch(topic, 0, 0, 1 << 20)
            return [r.value for r in got.records]

    assert asyncio.run(roundtrip()) == [b"v1", b"v2"]
    assert calls  # each connection asked the callback for its token


def test_a_refused_oauthbearer_token_is_named_with_kafka_s_reason(kafka: KafkaCluster) -> None:
    """Kafka's validator refuses an expired token: the client is told why (RFC 7628: the broker
    answers the token with an error challenge, the client acknowledges it, the broker then fails
    the login with its reason), in one error naming the broker, not "node not ready" later."""
    from streamkit.transport.kafka_security import BrokerAuthenticationError

    assert kafka.tls is not None
    security = ClientSecurity.from_properties(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "ssl.ca.location": str(kafka.tls.ca)},
        token_callback=lambda: _unsecured_jwt(USER, expires_in_s=-600),
    )

    async def list_topics() -> None:
        async with KafkaTools(kafka.sasl_ssl_bootstrap, security=security) as tools:
            await tools.list_topics()

    started = time.monotonic()
    with pytest.raises(BrokerAuthenticationError) as refused:
        asyncio.run(list_topics())
    assert time.monotonic() - started < FAILS_WITHIN_S
    # Kafka's OAuthBearerSaslServer answers with its error status (the details stay in its log)
    assert str(refused.value) == (
        f"cannot connect to Kafka at {kafka.sasl_ssl_bootstrap}: SASL authentication failed "
        '(SASL_SSL OAUTHBEARER): {"status":"invalid_token"}'
    )


def test_a_worker_whose_oauthbearer_token_is_refused_stops_with_one_line_and_exit_code_2(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    """A Faust-style app (``OAuthCredentials`` with an ``ssl_context``) whose token Kafka
    refuses: ``streamkit worker`` stops at once with one line naming the broker and Kafka's
    answer, exit code 2 (it said "node not ready" before the login was finished as RFC 7628 has it)."""
    assert kafka.tls is not None
    env = {
        **os.environ, "OAUTH_BROKER": f"kafka://{kafka.sasl_ssl_bootstrap}", "OAUTH_CA": str(kafka.tls.ca),
        "OAUTH_EXPIRES_IN_S": "-600", "OAUTH_APP_ID": f"oauth-{uuid.uuid4().hex[:6]}",
        "PYTHONPATH": f"{APPS}{os.pathsep}{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "streamkit.cli", "worker", "-A", "oauth_app:app", "--progress-interval", "0",
         "--state-dir", str(tmp_path / "state")],
        env=env, capture_output=True, text=True, timeout=FAILS_WITHIN_S + 20, cwd=tmp_path,
    )
    assert time.monotonic() - started < FAILS_WITHIN_S + 5
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        f"streamkit: error: cannot connect to Kafka at {kafka.sasl_ssl_bootstrap}: SASL authentication failed "
        '(SASL_SSL OAUTHBEARER): {"status":"invalid_token"}'
    ], done.stderr
    assert "Traceback" not in done.stderr
