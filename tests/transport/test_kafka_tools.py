"""Creating a topic and writing to it at once, over the Kafka protocol (a real ``streamkit broker``).

A writer may only append where the cluster's metadata shows a partition, and aiokafka's producer
asserts that its own cached metadata does: a lookup that auto-creates a topic (with the broker's
default partition count), or a producer whose metadata predates the topic's current shape, made
a write fail with aiokafka's ``AssertionError: Unrecognized partition``. These tests hold the
fix: lookups never create, creation returns once every partition answers, and every writer
waits for its metadata to show the partition or says in one line which partition is missing.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import GroupAuthorizationFailedError, GroupCoordinatorNotAvailableError

from streamkit._core.errors import StreamkitError
from streamkit.log.records import NewRecord
from streamkit.transport.base import TransportError
from streamkit.transport.kafka import KafkaLogClient
from streamkit.transport.kafka_tools import KafkaTools, PartitionNotFoundError, TopicNotFoundError
from tests.support.broker import BrokerProcess

RECORDS = [NewRecord(b"k", b"v", 1_700_000_000_000, ())]
# ``broker`` (tests/support/plugin.py) runs with ``streamkit broker``'s defaults: one partition
# by default, so an auto-created topic has 1.


def test_a_lookup_creates_nothing_and_a_new_topic_takes_writes_at_once(broker: BrokerProcess) -> None:
    """The backfill's order: look the changelog up, create it, write every partition of it."""

    async def scenario() -> None:
        client = KafkaLogClient(broker.bootstrap)
        await client.start()
        try:
            assert await client.partition_count("fresh-changelog") is None
            assert await client.partition_count("fresh-changelog") is None  # still: the lookup made nothing
            assert await client.ensure_topic("fresh-changelog", 3, {"cleanup.policy": "compact"}) == 3
            assert await client.ensure_topic("fresh-changelog", 5) == 3  # exists: its own count
        finally:
            await client.aclose()
        async with KafkaTools(broker.bootstrap) as tools:
            assert [p.partition for p in (await tools.describe_topic("fresh-changelog")).partitions] == [0, 1, 2]
            assert await tools.produce("fresh-changelog", 2, RECORDS) == 0
            await tools.create_topic("fresh-topic", 4, {})
            assert await tools.produce("fresh-topic", 3, RECORDS) == 0  # created, then written at once

    asyncio.run(scenario())


def test_a_producer_that_knew_an_older_topic_of_that_name_writes_to_the_new_one(broker: BrokerProcess) -> None:
    """Another client deletes the topic and creates it again with more partitions: this
    producer's metadata still shows one partition, and must learn the new ones before it writes."""

    async def scenario() -> None:
        async with KafkaTools(broker.bootstrap) as writer, KafkaTools(broker.bootstrap) as other:
            await writer.create_topic("reborn", 1, {})
            assert await writer.produce("reborn", 0, RECORDS) == 0
            await other.delete_topic("reborn")
            await other.create_topic("reborn", 3, {})
            assert await writer.produce("reborn", 2, RECORDS) == 0
            await other.add_partitions("reborn", 5)
            assert await writer.produce("reborn", 4, RECORDS) == 0

    asyncio.run(scenario())


def test_a_writer_a_moment_early_waits_for_the_topic_instead_of_creating_it(broker: BrokerProcess) -> None:
    """A write that comes just before another client creates the topic: naming the topic in a
    metadata request would auto-create it with the broker's one partition (and the creation
    would then fail as 'already exists'); the writer waits for it instead."""

    async def scenario() -> None:
        async with KafkaTools(broker.bootstrap) as writer, KafkaTools(broker.bootstrap) as creator:
            early = asyncio.ensure_future(writer.produce("later", 2, RECORDS))
            await asyncio.sleep(0.5)
            await creator.create_topic("later", 3, {})
            assert await early == 0
            assert len((await creator.describe_topic("later")).partitions) == 3

    asyncio.run(scenario())


