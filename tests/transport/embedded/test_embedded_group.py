"""The embedded consumer's group membership speaks the Kafka consumer protocol byte for byte,
so an aiokafka member (the Kafka driver's) and an in-process one agree on who holds what."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from streamkit._core.types import TopicPartition
from streamkit.transport.embedded.client import EmbeddedLogClient
from streamkit.transport.embedded.group import (
    ProtocolDataError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from streamkit.transport.kafka import KafkaLogClient


def test_subscriptions_and_assignments_match_aiokafkas_encoding() -> None:
    ours = encode_subscription(["orders", "clicks"], b'{"url": null}')
    assert ours == ConsumerProtocolMemberMetadata(0, ["orders", "clicks"], b'{"url": null}').encode()
    theirs = ConsumerProtocolMemberMetadata(0, ["a"], None).encode()
    assert decode_subscription(theirs) == (["a"], None)
    assignment = {"clicks": [1], "orders": [0, 2]}
    encoded = encode_assignment(assignment, b"owners")
    assert encoded == ConsumerProtocolMemberAssignment(0, sorted(assignment.items()), b"owners").encode()
    decoded = ConsumerProtocolMemberAssignment.decode(encoded)
    assert [(t, list(p)) for t, p in decoded.assignment] == sorted(assignment.items())
    assert decode_assignment(ConsumerProtocolMemberAssignment(0, [("t", [3])], b"").encode()) == ({"t": [3]}, b"")
    assert decode_assignment(b"") == ({}, None)  # a member the leader gave nothing
    with pytest.raises(ProtocolDataError):
        decode_assignment(encoded[:9])


class _Held:
    def __init__(self) -> None:
        self.held: set[TopicPartition] = set()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.held -= revoked

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.held |= assigned


async def test_a_served_embedded_consumer_shares_its_group_with_a_kafka_member(tmp_path: Path) -> None:
    owner = EmbeddedLogClient(str(tmp_path / "log"), serve=True)
    await owner.start()
    try:
        await owner.ensure_topic("t", 4)
        embedded, embedded_held = owner.consumer("g"), _Held()
        embedded.subscribe(["t"], embedded_held)
        await embedded.start()
        assert embedded_held.held == {TopicPartition("t", p) for p in range(4)}
        assert owner.served_at is not None
        remote_client = KafkaLogClient(owner.served_at)
        await remote_client.start()
        remote, remote_held = remote_client.consumer("g"), _Held()
        remote.subscribe(["t"], remote_held)
        await remote.start()
        try:
            for _ in range(100):  # the remote member drives its rebalance from getmany
                await remote.getmany(100, 10)
                if len(remote_held.held) == 2 and len(embedded_held.held) == 2:
                    break
                await asyncio.sleep(0.05)
            assert len(remote_held.held) == 2 and len(embedded_held.held) == 2
            assert remote_held.held | embedded_held.held == {TopicPartition("t", p) for p in range(4)}
            assert embedded.assignment() == embedded_held.held
        finally:
            await remote.aclose()
            await remote_client.aclose()
        for _ in range(100):  # the remote member left: the embedded one holds everything again
            if len(embedded_held.held) == 4:
                break
            await asyncio.sleep(0.05)
        assert embedded_held.held == {TopicPartition("t", p) for p in range(4)}
        await embedded.aclose()
    finally:
        await owner.aclose()
