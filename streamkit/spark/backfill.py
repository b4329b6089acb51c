"""Backfill: a declarative table of an app recomputed from the log's history on Spark.

The same pipeline the worker runs (``app.stream(...)...count(name)``, see ``streamkit.dsl``)
is planned as Spark operations over the source topic, whose offset ranges the executors read
through the ``streamkit`` data source's log readers (segment files, CRC-checked, or a broker;
straight into Python, without a detour through Spark's rows):

1. the source records are decoded with the topic's serializers, and the operators before the
   grouping run on each (``dsl.runner``, the worker's own function);
2. each output goes to the table partition the worker would put it in: by the hash of its
   key as the repartition topic encodes it (after a ``group_by``; key and value then make the
   repartition topic's round trip through its serializers, as in the worker), else the source
   partition;
3. plain tables: per table partition and key, the outputs are folded with the aggregation's
   function (sum, reduce, aggregate, latest value) in the order the worker's task takes them:
   each source partition's in offset order (not by timestamp: a task reading one partition
   takes it as it comes), several source partitions merged by the timestamp of their next
   output. That is exactly the worker's order without a repartition, and after one over a
   source of one partition; after a repartition of several source partitions the worker's
   interleaving of them depends on when the upstream tasks wrote the repartition topic, and
   the backfill's is one of those orders (the same answers for a reducer that commutes, or
   when each key's records come from one source partition). Counts add up in any order, so
   Spark combines them before the shuffle. Windowed tables: per table partition, the worker's
   own window driver (``windows.aggregate.WindowAggregator``) runs over the outputs in the
   order a worker's task reads them: each source partition in offset order, the source
   partitions merged by the timestamp of their next record (Kafka Streams' choice), so stream
   time, grace, closing and late records are the worker's; late records go to ``<app>-late``
   as the worker sends them;
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
   their topics get what they send. Where several tasks write one partition the worker's
   interleaving depends on timing: here their records are merged by timestamp. Anything else
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
import heapq
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit._core.refs import import_ref
from streamkit._core.serde import Serde, serde_for
from streamkit.app import App
from streamkit.dsl import (
    REPARTITION_KEY_SERDE,
    Aggregate,
    GroupBy,
    Join,
    Map,
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
from streamkit.log.records import NewRecord
from streamkit.spark.columns import batch_lists, column_batches
from streamkit.spark.logs import open_source_log
from streamkit.spark.options import OffsetRange, split_range
from streamkit.spark.source import FORMAT, register
from streamkit.windows.aggregate import WindowAggregator
from streamkit.windows.keys import decode_window_key
from streamkit.windows.store import SortedMemoryStore
from streamkit.windows.wtable import WindowedTable

_REPARTITION_KEYS = serde_for(REPARTITION_KEY_SERDE)
_JSON = serde_for("json")
# The window driver's store layout (windows/aggregate.py): window aggregates under 0x01.
_WINDOW_DATA = b"\x01"

# What the executors hand back: one row per record to write, ``kind`` saying where it goes:
# (kind, partition or None (by the key's hash), key, value, timestamp ms, headers or None).
Row = tuple[str, int | None, bytes | None, bytes | None, int, list[tuple[str, bytes]] | None]
CHANGELOG, LATE, OUTPUT, EMITTED = "changelog", "late", "output", "emitted"
SPLIT_OFFSETS = 1_000_000
DRIVER_SCAN = 200_000  # a changelog of at most this many offsets is scanned in the driver
DRIVER_MERGE_TASKS = 8  # a count read by at most this many tasks is added up in the driver
_SEEN_KEYS = 100_000  # repartition keys remembered per task (their decoded form and partition)
_IMMUTABLE = (str, int, float, bool, bytes, type(None))  # a source partition is read by tasks of at most this many offsets


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


def _declarative(app: App) -> list[str]:
    return sorted(
        p[-1].table.name for p in app.topologies if isinstance(p[-1], (Aggregate, WindowedAggregate))
    )


def find_pipeline(app: App, table: str) -> Pipeline:
    """The declarative pipeline that fills ``table``, or a clear error."""
    for pipeline in app.topologies:
        terminal = pipeline[-1]
        if isinstance(terminal, (Aggregate, WindowedAggregate)) and terminal.table.name == table:
            refuse_unsupported(pipeline, table)
            return pipeline
        if isinstance(terminal, TableJoin) and terminal.table.name == table:
            raise ConfigError(f"table {table!r} is a table-table join: the backfill does not run those")
    declarative = _declarative(app)
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


# -- what the executors run --------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """What an executor runs, rebuilt there from the app's module (functions and serializers
    do not travel: only the app's reference and import root do)."""

    app_ref: str
    root: str | None
    table: str
    repartitions: int
    output: bool = False  # the result records for a topic, not the changelog's
    job: str | None = None  # the hand-written job whose rows fill the table
    emitted: bool = False  # a windowed table's emitted windows too (its ``to_stream`` topic)


@dataclass(frozen=True)
class _Parts:
    """A pipeline cut where the worker cuts it, with the serializers on the way."""

    key_loads: Callable[[bytes | None], Any]
    value_loads: Callable[[bytes | None], Any]
    key_dumps: Callable[[Any], bytes | None]
    before: Callable[[Any, Any], list[tuple[Any, Any]]] | None  # None: no operator before the grouping
    group: GroupBy | None
    # The repartition topic's value serializer when an operator before the group_by may have
    # changed the values' type (json; else the source's, which gives back what it decoded).
    repartition_values: Serde | None
    after: Callable[[Any, Any], list[tuple[Any, Any]]] | None  # None: no operator after it
    terminal: Aggregate | WindowedAggregate


_PARTS: dict[_Plan, _Parts] = {}


