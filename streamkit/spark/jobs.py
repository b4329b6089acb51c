"""Hand-written backfill jobs (``--job module:function``): ``fn(spark, source_df)`` returns a
DataFrame of key and value whose rows fill the table in place of the declarative plan."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit._core.refs import import_ref
from streamkit.dsl.nodes import (
    Source,
    WindowedAggregate,
)
from streamkit.spark.access import log_access
from streamkit.spark.backfill import BackfillReport, source_frame
from streamkit.spark.executors import CHANGELOG, Row, TaskPlan, job_rows
from streamkit.spark.planning import find_pipeline, import_root, load_app
from streamkit.spark.source import register
from streamkit.spark.streams import downstream, forward, table_stream_topic
from streamkit.spark.writes import (
    check_group_free,
    commit_group,
    ensure_topic,
    existing_partitions,
    offset_ranges,
    write_changelog,
    write_frame,
)
from streamkit.transport.options import ClientOptions


def load_job(job_ref: str) -> Callable[[Any, Any], Any]:
    """The function ``module:function``, or a clear error."""
    fn = import_ref(job_ref, noun="function", root=os.getcwd())
    if not callable(fn):
        raise ConfigError(f"{job_ref!r} is not a function")
    return fn  # type: ignore[no-any-return]


def check_job_result(job_ref: str, result: Any) -> Any:
    """``result`` if it is a DataFrame of ``key`` and ``value`` (binary or string), else a
    clear error."""
    from pyspark.sql import DataFrame
    from pyspark.sql.types import BinaryType, StringType

    if not isinstance(result, DataFrame):
        raise ConfigError(f"job {job_ref} returned {type(result).__name__}, not a DataFrame of key and value")
    types = {f.name: f.dataType for f in result.schema.fields}
    if set(types) != {"key", "value"} or not all(isinstance(t, (BinaryType, StringType)) for t in types.values()):
        found = ", ".join(f"{n} {t.simpleString()}" for n, t in types.items())
        raise ConfigError(
            f"job {job_ref} returned columns ({found}): it must return exactly key and value, binary or string"
        )
    return result


def run_job(
    spark: Any, app_ref: str, job_ref: str, *, table: str | None = None, source_topic: str | None = None,
    to_topic: str | None = None, from_ms: int | None = None, to_ms: int | None = None,
    options: ClientOptions | None = None,
) -> BackfillReport:
    """Run the job ``job_ref`` (``fn(spark, source_df) -> DataFrame(key, value)``) over the
    source's history: into ``to_topic`` when given, else into ``table`` (a declarative, not
    windowed, table whose pipeline the job replaces: its changelog, then the app's group moves
    as for ``backfill``). The source is ``table``'s pipeline's, else ``source_topic``.
    ``options``: the app's Kafka client settings, as for ``backfill``; the job's reads and
    writes go through the data source (``LogAccess.data_source_options``)."""
    from pyspark.sql import functions as F

    if table is None and to_topic is None:
        raise ConfigError("a job writes a table (--table) or a topic (--to-topic)")
    register(spark)
    app = load_app(app_ref, None)
    access = log_access(app, app_ref, import_root(app_ref), options)
    access.data_source_options()  # an app security no data source option can carry is refused now
    fn = load_job(job_ref)
    pipeline = find_pipeline(app, table) if table is not None else None
    if pipeline is not None and to_topic is None and isinstance(pipeline[-1], WindowedAggregate):
        raise ConfigError(
            f"table {table!r} is windowed: its changelog holds the window driver's store, which a job's "
            "(key, value) rows are not; run it without --job, or write the job's rows to a topic (--to-topic)"
        )
    if pipeline is not None:
        first = pipeline[0]
        assert isinstance(first, Source)
        if source_topic not in (None, first.topic.name):
            raise ConfigError(f"a job for table {table!r} reads its pipeline's source {first.topic.name!r}, "
                              f"not {source_topic!r}")
        source_topic = first.topic.name
    if source_topic is None:
        raise ConfigError("name the job's source topic (--source)")
    stream = None
    if table is not None and pipeline is not None and to_topic is None:
        check_group_free(app, [(table, pipeline)])
        if (topic := table_stream_topic(app, pipeline)) is not None:
            stream = (topic, downstream(app, topic))
    starts, ends = offset_ranges(access, source_topic, from_ms, to_ms)
    frame = source_frame(spark, access, source_topic, starts, ends)
    read = sum(ends[p] - starts[p] for p in ends)  # offsets: the job's own reading is not counted twice
    result = check_job_result(job_ref, fn(spark, frame))
    rows = result.select(F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"))
    if to_topic is not None:
        rows = rows.cache()
        try:
            written = int(rows.count())
            declared = app.topics.get(to_topic)
            partitions = (declared.partitions if declared is not None else None) or app.topic_partitions
            ensure_topic(access, to_topic, partitions, declared.config if declared is not None else {})
            if written:
                write_frame(rows, access, to_topic)
        finally:
            rows.unpersist()
        return BackfillReport(table or source_topic, read, written, ends, to_topic=to_topic, job=job_ref)
    assert table is not None and pipeline is not None
    target = app.tables[table]
    partitions = existing_partitions(access, target.changelog_topic.name) or target.declared_partitions or len(ends)
    plan = TaskPlan(app_ref, import_root(app_ref), table, len(ends), job=job_ref)
    # Keys go where the worker's pipeline puts them: hashed over the source's partition count.
    now = int(time.time() * 1000)
    # The rows pass through the driver anyway; placing them there keeps a bad key's error here.
    changelog: list[Row] = [
        (CHANGELOG, p, key, value, now, None)
        for key, value, p in job_rows(plan, len(ends), iter(rows.collect()))
    ]
    written, deleted, appended = write_changelog(spark, access, target, changelog, partitions)
    streamed: dict[str, int] = {}
    if stream is not None:
        by_partition = [[(k, v, ts) for _kind, q, k, v, ts, _h in appended if q == p] for p in range(partitions)]
        streamed = forward(app, access, stream[0], stream[1], by_partition)
    commit_group(app, access, [(table, pipeline)], {source_topic: ends}, [stream[0].name] if stream is not None else [])
    return BackfillReport(table, read, written, ends, deleted=deleted, job=job_ref, streams=streamed)
