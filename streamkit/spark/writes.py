"""What the backfill writes to the log from the driver: changelogs (with tombstones for keys the
result lacks), topics, appends by key hash, and the app's consumer group moved past what was
read; the log's topics and partition counts. Every connection is made as ``LogAccess`` says
(``spark.access``: the app's TLS and SASL)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit.app.application import App
from streamkit.dsl.nodes import (
    Pipeline,
    Source,
)
from streamkit.log.records import NewRecord
from streamkit.spark.access import LogAccess
from streamkit.spark.executors import CHANGELOG, Row, Uncounted, read_source
from streamkit.spark.options import OffsetRange, split_range
from streamkit.spark.planning import agent_inputs, plans_named
from streamkit.spark.source import FORMAT

SPLIT_OFFSETS = 1_000_000


DRIVER_SCAN = 200_000  # a changelog of at most this many offsets is scanned in the driver


def offset_ranges(access: LogAccess, topic: str, from_ms: int | None, to_ms: int | None) -> tuple[dict[int, int], dict[int, int]]:
    """(start, end) offsets per partition of ``topic`` for the time range."""
    log = access.open(topic)
    try:
        ends: dict[int, int] = {}
        starts: dict[int, int] = {}
        for p in range(log.partition_count()):
            first, end = log.bounds(p)
            starts[p] = first
            if from_ms is not None:
                found = log.offset_for_timestamp(p, from_ms)
                starts[p] = end if found is None else found
            if to_ms is not None:
                found = log.offset_for_timestamp(p, to_ms + 1)
                end = end if found is None else found
            ends[p] = max(end, starts[p])
    finally:
        log.close()
    return starts, ends


def write_changelog(spark: Any, access: LogAccess, table: Any, rows: list[Row], partitions: int) -> tuple[int, int, list[Row]]:
    """Append ``rows`` to ``table``'s changelog, with a tombstone for each key the changelog
    already holds that ``rows`` lack; (records written, of which tombstones, the records)."""
    name = table.changelog_topic.name
    stale: list[Row] = []
    if existing_partitions(access, name):
        new = {(r[1], r[2]) for r in rows}
        now = int(time.time() * 1000)
        stale = [(CHANGELOG, p, key, None, now, None) for p, key in _keys(spark, access, name) if (p, key) not in new]
    rows = rows + stale
    if rows:
        ensure_topic(access, name, partitions, table.changelog_topic.config)
        append(access, name, rows)
    return len(rows), len(stale), rows


def write_topic(app: App, access: LogAccess, topic: str, rows: list[Row]) -> int:
    """Append ``rows`` to ``topic`` (created as the app declares it, or with the app's default
    partition count); how many."""
    declared = app.topics.get(topic)
    partitions = (declared.partitions if declared is not None else None) or app.topic_partitions
    ensure_topic(access, topic, partitions, declared.config if declared is not None else {})
    if rows:
        append(access, topic, rows)
    return len(rows)


def append(access: LogAccess, topic: str, rows: list[Row]) -> None:
    """Append ``rows`` to ``topic``: a row without a partition goes where a producer puts its
    key (murmur2), as the data source's writer places rows."""
    log = access.open(topic)
    try:
        count = log.partition_count()
        by_partition: dict[int, list[NewRecord]] = {}
        spread = 0
        for _kind, p, key, value, ts, headers in rows:
            if p is None:
                if key is None:
                    p, spread = spread % count, spread + 1
                else:
                    p = partition_for_key(key, count)
            by_partition.setdefault(p, []).append(NewRecord(key, value, ts, headers or ()))
        for p, records in sorted(by_partition.items()):
            log.append(p, records, "none")
    finally:
        log.close()


def _keys(spark: Any, access: LogAccess, topic: str) -> set[tuple[int, bytes | None]]:
    """(partition, key) of every key ``topic`` holds: whose last record is not a tombstone
    (read on the executors; a small topic, here: a Spark job's scheduling costs more than
    reading it)."""
    starts, ends = offset_ranges(access, topic, None, None)
    ranges = [r for p in sorted(ends) for r in split_range(OffsetRange(p, starts[p], ends[p]), SPLIT_OFFSETS)]
    if not ranges:
        return set()
    if sum(r.end - r.start for r in ranges) <= DRIVER_SCAN:
        held: dict[tuple[int, bytes | None], bool] = {}
        for p, keys, values, _offsets, _timestamps, _times in read_source(
            access.task_log(), topic, Uncounted(), iter(ranges)
        ):
            for key, value in zip(keys, values, strict=True):
                held[(p, key)] = value is not None  # offset order: the last one wins
        return {where for where, present in held.items() if present}
    counter = spark.sparkContext.accumulator(0)
    read = functools.partial(read_source, access.task_log(), topic, counter)
    last = (
        spark.sparkContext.parallelize(ranges, len(ranges)).mapPartitions(read)
        .flatMap(lambda chunk: [((chunk[0], k), (o, v is not None)) for k, v, o in zip(chunk[1], chunk[2], chunk[3], strict=True)])
        .reduceByKey(max)
    )
    return {where for where, (_offset, held) in last.collect() if held}