def _parts(plan: _Plan) -> _Parts:
    """``plan``'s pipeline parts, built once per executor process."""
    found = _PARTS.get(plan)
    if found is None:
        app = load_app(plan.app_ref, plan.root)
        pipeline = find_pipeline(app, plan.table)
        source, terminal = pipeline[0], pipeline[-1]
        assert isinstance(source, Source) and isinstance(terminal, (Aggregate, WindowedAggregate))
        middle = pipeline[1:-1]
        split = next((i for i, n in enumerate(middle) if isinstance(n, GroupBy)), None)
        group = middle[split] if split is not None else None
        before = middle if split is None else middle[:split]
        after = () if split is None else middle[split + 1 :]
        repartition_values = None
        # As compile_pipeline declares the repartition topic.
        if isinstance(group, GroupBy) and any(isinstance(n, Map) and n.kind != "filter" for n in before):
            repartition_values = _JSON
        found = _PARTS[plan] = _Parts(
            source.topic.key_serde.loads, source.topic.value_serde.loads, source.topic.key_serde.dumps,
            runner(tuple(before)) if before else None,
            group if isinstance(group, GroupBy) else None, repartition_values, runner(tuple(after)) if after else None,
            terminal,
        )
    return found


def load_app(app_ref: str, root: str | None) -> App:
    """The ``App`` named ``module:attribute``, importing from ``root`` first when given."""
    app = import_ref(app_ref, root=root or None)
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


# (table partition, source partition, offset, timestamp ms, key, value) of one pipeline output
Placed = tuple[int, int, int, int, Any, Any]


# A chunk of source records as the log reads it, in offset order: (source partition, their
# keys, values, offsets, timestamps ms), one list per field (no object per record).
SourceChunk = tuple[int, list[bytes | None], list[bytes | None], list[int], list[int]]


class _Uncounted:
    """An accumulator's ``add`` for a read that counts nothing."""

    def add(self, n: int) -> None:
        return None


def _read_source(
    path: str | None, bootstrap: str | None, topic: str, counter: Any, ranges: Iterator[OffsetRange]
) -> Iterator[SourceChunk]:
    """The records of offset ``ranges``, read on the executor through the data source's own
    log readers (segment files, CRC-checked, or a broker): without the round trip through
    Spark's rows a DataFrame would make. Segment files are decoded column by column
    (``spark.columns``: no ``Record`` per record); nothing downstream needs a record's
    headers."""
    log = open_source_log(path, bootstrap, topic)
    n = 0
    try:
        for rng in ranges:
            p = rng.partition
            batches = log.batches(p, rng.start, rng.end)
            for batch in column_batches(topic, p, batches, rng.start, rng.end, include_headers=False):
                n += batch.num_rows
                yield (p, *batch_lists(batch))
    finally:
        log.close()
        counter.add(n)


def _place(plan: _Plan, chunks: Iterator[SourceChunk]) -> Iterator[Placed]:
    """Source records -> their pipeline's outputs, each with the table partition it goes to."""
    parts = _parts(plan)
    key_loads, value_loads, run_before, run_after = parts.key_loads, parts.value_loads, parts.before, parts.after
    group = parts.group
    regroup = group.fn if group is not None else None
    values = parts.repartition_values
    dumps, loads = _REPARTITION_KEYS.dumps, _REPARTITION_KEYS.loads
    # Keys repeat, and their trip through the repartition topic (encode, decode, murmur2 in
    # Python) is not cheap: remembered per immutable key, by type (True == 1, not as JSON).
    seen: dict[tuple[type, Any], tuple[Any, int]] = {}
    # A key the grouping replaces before any function saw it needs no decoding.
    unused_key = run_before is None and regroup is not None
    for source_partition, raw_keys, raw_values, offsets, timestamps in chunks:
        for raw_key, raw_value, offset, timestamp in zip(raw_keys, raw_values, offsets, timestamps, strict=True):
            key = None if unused_key else key_loads(raw_key)
            value = value_loads(raw_value)
            for k, v in ((key, value),) if run_before is None else run_before(key, value):
                if group is not None:
                    if regroup is not None:
                        k = regroup(v)
                    if isinstance(k, _IMMUTABLE):
                        known = seen.get((type(k), k))
                        if known is None:
                            if len(seen) >= _SEEN_KEYS:
                                seen.clear()
                            raw = dumps(k) or b""
                            known = seen[(type(k), k)] = (loads(raw), partition_for_key(raw, plan.repartitions))
                        k, partition = known
                    else:
                        raw = dumps(k) or b""
                        k, partition = loads(raw), partition_for_key(raw, plan.repartitions)
                    if values is not None:
                        v = values.loads(values.dumps(v))
                else:
                    partition = source_partition
                if run_after is None:
                    yield partition, source_partition, offset, timestamp, k, v
                else:
                    for k2, v2 in run_after(k, v):
                        yield partition, source_partition, offset, timestamp, k2, v2


# (source partition, offset, index among the record's outputs, timestamp ms, key, value)
Output = tuple[int, int, int, int, Any, Any]


def _task_order(outputs: Iterable[Output]) -> list[Output]:
    """A key's outputs in the order a worker's task takes them: each source partition's in
    offset order, the next always from the source partition whose next output is the oldest
    (ties: the lower source partition). Without a repartition (or with one source partition)
    this is exactly the worker's order: a key's outputs all come from the one source partition
    its table partition reads, in offset order. After a repartition over several source
    partitions, the worker takes each source partition's outputs in offset order too, but how
    they interleave depends on when the upstream tasks wrote them; this is one such order."""
    by_source: dict[int, list[Output]] = {}
    for output in outputs:
        by_source.setdefault(output[0], []).append(output)
    if len(by_source) == 1:
        (only,) = by_source.values()
        only.sort(key=lambda o: (o[1], o[2]))
        return only
    heads: list[tuple[int, int, int]] = []
    for source, found in by_source.items():
        found.sort(key=lambda o: (o[1], o[2]))
        heads.append((found[0][3], source, 0))
    heapq.heapify(heads)
    ordered: list[Output] = []
    while heads:
        _ts, source, i = heapq.heappop(heads)
        found = by_source[source]
        ordered.append(found[i])
        if i + 1 < len(found):
            heapq.heappush(heads, (found[i + 1][3], source, i + 1))
    return ordered


