"""A broker stopped (SIGTERM, or killed) and started again on the same data directory loses
nothing it acknowledged: records, committed offsets and idempotent-producer state."""

from __future__ import annotations

import asyncio
import signal

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.protocol.transaction import InitProducerIdRequest_v0
from aiokafka.structs import OffsetAndMetadata
from test_protocol import batch, latest_offset, produce

from tests.support.broker import BrokerProcess, WireClient

pytestmark = pytest.mark.timeout(120)

WAIT_S = 30


async def produce_acked(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """Send ``count`` records; return those the broker acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=2)
    await producer.start()
    try:
        values = [f"{topic}-{i}".encode() for i in range(count)]
        futures = [await producer.send(topic, value) for value in values]
        results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), WAIT_S)
    finally:
        await producer.stop()
    return [v for v, r in zip(values, results, strict=True) if not isinstance(r, BaseException)]


async def consume_group(bootstrap: str, topic: str, group: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    values: list[bytes] = []
    try:
        while len(values) < count:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), WAIT_S)
            for messages in batches.values():
                values.extend(m.value for m in messages)
        await consumer.commit()
    finally:
        await consumer.stop()
    return values


@pytest.mark.parametrize("how", ["sigterm", "sigint", "sigkill"])
async def test_restart_between_produce_and_consume_loses_nothing(
    broker_factory: type[BrokerProcess], how: str
) -> None:
    broker = broker_factory().start(same_port=False)
    acked = await produce_acked(broker.bootstrap, "durable", 2000)
    assert len(acked) == 2000
    first_half = await consume_group(broker.bootstrap, "durable", "readers", 1000)
    assert len(first_half) >= 1000

    # A raw idempotent batch, to retry after the restart.
    with WireClient(broker.host, broker.port) as wire:
        pid = wire.call(InitProducerIdRequest_v0(transactional_id=None, transaction_timeout_ms=60_000)).producer_id
        raw = batch(b"raw-1", b"raw-2", producer_id=pid, epoch=0, sequence=0)
        error, raw_offset = produce(wire, "durable", raw)
        assert error == 0

    if how == "sigkill":
        broker.kill()
    else:  # a clean shutdown: flushed, closed, marked clean, producer state snapshotted
        assert broker.stop(signal.SIGTERM if how == "sigterm" else signal.SIGINT) == 0
    broker.start()  # same data directory, same port

    with WireClient(broker.host, broker.port) as wire:
        assert latest_offset(wire, "durable") == 2002
        assert produce(wire, "durable", raw) == (0, raw_offset)  # still known as a retry
        assert latest_offset(wire, "durable") == 2002
        next_batch = batch(b"raw-3", producer_id=pid, epoch=0, sequence=2)
        assert produce(wire, "durable", next_batch) == (0, 2002)

    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="readers", enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition("durable", 0)
        committed = await consumer.committed(tp)
        assert committed is not None and committed >= 1000  # the commit survived
        consumer.assign([tp])
        consumer.seek(tp, 0)
        everything: list[bytes] = []
        while len(everything) < 2003:
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), WAIT_S)
            for messages in batches.values():
                everything.extend(m.value for m in messages)
        await consumer.commit({tp: OffsetAndMetadata(2003, "")})
    finally:
        await consumer.stop()
    assert set(acked) <= set(everything)
    assert everything[-3:] == [b"raw-1", b"raw-2", b"raw-3"]
    assert broker.stop() == 0
