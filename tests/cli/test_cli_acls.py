"""``streamkit acls``: ACLs set offline in a data directory are what a broker started with
``--authorizer`` enforces; a running broker's directory is refused with one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aiokafka.protocol.metadata import MetadataRequest_v5
from aiokafka.protocol.produce import ProduceRequest_v7

from streamkit.log.records import NewRecord, build_batch
from tests.cli.conftest import Run
from tests.support.broker import BrokerProcess, WireClient

TOPIC_AUTH = 29


def _produce(w: WireClient, topic: str) -> int:
    batch = build_batch([NewRecord(None, b"v", 1_700_000_000_000)])
    response = w.call(ProduceRequest_v7(transactional_id=None, required_acks=1, timeout=5_000, topics=[(topic, [(0, batch)])]))
    return int(response.topics[0][1][0][1])


def test_offline_acls_are_enforced_by_the_broker(
    run: Run, data_dir: Path, broker_factory: type[BrokerProcess], one_line_error: Callable[..., None],
    run_process: Callable[..., object],
) -> None:
    added = run("acls", "add", "--allow-principal", "User:ANONYMOUS", "--operation", "Write", "--operation", "Create",
                "--topic", "orders", "--resource-pattern-type", "PREFIXED")
    assert added.exit_code == 0, added.output
    assert added.output.count("added TOPIC:PREFIXED:orders principal=User:ANONYMOUS") == 2
    denied = run("acls", "add", "--deny-principal", "User:*", "--operation", "Describe", "--topic", "orders-secret")
    assert denied.exit_code == 0, denied.output
    assert len(run("acls", "list").output.splitlines()) == 3
    matching = run("acls", "list", "--topic", "orders-secret", "--resource-pattern-type", "MATCH").output
    assert len(matching.splitlines()) == 3  # the prefix applies to it as well

    broker = broker_factory("--authorizer", data_dir=data_dir).start()
    with WireClient(broker.host, broker.port) as w:
        for topic, code in (("orders-eu", 0), ("orders-secret", TOPIC_AUTH), ("payments", TOPIC_AUTH)):
            # CREATE (and DESCRIBE, implied by WRITE) lets Metadata auto-create the topic
            created = w.call(MetadataRequest_v5(topics=[topic], allow_auto_topic_creation=True)).topics[0]
            assert created[0] == code, topic
        assert _produce(w, "orders-eu") == 0
        assert _produce(w, "payments") == TOPIC_AUTH  # no ACL: allow.everyone.if.no.acl.found is off
        assert _produce(w, "orders-secret") == 3  # WRITE allowed, but it was never created (unknown)
        listed = w.call(MetadataRequest_v5(topics=None, allow_auto_topic_creation=False)).topics
        assert {t[1] for t in listed} == {"orders-eu"}  # orders-secret is denied DESCRIBE
    busy = run_process("acls", "list", data_dir=data_dir)
    assert busy.returncode == 2  # type: ignore[attr-defined]
    one_line_error(busy.stderr, "in use", "kafka-acls --bootstrap-server")  # type: ignore[attr-defined]
    assert broker.stop() == 0

    removed = run("acls", "remove", "--topic", "orders-secret")
    assert removed.output.startswith("removed TOPIC:LITERAL:orders-secret principal=User:*"), removed.output
    refused = run("acls", "remove")
    assert refused.exit_code == 2 and "--force" in refused.output
    assert run("acls", "remove", "--force").output.count("removed ") == 2
    assert run("acls", "list").output == ""
