"""Kafka's ``kafka-configs`` manages SCRAM users on ``streamkit broker`` as on Apache Kafka (issue 27).

The same test body runs against the module's ``streamkit broker`` and the session's Apache
Kafka (``kafka``): add a SCRAM-SHA-256 user with a chosen iteration count, describe it, refuse
too few iterations, delete it and describe the missing user; the tool's output must be the
same on both (too many iterations is the server's refusal; the tool itself refuses too few).
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.broker import BrokerProcess
from tests.support.interop import kafka_tool
from tests.support.kafka import KafkaCluster

pytestmark = pytest.mark.timeout(300)

CONFIGS = "ConfigCommand"


@pytest.fixture(params=["streamkit", "kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    if request.param == "kafka":
        kafka: KafkaCluster = request.getfixturevalue("kafka")
        return kafka.bootstrap
    broker: BrokerProcess = request.getfixturevalue("broker")
    return broker.bootstrap


def configs(bootstrap: str, *args: str) -> tuple[int, str]:
    done = kafka_tool(CONFIGS, "--bootstrap-server", bootstrap, *args)
    return done.returncode, (done.stdout + done.stderr).strip()


def test_kafka_configs_alters_and_describes_scram_users(bootstrap: str) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    entity = ["--entity-type", "users", "--entity-name", user]
    code, out = configs(bootstrap, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]", *entity)
    assert (code, out) == (0, f"Completed updating config for user {user}.")
    code, out = configs(bootstrap, "--describe", *entity)
    assert (code, out) == (0, f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192")
    code, out = configs(bootstrap, "--alter", "--add-config", "SCRAM-SHA-512=[iterations=20000,password=x]", *entity)
    assert code != 0 and "Too many iterations" in out, out
    code, out = configs(bootstrap, "--alter", "--delete-config", "SCRAM-SHA-256", *entity)
    assert (code, out) == (0, f"Completed updating config for user {user}.")
    code, out = configs(bootstrap, "--describe", *entity)
    # The admin client lists only the users it found: a missing one prints nothing (both brokers).
    assert (code, out) == (0, "")