def _fold_key(plan: _Plan, item: tuple[tuple[int, bytes], Iterable[Output]]) -> Iterator[tuple[Any, ...]]:
    """One key's outputs, in the worker's task order, folded into the row its changelog record
    becomes (stamped, as the worker stamps it, with the time of the last of them)."""
    terminal = _parts(plan).terminal
    assert isinstance(terminal, Aggregate)
    (partition, raw_key), outputs = item
    ordered = _task_order(outputs)
    latest = ordered[-1][3]
    if terminal.kind == "latest":
        # A delete of a key the table does not hold changes nothing in the worker's table: a
        # key only ever deleted writes nothing (to its changelog, or the table's stream; one an
        # earlier changelog holds still gets its tombstone from write_changelog), and a key
        # deleted several times is stamped with the first delete after its last value.
        held = [i for i, o in enumerate(ordered) if o[5] is not None]
        if not held:
            return
        latest = ordered[min(held[-1] + 1, len(ordered) - 1)][3]
    present, value = _fold(terminal.kind, terminal.fn, terminal.initializer, ordered[0][4], (o[5] for o in ordered))
    raw_value = terminal.table.value_serde.dumps(value) if present else None
    if plan.output:
        yield (OUTPUT, None, raw_key, raw_value, latest, None)
    else:
        yield (CHANGELOG, partition, raw_key, raw_value, latest, None)


def _job_rows(plan: _Plan, partitions: int, rows: Iterator[Any]) -> Iterator[tuple[bytes, bytes | None, int]]:
    """A job's (key, value) rows with the table partition of each key: where the worker's
    pipeline puts it (the hash of the key as the repartition topic, or else the source topic,
    encodes it)."""
    parts = _parts(plan)
    table_keys = parts.terminal.table.key_serde.loads
    encode = _REPARTITION_KEYS.dumps if parts.group is not None else parts.key_dumps
    for row in rows:
        key = bytes(row.key) if row.key is not None else None
        if key is None:
            raise ConfigError(f"job {plan.job} returned a row without a key: a table's keys cannot be null")
        try:
            placed = encode(table_keys(key)) or b""
        except Exception as exc:
            raise ConfigError(f"job {plan.job} returned key {key!r}, which the table's serializer does not "
                              f"read: {exc}") from None
        yield key, None if row.value is None else bytes(row.value), partition_for_key(placed, partitions)


def _counts(plan: _Plan, chunks: Iterator[SourceChunk]) -> Iterator[tuple[tuple[int, bytes], tuple[int, int]]]:
    """A count's outputs as ((table partition, key bytes), (count, latest timestamp)), added up
    in the task first: counts add up in any order. The usual shapes (a ``group_by`` with no
    operator after it; a count of the source's own keys) are tallied per key as the pipeline
    gives it, and each distinct key makes the repartition topic's round trip once, at the end."""
    parts = _parts(plan)
    terminal = parts.terminal
    assert isinstance(terminal, Aggregate)
    key_dumps = terminal.table.key_serde.dumps
    if parts.after is not None or (parts.group is None and parts.before is not None):
        yield from _placed_counts(plan, key_dumps, _place(plan, chunks))
        return
    # (key as the pipeline gives it) -> [count, latest timestamp]: str keys in ``tally``, other
    # immutable ones in ``typed`` by (type, key) (so that True and 1 stay apart, as their JSON
    # does), others (not hashable) one by one.
    tally: dict[Any, list[int]] = {}
    typed: dict[tuple[type, Any], list[int]] = {}
    others: list[tuple[Any, int]] = []
    if parts.group is None:  # the source's keys, per source partition, as their bytes
        value_loads = parts.value_loads
        for source_partition, raw_keys, raw_values, _offsets, timestamps in chunks:
            for raw_key, raw_value, ts in zip(raw_keys, raw_values, timestamps, strict=True):
                value_loads(raw_value)  # a value that does not decode fails here, as in the worker
                where = (source_partition, raw_key)
                held = tally.get(where)
                if held is None:
                    tally[where] = [1, ts]
                else:
                    held[0] += 1
                    if ts > held[1]:
                        held[1] = ts
        key_loads = parts.key_loads
        out: dict[tuple[int, bytes], list[int]] = {}
        for (source_partition, raw), (n, ts) in tally.items():
            _add_tally(out, (source_partition, key_dumps(key_loads(raw)) or b""), n, ts)
        for where, (n, ts) in out.items():
            yield where, (n, ts)
        return
    regroup, run_before, key_loads = parts.group.fn, parts.before, parts.key_loads
    value_loads = parts.value_loads
    decode_keys = run_before is not None or regroup is None
    for _source_partition, raw_keys, raw_values, _offsets, timestamps in chunks:
        for raw_key, raw_value, ts in zip(raw_keys, raw_values, timestamps, strict=True):
            value = value_loads(raw_value)
            key = key_loads(raw_key) if decode_keys else None
            for k, v in ((key, value),) if run_before is None else run_before(key, value):
                if regroup is not None:
                    k = regroup(v)
                into = tally
                if type(k) is not str:
                    if not isinstance(k, _IMMUTABLE):
                        others.append((k, ts))
                        continue
                    into, k = typed, (type(k), k)
                held = into.get(k)
                if held is None:
                    into[k] = [1, ts]
                else:
                    held[0] += 1
                    if ts > held[1]:
                        held[1] = ts
    dumps, loads, partitions = _REPARTITION_KEYS.dumps, _REPARTITION_KEYS.loads, plan.repartitions
    placed: dict[tuple[int, bytes], list[int]] = {}
    keys = [*((k, n, ts) for k, (n, ts) in tally.items()), *((k[1], n, ts) for k, (n, ts) in typed.items()),
            *((k, 1, ts) for k, ts in others)]
    for k, n, ts in keys:
        raw = dumps(k) or b""
        _add_tally(placed, (partition_for_key(raw, partitions), key_dumps(loads(raw)) or b""), n, ts)
    for where, (n, ts) in placed.items():
        yield where, (n, ts)