def write_frame(rows: Any, access: LogAccess, topic: str) -> None:
    """A DataFrame of rows appended through the data source's writer."""
    writer = rows.write.format(FORMAT).option("topic", topic).mode("append")
    for name, value in access.data_source_options().items():
        writer = writer.option(name, value)
    writer.save()


def existing_partitions(access: LogAccess, topic: str) -> int | None:
    """``topic``'s partition count, None when it does not exist. An embedded log's comes from
    its metadata file (opening the log as a client would first open every partition)."""
    import asyncio

    from streamkit.log.errors import UnknownTopicError
    from streamkit.log.reader import topic_partition_count
    from streamkit.transport.connect import open_log_client

    path = access.path
    if path is not None and os.path.isdir(path):
        try:
            return topic_partition_count(path, topic)
        except UnknownTopicError:
            return None

    async def count() -> int | None:
        client = open_log_client(access.broker, options=access.options)
        await client.start()
        try:
            return await client.partition_count(topic)
        finally:
            await client.aclose()

    return asyncio.run(count())


def ensure_topic(access: LogAccess, name: str, partitions: int, config: Any) -> int:
    """Create topic ``name`` unless it exists; its partition count."""
    import asyncio

    from streamkit.transport.connect import open_log_client

    found = existing_partitions(access, name) if access.path is not None else None
    if found is not None:
        return found

    async def ensure() -> int:
        client = open_log_client(access.broker, options=access.options)
        await client.start()
        try:
            return await client.ensure_topic(name, partitions, config)
        finally:
            await client.aclose()

    return asyncio.run(ensure())


def check_group_free(app: App, pipelines: list[tuple[str, Pipeline]]) -> None:
    """Moving the group past a source would skip it for every other agent reading it."""
    ours = {stage.name for plan in plans_named(app, pipelines) for stage in plan.stages}
    inputs_of = agent_inputs(app)
    for _name, pipeline in pipelines:
        source = pipeline[0]
        assert isinstance(source, Source)
        others = sorted(
            name for name, inputs in inputs_of.items() if name not in ours and source.topic.name in inputs
        )
        if others:
            raise ConfigError(
                f"topic {source.topic.name!r} is also read by {others} of app {app.id!r}: a backfill moves the "
                "app's consumer group past what it read, which would skip those records for them; backfill "
                "their tables together (one --table each)"
            )


def commit_group(
    app: App, access: LogAccess, pipelines: list[tuple[str, Pipeline]], ends: dict[str, dict[int, int]], at_end: Iterable[str] = (),
) -> None:
    """The app's group resumes after what the backfill read (and after everything already in
    the pipelines' repartition topics, which the backfill recomputed, and in the tables'
    streams ``at_end``, whose readers it ran)."""
    import asyncio

    from streamkit._core.types import TopicPartition
    from streamkit.transport.connect import open_log_client
    from streamkit.transport.kafka_tools import KafkaTools
    from streamkit.transport.security import PLAINTEXT

    repartitions = [rep.topic.name for plan in plans_named(app, pipelines) for rep in plan.repartitions]
    repartitions += list(at_end)

    async def commit() -> None:
        client = open_log_client(access.broker, options=access.options)
        await client.start()
        try:
            offsets: dict[str, dict[int, int]] = {topic: dict(by) for topic, by in ends.items()}
            reader = client.reader()
            try:
                for topic in repartitions:
                    count = await client.partition_count(topic) or 0
                    if count:
                        offsets[topic] = {p: (await reader.bounds(TopicPartition(topic, p)))[1] for p in range(count)}
            finally:
                await reader.aclose()
            # A file:// log another process owns is reached through its port: a Kafka client
            # (``open_log_client``), whose group offsets are committed as on a broker.
            servers = access.bootstrap or getattr(client, "bootstrap_servers", None)
            if servers:
                # An embedded directory's owner serves PLAINTEXT on loopback.
                security = access.security if access.bootstrap else PLAINTEXT
                async with KafkaTools(servers, security=security) as tools:
                    for topic, by_partition in offsets.items():
                        await tools.commit(app.id, topic, by_partition)
            else:
                consumer = client.consumer(app.id)
                await consumer.commit(
                    {TopicPartition(t, p): o for t, by_partition in offsets.items() for p, o in by_partition.items()}
                )
        finally:
            await client.aclose()

    asyncio.run(commit())
