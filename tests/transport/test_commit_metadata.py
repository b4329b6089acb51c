"""Commit metadata (issue 22: a partition's stream time rides on its committed offset, as in
Kafka Streams) through every path, the same tests on both transports: a consumer's commit and
a transaction's offsets carry a string per partition, ``committed_metadata`` reads it back,
an aborted transaction's metadata is never seen, a restart of the log keeps it, and metadata
past Kafka's ``offset.metadata.max.bytes`` (4096) is refused with OFFSET_METADATA_TOO_LARGE
and stored nowhere."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamkit._core.types import TopicPartition
from streamkit.transport.base import (
    Consumer,
    LogClient,
    OffsetMetadataTooLargeError,
    TransportError,
)
from streamkit.transport.connect import open_log_client
from tests.support.broker import BrokerProcess

MAX_BYTES = 4096  # Kafka's default offset.metadata.max.bytes, and the log's


class Quiet:
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


@pytest.fixture
async def client(log_url: str) -> AsyncIterator[LogClient]:
    c = open_log_client(log_url)
    await c.start()
    yield c
    await c.aclose()


async def _member(client: LogClient, group: str, topic: str, partitions: int) -> Consumer:
    """A started member of ``group`` holding every partition of ``topic`` (aiokafka commits
    only partitions assigned)."""
    consumer = client.consumer(group)
    consumer.subscribe([topic], Quiet())
    await consumer.start()
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < partitions:
        assert time.monotonic() < deadline, f"assigned {consumer.assignment()}"
        await consumer.getmany(100, 1)
    return consumer


async def _read_back(client: LogClient, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int | None, str | None]]:
    """(committed offset, metadata) per partition, read by a fresh member of ``group``."""
    consumer = client.consumer(group)
    try:
        return {tp: (await consumer.committed(tp), await consumer.committed_metadata(tp)) for tp in tps}
    finally:
        await consumer.aclose()


async def test_a_commit_carries_metadata_per_partition(client: LogClient, unique: str) -> None:
    topic, group = f"{unique}-in", f"{unique}-g"
    await client.ensure_topic(topic, 3)
    p0, p1, p2 = (TopicPartition(topic, p) for p in range(3))
    consumer = await _member(client, group, topic, 3)
    try:
        assert await consumer.committed_metadata(p0) is None  # nothing committed yet
        await consumer.commit({p0: 3, p1: 5}, metadata={p0: "st=1700000000123", p1: ""})
        assert await consumer.committed_metadata(p0) == "st=1700000000123"
        assert await consumer.committed_metadata(p1) == ""  # empty is a metadata, not "none"
        assert await consumer.committed_metadata(p2) is None
        assert await consumer.committed(p0) == 3  # committed() is what it was
        # A commit without metadata replaces it with "" (Kafka's rule: the offset and its
        # metadata are one value); one with metadata for only some partitions, too.
        await consumer.commit({p0: 4, p1: 6}, metadata={p1: "st=9"})
        assert await consumer.committed_metadata(p0) == ""
        # Exactly the limit is accepted, non-ASCII counted in UTF-8 bytes.
        at_limit = "é" * (MAX_BYTES // 2)
        await consumer.commit({p2: 1}, metadata={p2: at_limit})
    finally:
        await consumer.aclose()
    assert await _read_back(client, group, [p0, p1, p2]) == {p0: (4, ""), p1: (6, "st=9"), p2: (1, at_limit)}


async def test_metadata_for_a_partition_not_committed_is_refused(client: LogClient, unique: str) -> None:
    topic, group = f"{unique}-in", f"{unique}-g"
    await client.ensure_topic(topic, 2)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = await _member(client, group, topic, 2)
    try:
        with pytest.raises(TransportError, match=rf"metadata for {p1} .*no offset"):
            await consumer.commit({p0: 1}, metadata={p1: "st=1"})
        assert await consumer.committed(p0) is None
    finally:
        await consumer.aclose()


async def test_too_large_metadata_is_refused_and_the_previous_commit_stays(client: LogClient, unique: str) -> None:
    topic, group = f"{unique}-in", f"{unique}-g"
    await client.ensure_topic(topic, 2)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = await _member(client, group, topic, 2)
    try:
        await consumer.commit({p0: 3}, metadata={p0: "st=1"})
        with pytest.raises(OffsetMetadataTooLargeError, match=rf"OFFSET_METADATA_TOO_LARGE.*{p0}.*4097 bytes") as raised:
            await consumer.commit({p0: 9}, metadata={p0: "x" * (MAX_BYTES + 1)})
        assert not raised.value.retriable  # the same commit would be refused again
        assert isinstance(raised.value, TransportError)
        assert await consumer.committed(p0) == 3
        assert await consumer.committed_metadata(p0) == "st=1"
        assert await consumer.committed_metadata(p1) is None
    finally:
        await consumer.aclose()
    assert await _read_back(client, group, [p0, p1]) == {p0: (3, "st=1"), p1: (None, None)}


async def test_a_transaction_commits_offsets_with_metadata(client: LogClient, unique: str) -> None:
    topic, group = f"{unique}-in", f"{unique}-g"
    await client.ensure_topic(topic, 2)
    await client.ensure_topic(f"{unique}-out", 1)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = client.transactional_producer(f"{unique}-tid", timeout_ms=30_000)
    await producer.start()
    try:
        await producer.send(f"{unique}-out", b"k", b"v", partition=0)
        await producer.commit_transaction({p0: 7, p1: 2}, group, metadata={p0: "st=1700000000777"})
        assert producer.commits == 1
    finally:
        await producer.aclose()
    assert await _read_back(client, group, [p0, p1]) == {p0: (7, "st=1700000000777"), p1: (2, "")}


@pytest.mark.parametrize("records", [True, False], ids=["records", "offsets-only"])
async def test_an_aborted_transaction_s_metadata_is_never_seen(client: LogClient, unique: str, records: bool) -> None:
    """A transaction whose offsets reached the log (p0's) but that could not commit (p1's
    metadata too large) is aborted: p0 keeps the offset and metadata of the last commit, also
    after the next transaction (which commits p1 alone) commits. With records in the
    transaction or offsets alone (then the log knows the transaction only by its offsets)."""
    topic, group = f"{unique}-in", f"{unique}-g"
    await client.ensure_topic(topic, 2)
    await client.ensure_topic(f"{unique}-out", 1)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = client.transactional_producer(f"{unique}-tid", timeout_ms=30_000)
    await producer.start()
    try:
        await producer.commit_transaction({p0: 4}, group, metadata={p0: "st=first"})
        if records:
            await producer.send(f"{unique}-out", b"k", b"lost", partition=0)
        with pytest.raises(OffsetMetadataTooLargeError, match=rf"OFFSET_METADATA_TOO_LARGE.*{p1}"):
            await producer.commit_transaction(
                {p0: 8, p1: 8}, group, metadata={p0: "st=aborted", p1: "y" * (MAX_BYTES + 1)}
            )
        await producer.abort_transaction()
        assert await _read_back(client, group, [p0, p1]) == {p0: (4, "st=first"), p1: (None, None)}
        # The producer goes on: the next transaction commits, and only what it holds.
        await producer.send(f"{unique}-out", b"k", b"kept", partition=0)
        await producer.commit_transaction({p1: 9}, group, metadata={p1: "st=next"})
    finally:
        await producer.aclose()
    assert await _read_back(client, group, [p0, p1]) == {p0: (4, "st=first"), p1: (9, "st=next")}


@pytest.mark.parametrize("log", ["embedded", "broker"])
async def test_metadata_survives_a_restart_of_the_log(
    log: str, tmp_path: Path, broker_factory: type[BrokerProcess], unique: str
) -> None:
    """Commits acknowledged, then the log stops (the broker is killed, SIGKILL): a new
    client reads every partition's metadata back, plain and transactional."""
    topic, group = f"{unique}-in", f"{unique}-g"
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    proc = broker_factory() if log == "broker" else None
    url = f"file://{tmp_path / 'log'}" if proc is None else f"kafka://{proc.start(same_port=False).bootstrap}"
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic(topic, 2)
        consumer = await _member(client, group, topic, 2)
        try:
            await consumer.commit({p0: 5}, metadata={p0: "st=plain"})
        finally:
            await consumer.aclose()
        producer = client.transactional_producer(f"{unique}-tid", timeout_ms=30_000)
        await producer.start()
        try:
            await producer.commit_transaction({p1: 6}, group, metadata={p1: "st=txn"})
        finally:
            await producer.aclose()
    finally:
        await client.aclose()
    if proc is not None:
        proc.kill()
        proc.start()  # the same port
    again = open_log_client(url)
    await again.start()
    try:
        assert await _read_back(again, group, [p0, p1]) == {p0: (5, "st=plain"), p1: (6, "st=txn")}
    finally:
        await again.aclose()
