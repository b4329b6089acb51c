"""Backfill: a declarative table of an app recomputed from the log's history on Spark.

The same pipeline the worker runs (``app.stream(...)...count(name)``, see ``streamkit.dsl``)
is planned as Spark operations over the source topic, read through the ``streamkit`` data
source:

1. the source records are decoded with the topic's serializers, and the operators before the
   grouping run on each (``dsl.runner``, the worker's own function);
2. each output goes to the table partition the worker would put it in: by the hash of its
   key as the repartition topic encodes it (after a ``group_by``), else the source partition;
3. per table partition and key, the outputs are folded in event order (timestamp, then source
   partition and offset) with the aggregation's function (count, sum, reduce, aggregate,
   latest value);
4. the results are appended to the table's changelog, the state every worker restores from,
   and the app's consumer group is moved to the end of what was read, so a worker started
   afterwards serves the backfilled values and processes only newer records.

What the backfill does not run is refused by name: stream-table joins, table-table joins and
pipelines over a table's changes (they depend on the timing of the other side), and tables
filled by agent code. A backfill needs the app's workers stopped: it moves their group.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit._core.serde import serde_for
from streamkit.app import App
from streamkit.dsl import (
    REPARTITION_KEY_SERDE,
    Aggregate,
    GroupBy,
    Join,
    Pipeline,
    Sink,
    Source,
    StreamJoin,
    TableJoin,
    WindowedAggregate,
    repartition_topic_name,
    runner,
    stage_names,
)
from streamkit.spark.logs import open_source_log
from streamkit.spark.source import FORMAT, register

_REPARTITION_KEYS = serde_for(REPARTITION_KEY_SERDE)


@dataclass(frozen=True, slots=True)
class BackfillReport:
    table: str
    records_read: int
    keys_written: int
    ends: dict[int, int]  # source partition -> the offset the app's group now starts from


def spark_session(master: str, name: str) -> Any:
    """A SparkSession for a backfill: the driver on loopback, no web UI, the workers on this
    Python."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(name).config("spark.ui.enabled", "false")
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def find_pipeline(app: App, table: str) -> Pipeline:
    """The declarative pipeline that fills ``table``, or a clear error."""
    for pipeline in app.topologies:
        terminal = pipeline[-1]
        if isinstance(terminal, Aggregate) and terminal.table.name == table:
            refuse_unsupported(pipeline, table)
            return pipeline
        if isinstance(terminal, WindowedAggregate) and terminal.table.name == table:
            raise ConfigError(f"table {table!r} is windowed: the backfill does not run windowed tables yet")
        if isinstance(terminal, TableJoin) and terminal.table.name == table:
            raise ConfigError(f"table {table!r} is a table-table join: the backfill does not run those")
    declarative = sorted(
        p[-1].table.name for p in app.topologies if isinstance(p[-1], Aggregate)
    )
    if table in app.tables:
        raise ConfigError(
            f"table {table!r} is filled by agent code, which the backfill cannot plan; it runs "
            f"declarative tables (app.stream(...)): {declarative or 'the app has none'}"
        )
    raise ConfigError(f"the app has no table {table!r}; declarative tables: {declarative or 'none'}")


def refuse_unsupported(pipeline: Pipeline, table: str) -> None:
    source = pipeline[0]
    assert isinstance(source, Source)
    if source.table is not None:
        raise ConfigError(f"table {table!r} is computed from the changes of table {source.table.name!r}: "
                          "the backfill does not run pipelines over a table's changes")
    for node in pipeline:
        if isinstance(node, Join):
            raise ConfigError(f"table {table!r} joins a stream with table {node.table.name!r}: the backfill "
                              "does not run stream-table joins (their answer depends on when each side arrived)")
        if isinstance(node, StreamJoin):
            raise ConfigError(f"table {table!r} is fed by the windowed stream-stream join {node.name!r}: the "
                              "backfill does not run stream-stream joins")
        if isinstance(node, Sink):
            raise ConfigError(f"the pipeline of table {table!r} writes a topic midway: not a backfill")


def log_options(app: App) -> dict[str, str]:
    """The data source's options that reach the app's log."""
    url = urlparse(app.broker)
    if url.scheme == "file":
        return {"path": (url.netloc + url.path) or ".streamkit"}
    if url.scheme == "kafka":
        return {"bootstrap": url.netloc.split(",")[0]}
    raise ConfigError(f"cannot backfill from broker {app.broker!r}")


def _fold(kind: str, fn: Callable[..., Any] | None, initializer: Callable[[], Any] | None,
          key: Any, values: Iterable[Any]) -> tuple[bool, Any]:
    """(present?, value) after folding ``values`` (in event order) as the worker's table would."""
    if kind == "count":
        return True, sum(1 for _ in values)
    if kind == "sum":
        return True, sum(fn(v) if fn is not None else v for v in values)
    if kind == "latest":
        last = None
        for last in values:  # noqa: B007 - the last value is the one kept
            pass
        return last is not None, last
    found = False
    acc: Any = None
    for v in values:
        if kind == "reduce":
            assert fn is not None
            acc = v if not found else fn(acc, v)
        else:
            assert fn is not None and initializer is not None
            acc = fn(key, v, acc if found else initializer())
        found = True
    return found, acc