def test_a_partition_or_topic_that_does_not_exist_is_a_clear_error(broker: BrokerProcess) -> None:
    async def scenario() -> None:
        async with KafkaTools(broker.bootstrap) as tools:
            await tools.create_topic("three", 3, {})
            for partition in (3, 7, -1):
                with pytest.raises(PartitionNotFoundError) as caught:
                    await tools.produce("three", partition, RECORDS)
                message = str(caught.value)
                assert message == f"cannot produce to three-{partition}: topic 'three' has partitions 0 to 2"
                assert isinstance(caught.value, StreamkitError) and "\n" not in message
            with pytest.raises(TopicNotFoundError, match="unknown topic 'never-made'"):
                await tools.produce("never-made", 0, RECORDS)
            assert "never-made" not in await tools.list_topics()  # producing did not create it
            assert await tools.produce("three", 2, RECORDS) == 0  # the tools still work
        # Reads: aiokafka's consumer waits for a partition it does not know until its timeout,
        # then says only that; the error says what is missing.
        async with KafkaTools(broker.bootstrap, request_timeout_ms=1_000) as tools:
            for read in (tools.offsets("three", 3), tools.fetch("three", 3, 0, 1 << 20)):
                with pytest.raises(PartitionNotFoundError, match=r"three-3: topic 'three' has partitions 0 to 2$"):
                    await read
            assert (await tools.fetch("three", 2, 0, 1 << 20)).records[0].value == b"v"

    asyncio.run(scenario())


def test_the_worker_producer_names_a_missing_partition(broker: BrokerProcess) -> None:
    """The worker's Kafka producer fails the batch with the same one-line reason, not aiokafka's
    assertion, and goes on delivering other partitions."""

    async def scenario() -> None:
        client = KafkaLogClient(broker.bootstrap)
        await client.start()
        try:
            assert await client.ensure_topic("worker-out", 2) == 2
            producer = client.producer()
            await producer.start()
            try:
                bad = await producer.send("worker-out", b"k", b"v", partition=2)
                good = await producer.send("worker-out", b"k", b"v", partition=1)
                with pytest.raises(TransportError) as caught:
                    await producer.flush()
                assert "topic 'worker-out' has partitions 0 to 1" in str(caught.value)
                assert "Assertion" not in str(caught.value) and "Unrecognized" not in str(caught.value)
                with pytest.raises(TransportError, match="has partitions 0 to 1"):
                    await bad
                assert (await good).offset == 0
            finally:
                await producer.aclose()
        finally:
            await client.aclose()

    asyncio.run(scenario())


class _CoordinatorComingUp:
    """An admin client of a Kafka whose group coordinator is not up yet: the first ``busy``
    offset reads are answered COORDINATOR_NOT_AVAILABLE (as Kafka does while it creates
    ``__consumer_offsets`` for the cluster's first group), then the group has none."""

    def __init__(self, busy: int, error: type[Exception] = GroupCoordinatorNotAvailableError) -> None:
        self.busy = busy
        self.error = error
        self.asked = 0

    async def list_consumer_group_offsets(self, group: str) -> dict[object, object]:
        self.asked += 1
        if self.asked <= self.busy:
            raise self.error()
        return {}


def test_offsets_of_a_group_wait_for_its_coordinator_and_a_refusal_is_one_line() -> None:
    """The CLI's ``consume -g`` on a fresh Apache Kafka failed at once with
    ``GroupCoordinatorNotAvailableError``; Kafka's admin client retries it until its timeout."""

    async def scenario() -> None:
        tools = KafkaTools("127.0.0.1:1", request_timeout_ms=2_000)
        coming_up = _CoordinatorComingUp(busy=3)
        tools._admin = coming_up  # type: ignore[assignment]
        assert await tools.committed("g", "t") == {}
        assert coming_up.asked == 4
        never = _CoordinatorComingUp(busy=10**6)
        tools._admin = never  # type: ignore[assignment]
        with pytest.raises(TransportError, match=r"^cannot read the offsets of group 'g': \[Error 15\]"):
            await tools.committed("g", "t")
        assert never.asked > 1
        refused = _CoordinatorComingUp(busy=1, error=GroupAuthorizationFailedError)
        tools._admin = refused  # type: ignore[assignment]
        with pytest.raises(TransportError, match="GroupAuthorizationFailedError"):
            await tools.committed("g", "t")
        assert refused.asked == 1  # not retriable: refused at once

    asyncio.run(scenario())