def _add_tally(into: dict[tuple[int, bytes], list[int]], where: tuple[int, bytes], n: int, ts: int) -> None:
    held = into.get(where)
    if held is None:
        into[where] = [n, ts]
    else:
        held[0] += n
        held[1] = max(held[1], ts)


def _placed_counts(
    plan: _Plan, key_dumps: Callable[[Any], bytes | None], placed: Iterator[Placed]
) -> Iterator[tuple[tuple[int, bytes], tuple[int, int]]]:
    """Counts of ``_place``'s outputs (any pipeline shape)."""
    counts: dict[tuple[int, bytes], list[int]] = {}
    raws: dict[tuple[type, Any], bytes] = {}
    for partition, _source_partition, _offset, ts, k, _v in placed:
        if isinstance(k, _IMMUTABLE):
            raw = raws.get((type(k), k))
            if raw is None:
                if len(raws) >= _SEEN_KEYS:
                    raws.clear()
                raw = raws[(type(k), k)] = key_dumps(k) or b""
        else:
            raw = key_dumps(k) or b""
        _add_tally(counts, (partition, raw), 1, ts)
    for where, (n, ts) in counts.items():
        yield where, (n, ts)


def _add_counts(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], max(a[1], b[1])


def _count_row(plan: _Plan, item: tuple[tuple[int, bytes], tuple[int, int]]) -> tuple[Any, ...]:
    terminal = _parts(plan).terminal
    assert isinstance(terminal, Aggregate)
    (partition, raw_key), (n, ts) = item
    value = terminal.table.value_serde.dumps(n)
    return (OUTPUT, None, raw_key, value, ts, None) if plan.output else (
        CHANGELOG, partition, raw_key, value, ts, None
    )


def _plain_rows(plan: _Plan, rows: Iterator[Any]) -> Iterator[tuple[tuple[int, bytes], Output]]:
    terminal = _parts(plan).terminal
    assert isinstance(terminal, Aggregate)
    key_dumps = terminal.table.key_serde.dumps
    at, n = (-1, -1), 0  # a record's outputs (a flat map's) keep their order
    for partition, source_partition, offset, ts, k, v in _place(plan, rows):
        n = n + 1 if (source_partition, offset) == at else 0
        at = (source_partition, offset)
        yield (partition, key_dumps(k) or b""), (source_partition, offset, n, ts, k, v)