@dataclass(frozen=True)
class _Plan:
    """What an executor runs, rebuilt there from the app's module (functions and serializers
    do not travel: only the app's reference and import root do)."""

    app_ref: str
    root: str | None
    table: str
    repartitions: int


_PLANS: dict[_Plan, Any] = {}


def _parts(plan: _Plan) -> Any:
    """(key_loads, value_loads, before, regroup, grouped, after, key_dumps, value_dumps, kind,
    fn, initializer) of ``plan``, built once per executor process."""
    found = _PLANS.get(plan)
    if found is None:
        app = load_app(plan.app_ref, plan.root)
        pipeline = find_pipeline(app, plan.table)
        source, terminal = pipeline[0], pipeline[-1]
        assert isinstance(source, Source) and isinstance(terminal, Aggregate)
        middle = pipeline[1:-1]
        split = next((i for i, n in enumerate(middle) if isinstance(n, GroupBy)), None)
        group = middle[split] if split is not None else None
        before = middle if split is None else middle[:split]
        after = () if split is None else middle[split + 1 :]
        found = _PLANS[plan] = (
            source.topic.key_serde.loads, source.topic.value_serde.loads,
            runner(tuple(before)), group.fn if isinstance(group, GroupBy) else None, group is not None,
            runner(tuple(after)), terminal.table.key_serde.dumps, terminal.table.value_serde.dumps,
            terminal.kind, terminal.fn, terminal.initializer,
        )
    return found


def load_app(app_ref: str, root: str | None) -> App:
    """The ``App`` named ``module:attribute``, importing from ``root`` first when given."""
    import importlib

    module_name, _, attr = app_ref.partition(":")
    if root and root not in sys.path:
        sys.path.insert(0, root)
    app = getattr(importlib.import_module(module_name), attr, None)
    if not isinstance(app, App):
        raise ConfigError(f"{app_ref!r} is not a streamkit App")
    return app


def import_root(app_ref: str) -> str | None:
    """The directory ``app_ref``'s module is imported from (for the executors)."""
    module = sys.modules.get(app_ref.partition(":")[0])
    path: str | None = getattr(module, "__file__", None)
    if module is None or path is None:
        return None
    root = os.path.dirname(os.path.abspath(path))
    for _ in range(module.__name__.count(".") + (1 if path.endswith("__init__.py") else 0)):
        root = os.path.dirname(root)
    return root


def _place(plan: _Plan, rows: Iterator[Any]) -> Iterator[tuple[tuple[int, bytes], tuple[int, int, int, Any, Any]]]:
    """Source rows -> ((table partition, key bytes), (timestamp, partition, offset, key, value))."""
    key_loads, value_loads, run_before, regroup, grouped, run_after, key_dumps, *_ = _parts(plan)
    for row in rows:
        key, value = key_loads(row.key), value_loads(row.value)
        timestamp = int(row.timestamp.timestamp() * 1000)
        for k, v in run_before(key, value):
            if regroup is not None:
                k = regroup(v)
            if grouped:
                partition = partition_for_key(_REPARTITION_KEYS.dumps(k) or b"", plan.repartitions)
            else:
                partition = row.partition
            for k2, v2 in run_after(k, v):
                yield (partition, key_dumps(k2) or b""), (timestamp, row.partition, row.offset, k2, v2)


def _fold_key(plan: _Plan, item: tuple[tuple[int, bytes], Iterable[tuple[int, int, int, Any, Any]]]) -> Iterator[tuple[Any, ...]]:
    """One key's outputs, in event order, folded into the row its changelog record becomes."""
    *_, value_dumps, kind, fn, initializer = _parts(plan)
    (partition, raw_key), outputs = item
    ordered = sorted(outputs, key=lambda o: (o[0], o[1], o[2]))
    present, value = _fold(kind, fn, initializer, ordered[0][3], (o[4] for o in ordered))
    stamp = datetime.fromtimestamp(ordered[-1][0] / 1000, tz=UTC)
    yield (raw_key, value_dumps(value) if present else None, partition, stamp)


