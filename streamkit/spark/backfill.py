"""Backfill: a declarative table of an app recomputed from the log's history on Spark.

The plan the worker runs (``app.stream(...)...count(name)`` lowered into stages, see
``streamkit.dsl.plan``) is mapped onto Spark operations over the source topic, whose offset
ranges the executors read through the ``streamkit`` data source's log readers (segment files,
CRC-checked, or a broker; straight into Python, without a detour through Spark's rows):

1. the source records are decoded with the topic's serializers, and the operators before the
   grouping run on each (``dsl.ops.runner``, the worker's own operators);
2. each output goes to the table partition the worker would put it in: by the hash of its
   key as the repartition topic encodes it (after a ``group_by``; key and value then make the
   repartition topic's round trip through its serializers, as in the worker), else the source
   partition;
3. plain tables: per table partition and key, the outputs are folded with the aggregation's
   function (sum, reduce, aggregate, latest value) in the order the worker's task takes them.
   Without a repartition that is the source partition's offset order (not by timestamp: a task
   reading one partition takes it as it comes). After a repartition of several source
   partitions it is the order a worker with ``max_task_drift_ms=0`` writes: its upstream
   tasks hand out the records of all the source partitions in one merge by timestamp, and
   each repartition partition receives its part of it, which is its records sorted by their
   source partition's stream time at them, taken over the whole partition
   (``_core.order.stream_time_order``). Each record carries that stream time from the read;
   a range that starts mid-partition (a split of ``SPLIT_OFFSETS``) gets the stream time
   before it from one pass in the driver over the batch headers before it
   (``executors.stream_times_before``). The backfill's own start needs none: the first record
   at or after ``from_ms`` is later than every record before it, so a worker that restored
   its stream time from a commit there takes the same order. Counts add up in any order, so Spark combines them before the shuffle (and their read
   skips the stream times). Windowed tables: per table partition, the worker's own window
   driver (``windows.aggregate.WindowAggregator``) runs over the outputs in that same order,
   so stream time, grace, closing and late records are the worker's; late records go to
   ``<app>-late`` as the worker sends them;
4. the results are appended to the table's changelog, the state every worker restores from
   (for a windowed table: the driver's store, windows, index, stream time and emit progress,
   byte for byte), with a tombstone for every key an earlier changelog holds that the result
   lacks;
5. the table's stream, when the app asked for it (Kafka Streams' reprocessing recomputes the
   topics downstream too): a windowed table's ``to_stream(emit=...)`` topic gets the windows
   the driver emitted (``"close"``: those stream time closed, each once; ``"update"``: every
   change), each table partition's task's in its order, stamped with the time of the record
   that emitted them, as the worker sends them; a plain table's changelog records are its
   changes. The map/filter pipelines the app runs over that stream into topics
   (``.to_stream().map_values(...).to(topic)``) then run over it, one task per partition, and
   their topics get what they send. Where several tasks write one partition their records come
   as a repartition topic's do: that partition's part of the merge of all the tasks' records,
   by the sending task's stream time (``streams.publish``). Anything else
   reading the stream (an aggregation, agent code) is refused: the backfill moves the group
   past it. Streams are appended: a second backfill writes them again;
6. the app's consumer group is moved to the end of what was read (and of the streams
   written), so a worker started afterwards serves the backfilled values, processes only
   newer records and forwards nothing twice.

``to_topic`` writes the result records to a topic instead (the table's keys and values; for
a windowed table each window once, with its final value, as the windows topic spells it)
and leaves the changelog and the group alone. ``run_job`` runs a hand-written job
``fn(spark, source_df) -> DataFrame(key, value)`` in place of the declarative plan.

What the backfill does not run is refused by name: stream-table joins, table-table joins and
pipelines over a table's changes (they depend on the timing of the other side), and tables
filled by agent code. A backfill needs the app's workers stopped: it moves their group.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit.app.application import App
from streamkit.dsl.nodes import (
    Aggregate,
    Pipeline,
    Source,
    WindowedAggregate,
)
from streamkit.spark.access import LogAccess, log_access
from streamkit.spark.executors import (
    CHANGELOG,
    EMITTED,
    LATE,
    OUTPUT,
    WINDOW_DATA,
    Row,
    TaskPlan,
    add_counts,
    add_tally,
    count_outputs,
    count_row,
    fold_key,
    place_outputs,
    plain_rows,
    read_source,
    sent_at,
    stream_times_before,
    window_rows,
)
from streamkit.spark.options import OffsetRange, split_range
from streamkit.spark.planning import (
    find_pipeline,
    import_root,
    load_app,
    plan_of,
)
from streamkit.spark.source import FORMAT, register
from streamkit.spark.streams import Sent, downstream, forward, publish, table_stream_topic
from streamkit.spark.writes import (
    SPLIT_OFFSETS,
    append,
    check_group_free,
    commit_group,
    ensure_topic,
    existing_partitions,
    offset_ranges,
    write_changelog,
    write_topic,
)
from streamkit.transport.options import ClientOptions
from streamkit.windows.wtable import WindowedTable

DRIVER_MERGE_TASKS = 8  # a count read by at most this many tasks is added up in the driver


@dataclass(frozen=True, slots=True)
class BackfillReport:
    table: str
    records_read: int  # source records (a job: source offsets)
    keys_written: int  # records written to the changelog (or the output topic)
    ends: dict[int, int]  # source partition -> the offset the app's group now starts from
    late: int = 0  # records a windowed table left out as late (sent to <app>-late)
    windows: int | None = None  # windows held at the end (windowed tables)
    deleted: int = 0  # keys of an earlier changelog the result lacks, deleted
    to_topic: str | None = None
    job: str | None = None
    # records written to the table's stream (its windows topic, or its changelog's readers)
    # and to the topics the pipelines over it write, by topic
    streams: dict[str, int] = field(default_factory=dict)


def spark_session(master: str, name: str, log_path: str | None = None) -> Any:
    """A SparkSession for a backfill: the driver on loopback, no web UI, the workers on this
    Python. With ``log_path``, the JVM's own output (start-up notices, Spark's log) goes to
    that file rather than to this process's stderr."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(name).config("spark.ui.enabled", "false")
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if log_path is None:
        session = builder.getOrCreate()
    else:
        # The JVM inherits stderr when it starts: hand it the log file for that moment.
        sys.stderr.flush()
        saved = os.dup(2)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.dup2(log, 2)
            session = builder.getOrCreate()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(log)
    session.sparkContext.setLogLevel("ERROR")
    return session


