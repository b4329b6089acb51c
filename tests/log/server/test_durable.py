"""``streamkit broker --durable``: a produce is acknowledged only after the fsync that covers
it, and producers sending at the same time share fsyncs (group commit)."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.protocol.metadata import MetadataRequest_v1
from aiokafka.protocol.produce import ProduceRequest_v7

from streamkit._core.types import TopicPartition
from streamkit.log.config import TopicConfig
from streamkit.log.partition import Partition
from streamkit.log.records import NewRecord, build_batch
from streamkit.log.server import Broker, BrokerConfig
from streamkit.log.server.group_sync import GroupSync
from tests.support.broker import BrokerProcess, WireClient

pytestmark = pytest.mark.timeout(120)

PRODUCERS = 8
SENDS = 30


def _group_sync(broker: Broker) -> GroupSync:
    state = broker._state  # the running broker's shared state: what the test inspects
    assert state is not None and state.group_sync is not None
    return state.group_sync


async def test_acknowledged_records_are_fsynced_and_concurrent_producers_share_fsyncs(tmp_path: Path) -> None:
    # flush.ms=0: no background flush, so only --durable's fsyncs make records durable.
    config = BrokerConfig(port=0, durable=True)
    async with Broker(tmp_path / "data", config, topic_defaults=TopicConfig(flush_ms=0)) as broker:
        broker.log.create_topic("t", partitions=2)
        sync = _group_sync(broker)
        bootstrap = f"127.0.0.1:{broker.port}"
        not_durable_when_acked: list[tuple[int, int]] = []

        async def produce(n: int) -> None:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
            await producer.start()
            try:
                for i in range(SENDS):
                    meta = await producer.send_and_wait("t", b"%d-%d" % (n, i), partition=n % 2)
                    # The ack arrived on this event loop: the fsync covering it must be done.
                    if meta.offset >= sync.durable_end.get(TopicPartition("t", meta.partition), 0):
                        not_durable_when_acked.append((meta.partition, meta.offset))
            finally:
                await producer.stop()

        await asyncio.gather(*(produce(n) for n in range(PRODUCERS)))
        assert not_durable_when_acked == []
        assert sync.requests == PRODUCERS * SENDS
        assert 0 < sync.rounds < sync.requests  # fsyncs were shared
        for p in range(2):
            assert broker.log.partition("t", p).high_watermark == PRODUCERS // 2 * SENDS


async def test_a_failed_fsync_is_a_storage_error_and_the_retry_is_not_a_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = [OSError(errno.EIO, "Input/output error")]  # a failing disk: the one fault we fake
    real_flush = Partition.flush

    def flaky_flush(self: Partition) -> None:
        if failures:
            raise failures.pop()
        real_flush(self)

    monkeypatch.setattr(Partition, "flush", flaky_flush)
    async with Broker(tmp_path / "data", BrokerConfig(port=0, durable=True)) as broker:
        broker.log.create_topic("t", partitions=1)
        with WireClient("127.0.0.1", broker.port) as wire:
            data = build_batch([NewRecord(None, b"once", 1_700_000_000_000)])
            sent = asyncio.to_thread(
                wire.call, ProduceRequest_v7(transactional_id=None, required_acks=-1, timeout=10_000,
                                             topics=[("t", [(0, data)])])
            )
            response = await sent
        error_code = response.topics[0][1][0][1]
        assert error_code == 56  # KAFKA_STORAGE_ERROR: a retriable error, so clients retry
        # An idempotent producer's retry of a batch whose fsync failed is recognised.
        producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.port}", enable_idempotence=True)
        await producer.start()
        try:
            failures.append(OSError(errno.EIO, "Input/output error"))
            meta = await producer.send_and_wait("t", b"retried")
        finally:
            await producer.stop()
        assert meta.offset == 1  # "once" (written, not acknowledged) is at 0; "retried" once, at 1
        assert broker.log.partition("t", 0).high_watermark == 2


def test_the_broker_command_takes_durable(broker_factory: type[BrokerProcess]) -> None:
    proc = broker_factory("--durable").start(same_port=False)
    with WireClient(proc.host, proc.port) as wire:
        wire.call(MetadataRequest_v1(topics=["durable"]))  # auto-creates it
        response = wire.call(ProduceRequest_v7(
            transactional_id=None, required_acks=-1, timeout=10_000,
            topics=[("durable", [(0, build_batch([NewRecord(None, b"kept", 1_700_000_000_000)]))])],
        ))
    assert response.topics[0][1][0][1] == 0
    assert proc.stop() == 0