class _StampedStore(SortedMemoryStore):
    """The driver's store in the executor: remembers the event time of each key's last write
    (the worker stamps changelog records so) and the windows deleted, with their last value."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.stamps: dict[bytes, int] = {}
        self.dropped: list[tuple[bytes, bytes]] = []

    def put(self, key: bytes, value: bytes) -> None:
        super().put(key, value)
        self.stamps[key] = self.now

    def delete(self, key: bytes) -> None:
        if key[:1] == _WINDOW_DATA:
            raw = self.get(key)
            if raw is not None:
                self.dropped.append((key, raw))
        super().delete(key)
        self.stamps.pop(key, None)


def _merged(records: list[Placed]) -> Iterator[Placed]:
    """A table partition's records in the order a worker's task takes them: each source
    partition in offset order, the next record always from the source partition whose next
    record is the oldest (ties: the lower source partition)."""
    by_source: dict[int, list[Placed]] = {}
    for record in records:
        by_source.setdefault(record[1], []).append(record)
    heads: list[tuple[int, int, int]] = []
    for source, found in by_source.items():
        found.sort(key=lambda r: r[2])  # offset (a flat map's outputs keep their order: stable)
        heads.append((found[0][3], source, 0))
    heapq.heapify(heads)
    while heads:
        _ts, source, i = heapq.heappop(heads)
        found = by_source[source]
        yield found[i]
        if i + 1 < len(found):
            heapq.heappush(heads, (found[i + 1][3], source, i + 1))


def _window_rows(plan: _Plan, items: Iterator[tuple[int, Placed]]) -> Iterator[tuple[Any, ...]]:
    """The worker's window driver over each table partition's records (``_merged`` order):
    the store it ends with (changelog rows), the late records, and with ``plan.output`` each
    window once with its final value."""
    terminal = _parts(plan).terminal
    assert isinstance(terminal, WindowedAggregate)
    table = terminal.table
    key_dumps = table.group_key_serde.dumps
    late_values = table.late_topic.value_serde.dumps
    emitted = plan.emitted and not plan.output
    by_partition: dict[int, list[Placed]] = {}
    for partition, record in items:
        by_partition.setdefault(partition, []).append(record)
    for partition, records in sorted(by_partition.items()):
        store = _StampedStore()
        driver = WindowAggregator(table.spec, table.aggregation, store, emit=table.emit, retention_ms=table.retention_ms)
        for _p, _source, _offset, ts, key, value in _merged(records):
            store.now = ts
            step = driver.process(key_dumps(key) or b"", ts, (key, value))
            if emitted:  # as the worker sends them: in the order emitted, stamped with the record's time
                for window in step.emitted:
                    body = _JSON.dumps({"window_start": window.start_ms, "window_end": window.end_ms,
                                        "value": window.value})
                    yield (EMITTED, partition, window.key, body, ts, None)
            late = step.late
            if late is not None:
                headers = [
                    ("streamkit.table", table.name.encode()),
                    ("streamkit.reason", late.reason.encode()),
                    ("streamkit.timestamp", str(late.ts_ms).encode()),
                    ("streamkit.stream_time", str(late.stream_time_ms).encode()),
                ]
                yield (LATE, None, late.key, late_values(value), ts, headers)
            if plan.output:
                yield from _final_windows(table, driver, store.dropped)
            store.dropped.clear()
        if plan.output:
            for window in driver.windows():
                yield _window_output(table, window.key, window.start_ms, window.end_ms, window.value)
        else:
            for key, raw in store.range(b"", b"\x03"):  # meta 0x00, windows 0x01, index 0x02
                yield (CHANGELOG, partition, key, raw, store.stamps.get(key, 0), None)


def _final_windows(
    table: WindowedTable, driver: WindowAggregator[Any, Any], dropped: list[tuple[bytes, bytes]]
) -> Iterator[tuple[Any, ...]]:
    """Windows the driver deleted because they closed (not sessions merged into another)."""
    now = driver.stream_time.ms
    for data_key, raw in dropped:
        key, start, end = decode_window_key(data_key[1:])
        if table.spec.closed(end, now):
            yield _window_output(table, key, start, end, table.aggregation.deserialize(raw[8:]))


def _window_output(table: WindowedTable, key: bytes, start: int, end: int, value: Any) -> tuple[Any, ...]:
    """A window as the windows topic carries it (``KWindowedTable.to_stream``)."""
    body = _JSON.dumps({"window_start": start, "window_end": end, "value": value})
    return (OUTPUT, None, key, body, end, None)


# -- the driver ---------------------------------------------------------------------------------


# A record one worker task sends: (key bytes, value bytes, timestamp ms), in the order it sends.
Sent = tuple[bytes | None, bytes | None, int]


def downstream(app: App, topic: Any) -> list[Pipeline]:
    """The pipelines reading ``topic`` (a table's windows topic or changelog: its
    ``to_stream()``), which the backfill runs after writing it so their topics hold what a
    worker would have written; a clear error for anything reading it that the backfill cannot
    run (it moves the app's group past what it wrote)."""
    found = [p for p in app.topologies if isinstance(p[0], Source) and p[0].topic.name == topic.name]
    for pipeline in found:
        terminal = pipeline[-1]
        if not isinstance(terminal, Sink) or not all(isinstance(n, Map) for n in pipeline[1:-1]):
            what = terminal.table.name if isinstance(terminal, (Aggregate, WindowedAggregate, TableJoin)) else None
            raise ConfigError(
                f"topic {topic.name!r} (a table's stream) feeds "
                + (f"table {what!r}" if what else "a pipeline that is not a chain of map/filter into a topic")
                + ": the backfill writes that topic and runs only map/filter pipelines into a topic after it; "
                "backfill with --to-topic instead, or run that pipeline in a worker"
            )
    ours = {p[-1].topic.name for p in found if isinstance(p[-1], Sink)}
    others = sorted(a.name for a in app.agents.values()
                    if a.name not in ours and any(t.name == topic.name for t in a.topics))
    if others:
        raise ConfigError(
            f"topic {topic.name!r} (a table's stream) is also read by {others} of app {app.id!r}: the backfill "
            "writes it and moves the app's group past what it wrote, which would skip those records for them"
        )
    return found


def publish(app: App, topic: Any, tasks: list[list[Sent]]) -> list[list[Sent]]:
    """Append what each task sends to ``topic`` as the worker's tasks would: each record to the
    partition of its key's hash (keyless ones spread), each task's records in its order. Where
    several tasks write one partition, the worker's interleaving depends on their timing; here
    it is by timestamp (ties: the lower task). What each partition now ends with, in order."""
    declared = app.topics.get(topic.name)
    partitions = (declared.partitions if declared is not None else None) or topic.partitions or app.topic_partitions
    count = _ensure_topic(app, topic.name, partitions, topic.config)
    # (partition, task) -> that task's records for that partition, in its order
    queues: dict[tuple[int, int], list[Sent]] = {}
    spread = 0
    for t, sent in enumerate(tasks):
        for record in sent:
            if record[0] is None:
                p, spread = spread % count, spread + 1
            else:
                p = partition_for_key(record[0], count)
            queues.setdefault((p, t), []).append(record)
    by_partition: list[list[Sent]] = [[] for _ in range(count)]
    heads = [(queue[0][2], t, p, 0) for (p, t), queue in queues.items()]  # (ts, task, partition, index)
    heapq.heapify(heads)
    while heads:
        _ts, t, p, n = heapq.heappop(heads)
        queue = queues[(p, t)]
        by_partition[p].append(queue[n])
        if n + 1 < len(queue):
            heapq.heappush(heads, (queue[n + 1][2], t, p, n + 1))
    rows: list[Row] = [(OUTPUT, p, k, v, ts, None) for p, sent in enumerate(by_partition) for k, v, ts in sent]
    if rows:
        append(app, topic.name, rows)
    return by_partition


def forward(app: App, topic: Any, pipelines: list[Pipeline], by_partition: list[list[Sent]]) -> dict[str, int]:
    """Run ``pipelines`` (map/filter chains into a topic, see ``downstream``) over what
    ``topic``'s partitions now end with, one task per partition as the worker runs them, and
    append their outputs; records written per topic."""
    key_loads, value_loads = topic.key_serde.loads, topic.value_serde.loads
    written: dict[str, int] = {}
    for pipeline in pipelines:
        sink = pipeline[-1]
        assert isinstance(sink, Sink)
        run = runner(tuple(pipeline[1:-1]))
        key_dumps, value_dumps = sink.topic.key_serde.dumps, sink.topic.value_serde.dumps
        tasks: list[list[Sent]] = []
        for sent in by_partition:
            out: list[Sent] = []
            for raw_key, raw_value, ts in sent:
                key = key_loads(raw_key) if raw_key is not None else None
                value = value_loads(raw_value) if raw_value is not None else None
                for k, v in run(key, value):
                    out.append((key_dumps(k) if k is not None else None, value_dumps(v) if v is not None else None, ts))
            tasks.append(out)
        publish(app, sink.topic, tasks)
        written[sink.topic.name] = written.get(sink.topic.name, 0) + sum(len(t) for t in tasks)
    return written



def backfill(
    spark: Any, app_ref: str, *tables: str, from_ms: int | None = None, to_ms: int | None = None,
    to_topic: str | None = None,
) -> list[BackfillReport]:
    """Recompute ``tables`` (declared tables of the app ``app_ref``, ``module:attribute``) over
    their sources' history, write them to their changelogs, then move the app's consumer group
    past what was read (see the module docstring). Every agent of the app that reads a source
    must be one of these tables' pipelines: the group's position is shared.

    With ``to_topic``, the results go to that topic instead, and neither the changelogs nor
    the group change."""
    if not tables:
        raise ConfigError("name at least one table to backfill")
    register(spark)
    app = load_app(app_ref, None)
    pipelines = {name: find_pipeline(app, name) for name in tables}
    streams: dict[str, tuple[Any, list[Pipeline]]] = {}
    if to_topic is None:
        _check_group_free(app, list(pipelines.items()))
        for name, pipeline in pipelines.items():
            if (stream := table_stream_topic(app, pipeline)) is not None:
                streams[name] = (stream, downstream(app, stream))
    reports = []
    ends: dict[str, dict[int, int]] = {}
    for name, pipeline in pipelines.items():
        report = _backfill_one(spark, app, app_ref, name, pipeline, from_ms, to_ms, to_topic, streams.get(name))
        reports.append(report)
        source = pipeline[0]
        assert isinstance(source, Source)
        ends[source.topic.name] = report.ends
    if to_topic is None:
        _commit(app, list(pipelines.items()), ends, [stream.name for stream, _ in streams.values()])
    return reports


def table_stream_topic(app: App, pipeline: Pipeline) -> Any:
    """The topic a worker writes the table's ``to_stream()`` to, when the app asked for it: a
    windowed table's windows topic, or a plain table's changelog when a pipeline reads it."""
    terminal = pipeline[-1]
    if isinstance(terminal, WindowedAggregate):
        return terminal.table.emitted_topic
    assert isinstance(terminal, Aggregate)
    changelog = terminal.table.changelog_topic
    readers = [p for p in app.topologies if isinstance(p[0], Source) and p[0].topic.name == changelog.name]
    return changelog if readers else None


def _ranges(app: App, topic: str, from_ms: int | None, to_ms: int | None) -> tuple[dict[int, int], dict[int, int]]:
    """(start, end) offsets per partition of ``topic`` for the time range."""
    options = log_options(app)
    log = open_source_log(options.get("path"), options.get("bootstrap"), topic)
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


def source_frame(spark: Any, app: App, topic: str, starts: dict[int, int], ends: dict[int, int]) -> Any:
    """The source records in ``[starts, ends)`` as a DataFrame of the Kafka source's columns."""
    reader = spark.read.format(FORMAT).option("topic", topic)
    for name, value in log_options(app).items():
        reader = reader.option(name, value)
    offsets = ", ".join(f'"{p}": {o}' for p, o in starts.items())
    reader = reader.option("startingOffsets", f'{{"{topic}": {{{offsets}}}}}')
    offsets = ", ".join(f'"{p}": {o}' for p, o in ends.items())
    reader = reader.option("endingOffsets", f'{{"{topic}": {{{offsets}}}}}')
    return reader.load()


def _backfill_one(
    spark: Any, app: App, app_ref: str, table_name: str, pipeline: Pipeline, from_ms: int | None, to_ms: int | None,
    to_topic: str | None, stream: tuple[Any, list[Pipeline]] | None,
) -> BackfillReport:
    source = pipeline[0]
    terminal = pipeline[-1]
    assert isinstance(source, Source) and isinstance(terminal, (Aggregate, WindowedAggregate))
    table = terminal.table
    starts, ends = _ranges(app, source.topic.name, from_ms, to_ms)
    source_partitions = len(ends)
    # compile_pipeline's repartition topics take the source's partition count.
    plan = _Plan(app_ref, import_root(app_ref), table_name, source_partitions, output=to_topic is not None,
                 emitted=stream is not None and isinstance(terminal, WindowedAggregate))
    options = log_options(app)
    ranges = [r for p in sorted(ends) for r in split_range(OffsetRange(p, starts[p], ends[p]), SPLIT_OFFSETS)]
    counter = spark.sparkContext.accumulator(0)
    read_range = functools.partial(_read_source, options.get("path"), options.get("bootstrap"), source.topic.name, counter)
    records = spark.sparkContext.parallelize(ranges, max(1, len(ranges))).mapPartitions(read_range)
    if isinstance(terminal, WindowedAggregate):
        # Table partition p is the input partition p of the aggregating task: one Spark
        # partition each, so one driver sees all of it.
        placed = records.mapPartitions(functools.partial(_place, plan)).map(lambda r: (r[0], r))
        results = placed.partitionBy(source_partitions, lambda p: p).mapPartitions(
            functools.partial(_window_rows, plan)
        )
    elif terminal.kind == "count" and len(ranges) <= DRIVER_MERGE_TASKS:
        # Each task's counts, added up here: at most DRIVER_MERGE_TASKS times the rows the
        # driver collects anyway, and no shuffle stage to schedule.
        results = records.mapPartitions(functools.partial(_counts, plan))
    elif terminal.kind == "count":
        results = (
            records.mapPartitions(functools.partial(_counts, plan))
            .reduceByKey(_add_counts)
            .map(functools.partial(_count_row, plan))
        )
    else:
        results = (
            records.mapPartitions(functools.partial(_plain_rows, plan))
            .groupByKey()
            .flatMap(functools.partial(_fold_key, plan))
        )
    # The results pass through the driver, which appends them once every task succeeded (as
    # the data source's writer commits): a failed job leaves the log untouched.
    out: list[Row]
    if isinstance(terminal, Aggregate) and terminal.kind == "count" and len(ranges) <= DRIVER_MERGE_TASKS:
        merged: dict[tuple[int, bytes], list[int]] = {}
        partial: list[tuple[tuple[int, bytes], tuple[int, int]]] = results.collect()
        for where, (n, ts) in partial:
            _add_tally(merged, where, n, ts)
        out = [_count_row(plan, (where, (n, ts))) for where, (n, ts) in merged.items()]
    else:
        out = results.collect()
    read = int(counter.value)
    late = [r for r in out if r[0] == LATE]
    if late and to_topic is None:
        assert isinstance(table, WindowedTable)
        topic = table.late_topic
        _ensure_topic(app, topic.name, topic.partitions or app.topic_partitions, topic.config)
        append(app, topic.name, late)
    if to_topic is not None:
        written = write_topic(app, to_topic, [r for r in out if r[0] == OUTPUT])
        return BackfillReport(table_name, read, written, ends, len(late), None, to_topic=to_topic)
    rows = [r for r in out if r[0] == CHANGELOG]
    windows = sum(1 for r in rows if (r[2] or b"")[:1] == _WINDOW_DATA) if isinstance(table, WindowedTable) else None
    # The worker's rule: the changelog's count if it exists, else the table's, else the sources'.
    table_partitions = _partition_count(app, table.changelog_topic.name) or table.declared_partitions or source_partitions
    written, deleted, appended = write_changelog(spark, app, table, rows, table_partitions)
    streamed: dict[str, int] = {}
    if stream is not None:
        topic, readers = stream
        if plan.emitted:  # the windows each table partition's task emitted, in its order
            tasks: dict[int, list[Sent]] = {}
            for _kind, p, key, value, ts, _headers in (r for r in out if r[0] == EMITTED):
                tasks.setdefault(p or 0, []).append((key, value, ts))
            by_partition = publish(app, topic, [tasks[p] for p in sorted(tasks)])
            streamed[topic.name] = sum(len(sent) for sent in by_partition)
        else:  # the changelog's new records: each partition's, in the order appended
            by_partition = [[(k, v, ts) for _kind, q, k, v, ts, _h in appended if q == p] for p in range(table_partitions)]
        streamed.update(forward(app, topic, readers, by_partition))
    return BackfillReport(table_name, read, written, ends, len(late), windows, deleted, streams=streamed)


def write_changelog(spark: Any, app: App, table: Any, rows: list[Row], partitions: int) -> tuple[int, int, list[Row]]:
    """Append ``rows`` to ``table``'s changelog, with a tombstone for each key the changelog
    already holds that ``rows`` lack; (records written, of which tombstones, the records)."""
    name = table.changelog_topic.name
    stale: list[Row] = []
    if _partition_count(app, name):
        new = {(r[1], r[2]) for r in rows}
        now = int(time.time() * 1000)
        stale = [(CHANGELOG, p, key, None, now, None) for p, key in _keys(spark, app, name) if (p, key) not in new]
    rows = rows + stale
    if rows:
        _ensure_topic(app, name, partitions, table.changelog_topic.config)
        append(app, name, rows)
    return len(rows), len(stale), rows


def write_topic(app: App, topic: str, rows: list[Row]) -> int:
    """Append ``rows`` to ``topic`` (created as the app declares it, or with the app's default
    partition count); how many."""
    declared = app.topics.get(topic)
    partitions = (declared.partitions if declared is not None else None) or app.topic_partitions
    _ensure_topic(app, topic, partitions, declared.config if declared is not None else {})
    if rows:
        append(app, topic, rows)
    return len(rows)


def append(app: App, topic: str, rows: list[Row]) -> None:
    """Append ``rows`` to ``topic``: a row without a partition goes where a producer puts its
    key (murmur2), as the data source's writer places rows."""
    options = log_options(app)
    log = open_source_log(options.get("path"), options.get("bootstrap"), topic)
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


def _keys(spark: Any, app: App, topic: str) -> set[tuple[int, bytes | None]]:
    """(partition, key) of every key ``topic`` holds: whose last record is not a tombstone
    (read on the executors; a small topic, here: a Spark job's scheduling costs more than
    reading it)."""
    starts, ends = _ranges(app, topic, None, None)
    options = log_options(app)
    ranges = [r for p in sorted(ends) for r in split_range(OffsetRange(p, starts[p], ends[p]), SPLIT_OFFSETS)]
    if not ranges:
        return set()
    if sum(r.end - r.start for r in ranges) <= DRIVER_SCAN:
        held: dict[tuple[int, bytes | None], bool] = {}
        for p, keys, values, _offsets, _timestamps in _read_source(
            options.get("path"), options.get("bootstrap"), topic, _Uncounted(), iter(ranges)
        ):
            for key, value in zip(keys, values, strict=True):
                held[(p, key)] = value is not None  # offset order: the last one wins
        return {where for where, present in held.items() if present}
    counter = spark.sparkContext.accumulator(0)
    read = functools.partial(_read_source, options.get("path"), options.get("bootstrap"), topic, counter)
    last = (
        spark.sparkContext.parallelize(ranges, len(ranges)).mapPartitions(read)
        .flatMap(lambda chunk: [((chunk[0], k), (o, v is not None)) for k, v, o in zip(chunk[1], chunk[2], chunk[3], strict=True)])
        .reduceByKey(max)
    )
    return {where for where, (_offset, held) in last.collect() if held}


def _write(rows: Any, app: App, topic: str) -> None:
    """A DataFrame of rows appended through the data source's writer."""
    writer = rows.write.format(FORMAT).option("topic", topic).mode("append")
    for name, value in log_options(app).items():
        writer = writer.option(name, value)
    writer.save()


# -- hand-written jobs ----------------------------------------------------------------------------


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
) -> BackfillReport:
    """Run the job ``job_ref`` (``fn(spark, source_df) -> DataFrame(key, value)``) over the
    source's history: into ``to_topic`` when given, else into ``table`` (a declarative, not
    windowed, table whose pipeline the job replaces: its changelog, then the app's group moves
    as for ``backfill``). The source is ``table``'s pipeline's, else ``source_topic``."""
    from pyspark.sql import functions as F

    if table is None and to_topic is None:
        raise ConfigError("a job writes a table (--table) or a topic (--to-topic)")
    register(spark)
    app = load_app(app_ref, None)
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
        _check_group_free(app, [(table, pipeline)])
        if (topic := table_stream_topic(app, pipeline)) is not None:
            stream = (topic, downstream(app, topic))
    starts, ends = _ranges(app, source_topic, from_ms, to_ms)
    frame = source_frame(spark, app, source_topic, starts, ends)
    read = sum(ends[p] - starts[p] for p in ends)  # offsets: the job's own reading is not counted twice
    result = check_job_result(job_ref, fn(spark, frame))
    rows = result.select(F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"))
    if to_topic is not None:
        rows = rows.cache()
        try:
            written = int(rows.count())
            declared = app.topics.get(to_topic)
            partitions = (declared.partitions if declared is not None else None) or app.topic_partitions
            _ensure_topic(app, to_topic, partitions, declared.config if declared is not None else {})
            if written:
                _write(rows, app, to_topic)
        finally:
            rows.unpersist()
        return BackfillReport(table or source_topic, read, written, ends, to_topic=to_topic, job=job_ref)
    assert table is not None and pipeline is not None
    target = app.tables[table]
    partitions = _partition_count(app, target.changelog_topic.name) or target.declared_partitions or len(ends)
    plan = _Plan(app_ref, import_root(app_ref), table, len(ends), job=job_ref)
    # Keys go where the worker's pipeline puts them: hashed over the source's partition count.
    now = int(time.time() * 1000)
    # The rows pass through the driver anyway; placing them there keeps a bad key's error here.
    changelog: list[Row] = [
        (CHANGELOG, p, key, value, now, None)
        for key, value, p in _job_rows(plan, len(ends), iter(rows.collect()))
    ]
    written, deleted, appended = write_changelog(spark, app, target, changelog, partitions)
    streamed: dict[str, int] = {}
    if stream is not None:
        by_partition = [[(k, v, ts) for _kind, q, k, v, ts, _h in appended if q == p] for p in range(partitions)]
        streamed = forward(app, stream[0], stream[1], by_partition)
    _commit(app, [(table, pipeline)], {source_topic: ends}, [stream[0].name] if stream is not None else [])
    return BackfillReport(table, read, written, ends, deleted=deleted, job=job_ref, streams=streamed)


# -- the log --------------------------------------------------------------------------------------


def _partition_count(app: App, topic: str) -> int | None:
    """``topic``'s partition count, None when it does not exist. An embedded log's comes from
    its metadata file (opening the log as a client would first open every partition)."""
    import asyncio

    from streamkit.log.errors import UnknownTopicError
    from streamkit.log.reader import topic_partition_count
    from streamkit.transport.base import open_log_client

    path = log_options(app).get("path")
    if path is not None and os.path.isdir(path):
        try:
            return topic_partition_count(path, topic)
        except UnknownTopicError:
            return None

    async def count() -> int | None:
        client = open_log_client(app.broker)
        await client.start()
        try:
            return await client.partition_count(topic)
        finally:
            await client.aclose()

    return asyncio.run(count())


def _ensure_topic(app: App, name: str, partitions: int, config: Any) -> int:
    """Create topic ``name`` unless it exists; its partition count."""
    import asyncio

    from streamkit.transport.base import open_log_client

    found = _partition_count(app, name) if "path" in log_options(app) else None
    if found is not None:
        return found

    async def ensure() -> int:
        client = open_log_client(app.broker)
        await client.start()
        try:
            return await client.ensure_topic(name, partitions, config)
        finally:
            await client.aclose()

    return asyncio.run(ensure())


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


def _commit(
    app: App, pipelines: list[tuple[str, Pipeline]], ends: dict[str, dict[int, int]], at_end: Iterable[str] = (),
) -> None:
    """The app's group resumes after what the backfill read (and after everything already in
    the pipelines' repartition topics, which the backfill recomputed, and in the tables'
    streams ``at_end``, whose readers it ran)."""
    import asyncio

    from streamkit._core.types import TopicPartition
    from streamkit.transport.base import open_log_client
    from streamkit.transport.kafka_tools import KafkaTools

    repartitions = [t for name, p in pipelines if (t := repartition_topic_name(app.id, p, name)) is not None]
    repartitions += list(at_end)

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
            # A file:// log another process owns is reached through its port: a Kafka client
            # (``open_log_client``), whose group offsets are committed as on a broker.
            servers = url.netloc if url.scheme == "kafka" else getattr(client, "bootstrap_servers", None)
            if servers:
                async with KafkaTools(servers) as tools:
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