def backfill(
    spark: Any, app_ref: str, *tables: str, from_ms: int | None = None, to_ms: int | None = None,
    to_topic: str | None = None, options: ClientOptions | None = None,
) -> list[BackfillReport]:
    """Recompute ``tables`` (declared tables of the app ``app_ref``, ``module:attribute``) over
    their sources' history, write them to their changelogs, then move the app's consumer group
    past what was read (see the module docstring). Every agent of the app that reads a source
    must be one of these tables' pipelines: the group's position is shared.

    With ``to_topic``, the results go to that topic instead, and neither the changelogs nor
    the group change. ``options`` are the app's Kafka client settings (its TLS and SASL: the
    driver's and the executors' connections, ``spark.access``), by default the app's own."""
    if not tables:
        raise ConfigError("name at least one table to backfill")
    register(spark)
    app = load_app(app_ref, None)
    access = log_access(app, app_ref, import_root(app_ref), options)
    pipelines = {name: find_pipeline(app, name) for name in tables}
    streams: dict[str, tuple[Any, list[Pipeline]]] = {}
    if to_topic is None:
        check_group_free(app, list(pipelines.items()))
        for name, pipeline in pipelines.items():
            if (stream := table_stream_topic(app, pipeline)) is not None:
                streams[name] = (stream, downstream(app, stream))
    reports = []
    ends: dict[str, dict[int, int]] = {}
    for name, pipeline in pipelines.items():
        report = _backfill_one(spark, app, access, name, pipeline, from_ms, to_ms, to_topic, streams.get(name))
        reports.append(report)
        source = pipeline[0]
        assert isinstance(source, Source)
        ends[source.topic.name] = report.ends
    if to_topic is None:
        commit_group(app, access, list(pipelines.items()), ends, [stream.name for stream, _ in streams.values()])
    return reports


def source_frame(spark: Any, access: LogAccess, topic: str, starts: dict[int, int], ends: dict[int, int]) -> Any:
    """The source records in ``[starts, ends)`` as a DataFrame of the Kafka source's columns."""
    reader = spark.read.format(FORMAT).option("topic", topic)
    for name, value in access.data_source_options().items():
        reader = reader.option(name, value)
    offsets = ", ".join(f'"{p}": {o}' for p, o in starts.items())
    reader = reader.option("startingOffsets", f'{{"{topic}": {{{offsets}}}}}')
    offsets = ", ".join(f'"{p}": {o}' for p, o in ends.items())
    reader = reader.option("endingOffsets", f'{{"{topic}": {{{offsets}}}}}')
    return reader.load()


