"""The transactional producer, the same tests on both transports: a commit makes the records
and the group's offsets visible together, an abort hides the records from read_committed
readers, and a producer fenced by a newer one with its transactional id gets
``ProducerFencedError`` and goes on after ``abort_transaction``."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging

import pytest

from streamkit._core.types import TopicPartition
from streamkit.transport.base import ProducerFencedError, TransactionAbortedError, TransportError
from streamkit.transport.connect import open_log_client

_names = itertools.count()


async def _values(url: str, topic: str, isolation_level: str) -> list[bytes]:
    client = open_log_client(url)
    await client.start()
    reader = client.reader(isolation_level=isolation_level)
    out: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        offset, end = await reader.bounds(tp)
        while offset < end:
            chunk = await reader.read(tp, offset, 1000)
            if chunk.next_offset <= offset:
                break
            out.extend(r.value or b"" for r in chunk.records)
            offset = chunk.next_offset
    finally:
        await reader.aclose()
        await client.aclose()
    return out


async def test_commit_abort_and_fencing(log_url: str) -> None:
    name = f"txn{next(_names)}"
    client = open_log_client(log_url)
    await client.start()
    try:
        await client.ensure_topic(name, 1)
        await client.ensure_topic(f"{name}-in", 1)
        producer = client.transactional_producer(f"{name}-tid", timeout_ms=30_000)
        await producer.start()
        await producer.send(name, b"k", b"one", partition=0)
        await producer.commit_transaction({TopicPartition(f"{name}-in", 0): 7}, f"{name}-group")
        producer.send_nowait(name, 0, b"k", b"aborted", 1000)
        await producer.flush()  # in the log, then aborted
        await producer.abort_transaction()
        await producer.send(name, b"k", b"two", partition=0)
        await producer.commit_transaction({TopicPartition(f"{name}-in", 0): 9}, f"{name}-group")
        assert producer.commits == 2 and producer.aborts == 1

        # A newer instance with the same id fences this one.
        newer = client.transactional_producer(f"{name}-tid", timeout_ms=30_000)
        await newer.start()
        await producer.send(name, b"k", b"zombie", partition=0)
        with pytest.raises(TransactionAbortedError) as raised:
            await producer.commit_transaction({TopicPartition(f"{name}-in", 0): 11}, f"{name}-group")
        assert isinstance(raised.value, (ProducerFencedError, TransactionAbortedError))
        await newer.send(name, b"k", b"three", partition=0)
        await newer.commit_transaction({TopicPartition(f"{name}-in", 0): 12}, f"{name}-group")
        await newer.aclose()
        await producer.abort_transaction()  # goes on with a new epoch
        await producer.aclose()

        consumer = client.consumer(f"{name}-group")
        committed = await consumer.committed(TopicPartition(f"{name}-in", 0))
        await consumer.aclose()
    finally:
        await client.aclose()
    assert await _values(log_url, name, "read_committed") == [b"one", b"two", b"three"]
    everything = await _values(log_url, name, "read_uncommitted")
    assert b"aborted" in everything and b"zombie" not in await _values(log_url, name, "read_committed")
    assert committed == 12


async def test_records_handed_over_before_the_commit_are_in_it(log_url: str) -> None:
    """A transaction with records but no offsets (a timer's output) commits them, also when
    the producer handed them over before ``commit_transaction`` was called."""
    name = f"txn{next(_names)}"
    client = open_log_client(log_url)
    await client.start()
    try:
        await client.ensure_topic(name, 1)
        producer = client.transactional_producer(f"{name}-tid", timeout_ms=30_000)
        await producer.start()
        ack = await producer.send(name, b"k", b"early", partition=0)
        await ack  # appended (embedded) or acknowledged by the broker: handed over for sure
        assert producer.transaction_open
        await producer.commit_transaction({}, f"{name}-group")
        assert not producer.transaction_open
        await producer.aclose()
    finally:
        await client.aclose()
    assert await _values(log_url, name, "read_committed") == [b"early"]


async def test_a_transaction_that_lost_a_send_does_not_commit_whoever_saw_the_failure(log_url: str) -> None:
    """A batch the log refused fails its transaction: the commit raises (the worker aborts and
    redoes from the last commit) even though an earlier flush already reported the failure (an
    aligned task flushes the other tasks' producers). Committed, the input's offsets would pass
    records that are not in the log. The abort forgets the failure: the next commits go on."""
    name = f"txn{next(_names)}"
    tp_in = TopicPartition(f"{name}-in", 0)
    client = open_log_client(log_url)
    await client.start()
    try:
        await client.ensure_topic(name, 1, {"max.message.bytes": "4000"})
        await client.ensure_topic(tp_in.topic, 1)
        producer = client.transactional_producer(f"{name}-tid", timeout_ms=30_000)
        await producer.start()
        await producer.send(name, b"k", b"one", partition=0)
        await producer.commit_transaction({tp_in: 1}, f"{name}-group")
        await producer.send(name, b"k", b"lost", partition=0)
        await producer.flush()
        producer.send_nowait(name, 0, b"k", b"x" * 20_000, 1000)  # over max.message.bytes
        with pytest.raises(TransportError):
            await producer.flush()  # reported here, to whoever flushed
        with pytest.raises(TransactionAbortedError):
            await producer.commit_transaction({tp_in: 5}, f"{name}-group")
        await producer.abort_transaction()
        await producer.send(name, b"k", b"two", partition=0)
        await producer.commit_transaction({tp_in: 6}, f"{name}-group")
        assert (producer.commits, producer.aborts) == (2, 1)
        await producer.aclose()
        consumer = client.consumer(f"{name}-group")
        committed = await consumer.committed(tp_in)
        await consumer.aclose()
    finally:
        await client.aclose()
    assert await _values(log_url, name, "read_committed") == [b"one", b"two"]
    assert committed == 6


@pytest.mark.timeout(30)  # the hang never yields to the loop: only pytest-timeout ends it
@pytest.mark.parametrize("end", ["flush", "abort", "close"])
async def test_a_producer_ends_right_after_an_ack(log_url: str, end: str) -> None:
    """Flushing, aborting or closing right after awaiting a send's ack returns (it hung on
    Python 3.12+: the task that appended the batch was done, but the callback dropping it from
    the producer's in-flight set had not run yet, and waiting on it never yielded to the loop
    that would run that callback)."""
    name = f"txn{next(_names)}"
    client = open_log_client(log_url)
    await client.start()
    try:
        await client.ensure_topic(name, 1)
        producer = client.transactional_producer(f"{name}-tid", timeout_ms=30_000)
        await producer.start()
        await (await producer.send(name, b"k", b"early", partition=0))
        if end == "flush":
            await producer.flush()
            await producer.commit_transaction({}, f"{name}-group")
        elif end == "abort":
            await producer.abort_transaction()
        await producer.aclose()
    finally:
        await client.aclose()
    assert await _values(log_url, name, "read_committed") == ([b"early"] if end == "flush" else [])


async def test_a_producer_fenced_while_it_sends_closes_quietly_and_says_so(
    log_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A zombie (a worker paused past its session) resumes and sends into a partition new to
    its transaction: the log refuses it, a newer instance holds its transactional id. Closing
    it then ends quietly, with no client library's error or traceback, and it reports the fence
    (the worker tells its user which task was fenced)."""
    name = f"txn{next(_names)}"
    client = open_log_client(log_url)
    await client.start()
    try:
        await client.ensure_topic(name, 2)
        producer = client.transactional_producer(f"{name}-tid", timeout_ms=30_000)
        await producer.start()
        await (await producer.send(name, b"k", b"one", partition=0))
        assert not producer.fenced
        newer = client.transactional_producer(f"{name}-tid", timeout_ms=30_000)
        await newer.start()
        producer.send_nowait(name, 1, b"k", b"zombie", 1000)
        with pytest.raises(TransportError):
            await producer.flush()
        await producer.aclose()
        assert producer.fenced
        await newer.send(name, b"k", b"two", partition=1)
        await newer.commit_transaction({}, f"{name}-group")
        await newer.aclose()
    finally:
        await client.aclose()
    gc.collect()  # a never-retrieved future of the client library is reported when collected
    await asyncio.sleep(0)
    noisy = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not noisy, [r.getMessage() for r in noisy]