def backfill(
    spark: Any, app_ref: str, *tables: str, from_ms: int | None = None, to_ms: int | None = None,
) -> list[BackfillReport]:
    """Recompute ``tables`` (declared tables of the app ``app_ref``, ``module:attribute``) over
    their sources' history, write them to their changelogs, then move the app's consumer group
    past what was read (see the module docstring). Every agent of the app that reads a source
    must be one of these tables' pipelines: the group's position is shared."""
    if not tables:
        raise ConfigError("name at least one table to backfill")
    app = load_app(app_ref, None)
    pipelines = {name: find_pipeline(app, name) for name in tables}
    _check_group_free(app, list(pipelines.items()))
    reports = []
    ends: dict[str, dict[int, int]] = {}
    for name, pipeline in pipelines.items():
        report = _backfill_one(spark, app, app_ref, name, pipeline, from_ms, to_ms)
        reports.append(report)
        source = pipeline[0]
        assert isinstance(source, Source)
        ends[source.topic.name] = report.ends
    _commit(app, list(pipelines.items()), ends)
    return reports


def _backfill_one(
    spark: Any, app: App, app_ref: str, table_name: str, pipeline: Pipeline, from_ms: int | None, to_ms: int | None
) -> BackfillReport:
    import functools

    source = pipeline[0]
    terminal = pipeline[-1]
    assert isinstance(source, Source) and isinstance(terminal, Aggregate)
    table = terminal.table

    options = log_options(app)
    log = open_source_log(options.get("path"), options.get("bootstrap"), source.topic.name)
    try:
        source_partitions = log.partition_count()
        ends: dict[int, int] = {}
        starts: dict[int, int] = {}
        for p in range(source_partitions):
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
    # The worker's rule: the changelog's count if it exists, else the table's, else the sources'.
    table_partitions = _partition_count(app, table.changelog_topic.name, table.declared_partitions or source_partitions)
    # compile_pipeline's repartition topics take the source's partition count.
    plan = _Plan(app_ref, import_root(app_ref), table_name, source_partitions)

    register(spark)
    reader = spark.read.format(FORMAT).option("topic", source.topic.name)
    for name, value in options.items():
        reader = reader.option(name, value)
    topic = source.topic.name
    offsets = ", ".join(f'"{p}": {o}' for p, o in starts.items())
    reader = reader.option("startingOffsets", f'{{"{topic}": {{{offsets}}}}}')
    offsets = ", ".join(f'"{p}": {o}' for p, o in ends.items())
    reader = reader.option("endingOffsets", f'{{"{topic}": {{{offsets}}}}}')
    frame = reader.load().select("key", "value", "partition", "offset", "timestamp")
    read = frame.count()
    results = (
        frame.rdd.mapPartitions(functools.partial(_place, plan))
        .groupByKey()
        .flatMap(functools.partial(_fold_key, plan))
    )
    out = spark.createDataFrame(results, "key binary, value binary, partition int, timestamp timestamp")
    out.cache()
    written = out.count()
    if written:
        _ensure_changelog(app, table, table_partitions)
        writer = out.write.format(FORMAT).option("topic", table.changelog_topic.name).mode("append")
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.save()
    out.unpersist()
    return BackfillReport(table_name, read, written, ends)


def _partition_count(app: App, topic: str, default: int) -> int:
    import asyncio

    from streamkit.transport.base import open_log_client

    async def count() -> int | None:
        client = open_log_client(app.broker)
        await client.start()
        try:
            return await client.partition_count(topic)
        finally:
            await client.aclose()

    return asyncio.run(count()) or default


def _ensure_changelog(app: App, table: Any, partitions: int) -> None:
    import asyncio

    from streamkit.transport.base import open_log_client

    async def ensure() -> None:
        client = open_log_client(app.broker)
        await client.start()
        try:
            await client.ensure_topic(table.changelog_topic.name, partitions, table.changelog_topic.config)
        finally:
            await client.aclose()

    asyncio.run(ensure())


def _check_group_free(app: App, pipelines: list[tuple[str, Pipeline]]) -> None:
    """Moving the group past a source would skip it for every other agent reading it."""
    ours = {stage for name, p in pipelines for stage in stage_names(p, name)}
    for _name, pipeline in pipelines:
        source = pipeline[0]
        assert isinstance(source, Source)
        others = sorted(
            a.name for a in app.agents.values()
            if a.name not in ours and any(t.name == source.topic.name for t in a.topics)
        )
        if others:
            raise ConfigError(
                f"topic {source.topic.name!r} is also read by {others} of app {app.id!r}: a backfill moves the "
                "app's consumer group past what it read, which would skip those records for them; backfill "
                "their tables together (one --table each)"
            )


def _commit(app: App, pipelines: list[tuple[str, Pipeline]], ends: dict[str, dict[int, int]]) -> None:
    """The app's group resumes after what the backfill read (and after everything already in
    the pipelines' repartition topics, which the backfill recomputed)."""
    import asyncio

    from streamkit._core.types import TopicPartition
    from streamkit.transport.base import open_log_client
    from streamkit.transport.kafka_tools import KafkaTools

    repartitions = [t for name, p in pipelines if (t := repartition_topic_name(app.id, p, name)) is not None]

    async def commit() -> None:
        url = urlparse(app.broker)
        client = open_log_client(app.broker)
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
            if url.scheme == "kafka":
                async with KafkaTools(url.netloc) as tools:
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