def _backfill_one(
    spark: Any, app: App, access: LogAccess, table_name: str, pipeline: Pipeline, from_ms: int | None, to_ms: int | None,
    to_topic: str | None, stream: tuple[Any, list[Pipeline]] | None,
) -> BackfillReport:
    source = pipeline[0]
    terminal = pipeline[-1]
    assert isinstance(source, Source) and isinstance(terminal, (Aggregate, WindowedAggregate))
    table = terminal.table
    starts, ends = offset_ranges(access, source.topic.name, from_ms, to_ms)
    source_partitions = len(ends)
    plan = TaskPlan(access.app_ref, access.root, table_name, _repartitions(app, access, table_name, source_partitions),
                 output=to_topic is not None,
                 emitted=stream is not None and isinstance(terminal, WindowedAggregate))
    task_log = access.task_log()  # what the tasks carry: no secret in their closures' repr
    ranges = [r for p in sorted(ends) for r in split_range(OffsetRange(p, starts[p], ends[p]), SPLIT_OFFSETS)]
    counter = spark.sparkContext.accumulator(0)
    before = None
    if isinstance(terminal, WindowedAggregate) or terminal.kind != "count":  # an order to keep
        # The stream time of each range's partition before it, read in the driver: a range
        # that starts mid-partition (a split) gets it as the partition read whole has it. The
        # backfill's own start needs none: it is the log start, or the first record at or after
        # from_ms, later than every record before it, so those change no stream time from there
        # on (a worker restoring its commit there agrees); the scan starts there too.
        before = stream_times_before(
            task_log, source.topic.name,
            [(r.partition, r.start) for r in ranges if r.start > starts[r.partition]], scan_from=starts,
        )
    read_range = functools.partial(read_source, task_log, source.topic.name, counter, before=before)
    records = spark.sparkContext.parallelize(ranges, max(1, len(ranges))).mapPartitions(read_range)
    if isinstance(terminal, WindowedAggregate):
        # Table partition p is the input partition p of the aggregating task: one Spark
        # partition each, so one driver sees all of it.
        placed = records.mapPartitions(functools.partial(place_outputs, plan)).map(lambda r: (r[0], r))
        results = placed.partitionBy(source_partitions, lambda p: p).mapPartitions(
            functools.partial(window_rows, plan)
        )
    elif terminal.kind == "count" and len(ranges) <= DRIVER_MERGE_TASKS:
        # Each task's counts, added up here: at most DRIVER_MERGE_TASKS times the rows the
        # driver collects anyway, and no shuffle stage to schedule.
        results = records.mapPartitions(functools.partial(count_outputs, plan))
    elif terminal.kind == "count":
        results = (
            records.mapPartitions(functools.partial(count_outputs, plan))
            .reduceByKey(add_counts)
            .map(functools.partial(count_row, plan))
        )
    else:
        results = (
            records.mapPartitions(functools.partial(plain_rows, plan))
            .groupByKey()
            .flatMap(functools.partial(fold_key, plan))
        )
    # The results pass through the driver, which appends them once every task succeeded (as
    # the data source's writer commits): a failed job leaves the log untouched.
    out: list[Row]
    if isinstance(terminal, Aggregate) and terminal.kind == "count" and len(ranges) <= DRIVER_MERGE_TASKS:
        merged: dict[tuple[int, bytes], list[int]] = {}
        partial: list[tuple[tuple[int, bytes], tuple[int, int]]] = results.collect()
        for where, (n, ts) in partial:
            add_tally(merged, where, n, ts)
        out = [count_row(plan, (where, (n, ts))) for where, (n, ts) in merged.items()]
    else:
        out = results.collect()
    read = int(counter.value)
    late = [r for r in out if r[0] == LATE]
    if late and to_topic is None:
        assert isinstance(table, WindowedTable)
        topic = table.late_topic
        ensure_topic(access, topic.name, topic.partitions or app.topic_partitions, topic.config)
        append(access, topic.name, late)
    if to_topic is not None:
        written = write_topic(app, access, to_topic, [r for r in out if r[0] == OUTPUT])
        return BackfillReport(table_name, read, written, ends, len(late), None, to_topic=to_topic)
    rows = [r for r in out if r[0] == CHANGELOG]
    windows = sum(1 for r in rows if (r[2] or b"")[:1] == WINDOW_DATA) if isinstance(table, WindowedTable) else None
    # The worker's rule: the changelog's count if it exists, else the table's, else the sources'.
    table_partitions = existing_partitions(access, table.changelog_topic.name) or table.declared_partitions or source_partitions
    written, deleted, appended = write_changelog(spark, access, table, rows, table_partitions)
    streamed: dict[str, int] = {}
    if stream is not None:
        topic, readers = stream
        if plan.emitted:  # the windows each table partition's task emitted, in its order
            tasks: dict[int, list[Sent]] = {}
            times: dict[int, list[int]] = {}  # the task's stream time at each (executors.SENT_AT)
            for _kind, p, key, value, ts, headers in (r for r in out if r[0] == EMITTED):
                tasks.setdefault(p or 0, []).append((key, value, ts))
                times.setdefault(p or 0, []).append(sent_at(headers))
            by_partition = publish(app, access, topic, [tasks[p] for p in sorted(tasks)], [times[p] for p in sorted(tasks)])
            streamed[topic.name] = sum(len(sent) for sent in by_partition)
        else:  # the changelog's new records: each partition's, in the order appended
            by_partition = [[(k, v, ts) for _kind, q, k, v, ts, _h in appended if q == p] for p in range(table_partitions)]
        streamed.update(forward(app, access, topic, readers, by_partition))
    return BackfillReport(table_name, read, written, ends, len(late), windows, deleted, streams=streamed)


def _repartitions(app: App, access: LogAccess, table: str, source_partitions: int) -> int:
    """How many partitions the table's repartition topic has (the worker's rule, as its
    topology creates it): the topic's own count if it exists, else the declared one, else the
    source's."""
    lowered = plan_of(app, table)
    if not lowered.repartitions:
        return source_partitions
    topic = lowered.repartitions[0].topic
    return existing_partitions(access, topic.name) or topic.partitions or source_partitions
