"""What the Spark executors run: source records read through the data source's log readers,
the plan's operators, placement by the repartition topic's key hash, the folds in a task's
order, the window driver; rows back to the driver (``Row``: where each record goes)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit._core.order import stream_time_order, stream_times
from streamkit._core.partitioner import partition_for_key
from streamkit._core.serde import Serde, serde_for
from streamkit.dsl.nodes import (
    Aggregate,
    WindowedAggregate,
)
from streamkit.dsl.ops import TABLE_KINDS, fold, fold_step, runner, skips
from streamkit.log.records import decode_records
from streamkit.spark.access import TaskLog
from streamkit.spark.columns import batch_lists, column_batches
from streamkit.spark.options import OffsetRange
from streamkit.spark.planning import load_app, plan_of
from streamkit.windows.aggregate import WindowAggregator
from streamkit.windows.keys import decode_ms, decode_window_key, encode_ms
from streamkit.windows.records import late_headers, window_body
from streamkit.windows.store import SortedMemoryStore
from streamkit.windows.wtable import WindowedTable

_JSON = serde_for("json")


# The window driver's store layout (windows/aggregate.py): window aggregates under 0x01.
WINDOW_DATA = b"\x01"


# What the executors hand back: one row per record to write, ``kind`` saying where it goes:
# (kind, partition or None (by the key's hash), key, value, timestamp ms, headers or None).
Row = tuple[str, int | None, bytes | None, bytes | None, int, list[tuple[str, bytes]] | None]


CHANGELOG, LATE, OUTPUT, EMITTED = "changelog", "late", "output", "emitted"
SENT_AT = "streamkit.sent_at"  # an EMITTED row's only header: its task's stream time (keys.encode_ms)


def sent_at(headers: list[tuple[str, bytes]] | None) -> int:
    """The stream time of the task that emitted an EMITTED row (its ``SENT_AT`` header)."""
    assert headers is not None and headers[0][0] == SENT_AT, headers
    return decode_ms(headers[0][1])


_SEEN_KEYS = 100_000  # repartition keys remembered per task (their decoded form and partition)


_IMMUTABLE = (str, int, float, bool, bytes, type(None))  # a source partition is read by tasks of at most this many offsets


@dataclass(frozen=True)
class TaskPlan:
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
    """The stages of a table's plan (``dsl/plan.py``), as the executors run them: the first
    stage's operators and re-key, the repartition topic's serializers, the second stage's
    operators and the fold (one stage: no repartition)."""

    key_loads: Callable[[bytes | None], Any]
    value_loads: Callable[[bytes | None], Any]
    key_dumps: Callable[[Any], bytes | None]
    before: Callable[[Any, Any], list[tuple[Any, Any]]] | None  # None: no operator before the grouping
    key_by: Callable[[Any], Any] | None  # the group_by's key function (None: keys as they are)
    repartition: Any  # the Topic between the stages, None when there is one stage
    # The repartition topic's value serializer when it is not the source's (an operator before
    # the group_by may have changed the values' type): values make that round trip.
    repartition_values: Serde | None
    after: Callable[[Any, Any], list[tuple[Any, Any]]] | None  # None: no operator after it
    terminal: Aggregate | WindowedAggregate


_PARTS: dict[TaskPlan, _Parts] = {}


def _parts(plan: TaskPlan) -> _Parts:
    """``plan``'s stages, built once per executor process from the app's module."""
    found = _PARTS.get(plan)
    if found is None:
        app = load_app(plan.app_ref, plan.root)
        lowered = plan_of(app, plan.table)
        source = lowered.source
        first, last = lowered.stages[0], lowered.stages[-1]
        terminal = last.output
        assert isinstance(terminal, (Aggregate, WindowedAggregate))
        repartition = lowered.repartitions[0].topic if lowered.repartitions else None
        values = None
        if repartition is not None and repartition.value_serde is not source.topic.value_serde:
            values = repartition.value_serde
        found = _PARTS[plan] = _Parts(
            source.topic.key_serde.loads, source.topic.value_serde.loads, source.topic.key_serde.dumps,
            runner(first.ops) if first.ops else None, first.key_by, repartition, values,
            runner(last.ops) if repartition is not None and last.ops else None, terminal,
        )
    return found


# (table partition, source stream time ms, source partition, offset, timestamp ms, key, value)
# of one pipeline output; the source partition's stream time at its record (``stream_times``)
# puts a table partition's records in their order (``_merged``).
Placed = tuple[int, int, int, int, int, Any, Any]


# A chunk of source records as the log reads it, in offset order: (source partition, their
# keys, values, offsets, timestamps ms, and the source partition's stream time at each, or None
# when the read was not asked for it), one list per field (no object per record).
SourceChunk = tuple[int, list[bytes | None], list[bytes | None], list[int], list[int], list[int] | None]

# The stream time of a source partition before an offset: (partition, offset) -> the largest
# timestamp of its records before that offset (None: it has none).
StreamTimes = Mapping[tuple[int, int], int | None]


class Uncounted:
    """An accumulator's ``add`` for a read that counts nothing."""

    def add(self, n: int) -> None:
        return None


def read_source(
    source: TaskLog, topic: str, counter: Any, ranges: Iterator[OffsetRange],
    *, before: StreamTimes | None = None,
) -> Iterator[SourceChunk]:
    """The records of offset ``ranges``, read on the executor through the data source's own
    log readers (segment files, CRC-checked, or a broker): without the round trip through
    Spark's rows a DataFrame would make. Segment files are decoded column by column
    (``spark.columns``: no ``Record`` per record); nothing downstream needs a record's
    headers. With ``before`` (``stream_times_before`` of the ranges' starts; a start it does not
    name has no record before it), each chunk carries its partition's stream time at each
    record, as the whole partition read from its start gives it. ``source`` is the app's log
    as a task carries it, its security included (``spark.access``)."""
    log = source.open(topic)
    n = 0
    try:
        for rng in ranges:
            p = rng.partition
            batches = log.batches(p, rng.start, rng.end)
            now = None if before is None else before.get((p, rng.start))
            for batch in column_batches(topic, p, batches, rng.start, rng.end, include_headers=False):
                n += batch.num_rows
                keys, values, offsets, timestamps = batch_lists(batch)
                times = None
                if before is not None:
                    times = stream_times(timestamps, now)
                    now = times[-1] if times else now
                yield p, keys, values, offsets, timestamps, times
    finally:
        log.close()
        counter.add(n)


def stream_times_before(
    source: TaskLog, topic: str, starts: Iterable[tuple[int, int]],
    scan_from: Mapping[int, int] | None = None,
) -> dict[tuple[int, int], int | None]:
    """Each source partition's stream time before each of ``starts`` ((partition, offset)): the
    largest timestamp of its records from its log start (or ``scan_from[partition]``) up to the
    offset, what a worker that processed them restores from its commit. One pass per partition
    over the batches' headers: a batch wholly before an offset counts by its header's
    ``max_timestamp`` (Kafka's batch header keeps it), only a batch an offset cuts is decoded.

    ``scan_from`` may skip records that cannot matter: those before an offset whose record is
    later than all of them (a backfill's start at the first record at or after ``from_ms``)
    leave every stream time from that record on as it is."""
    log = source.open(topic)
    found: dict[tuple[int, int], int | None] = {}
    by_partition: dict[int, list[int]] = {}
    for p, offset in starts:
        by_partition.setdefault(p, []).append(offset)
    try:
        for p, offsets in sorted(by_partition.items()):
            cuts = sorted(set(offsets))
            log_start = scan_from[p] if scan_from is not None and p in scan_from else log.bounds(p)[0]
            now: int | None = None
            i = 0
            for header, data in log.batches(p, log_start, cuts[-1]) if cuts[-1] > log_start else ():
                while i < len(cuts) and cuts[i] <= header.base_offset:
                    found[(p, cuts[i])] = now
                    i += 1
                if i < len(cuts) and header.last_offset >= cuts[i]:  # cut inside: record by record
                    for record in decode_records(header, bytes(data)):
                        while i < len(cuts) and cuts[i] <= record.offset:
                            found[(p, cuts[i])] = now
                            i += 1
                        now = record.timestamp if now is None else max(now, record.timestamp)
                elif header.records_count > 0:
                    now = header.max_timestamp if now is None else max(now, header.max_timestamp)
            for cut in cuts[i:]:
                found[(p, cut)] = now
    finally:
        log.close()
    return found


def place_outputs(plan: TaskPlan, chunks: Iterator[SourceChunk]) -> Iterator[Placed]:
    """Source records -> their pipeline's outputs, each with the table partition it goes to."""
    parts = _parts(plan)
    key_loads, value_loads, run_before, run_after = parts.key_loads, parts.value_loads, parts.before, parts.after
    repartition, regroup = parts.repartition, parts.key_by
    values = parts.repartition_values
    if repartition is not None:
        dumps, loads = repartition.key_serde.dumps, repartition.key_serde.loads
    # Keys repeat, and their trip through the repartition topic (encode, decode, murmur2 in
    # Python) is not cheap: remembered per immutable key, by type (True == 1, not as JSON).
    seen: dict[tuple[type, Any], tuple[Any, int]] = {}
    # A key the grouping replaces before any function saw it needs no decoding.
    unused_key = run_before is None and regroup is not None
    # A stream aggregation skips records without key or value (``ops.skips``), as the worker's.
    terminal = parts.terminal
    skip_nulls = isinstance(terminal, Aggregate) and skips(terminal.kind, None, None)
    for source_partition, raw_keys, raw_values, offsets, timestamps, times in chunks:
        # without stream times (a count's read: no order) a record's own time stands in
        for raw_key, raw_value, offset, timestamp, now in zip(
            raw_keys, raw_values, offsets, timestamps, timestamps if times is None else times, strict=True
        ):
            key = None if unused_key else key_loads(raw_key)
            value = value_loads(raw_value)
            for k, v in ((key, value),) if run_before is None else run_before(key, value):
                if repartition is not None:
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
                    if not (skip_nulls and (k is None or v is None)):
                        yield partition, now, source_partition, offset, timestamp, k, v
                else:
                    for k2, v2 in run_after(k, v):
                        if not (skip_nulls and (k2 is None or v2 is None)):
                            yield partition, now, source_partition, offset, timestamp, k2, v2


# (source stream time ms, source partition, offset, index among the record's outputs,
# timestamp ms, key, value): the first four are its place in the order (``_task_order``)
Output = tuple[int, int, int, int, int, Any, Any]


def _task_order(outputs: Iterable[Output]) -> list[Output]:
    """A key's outputs in the order a worker's task takes them (``_core/order.py``,
    ``stream_time_order``): by the stream time of their source partition at their record
    (over the whole partition), then source partition, offset and index among the record's
    outputs. Without a repartition (or with one source partition) that is offset order, the
    one order a task reading one partition has. After a repartition over several source
    partitions it is what the repartition partition receives from a worker with
    ``max_task_drift_ms=0``, whose upstream tasks hand out the records of all the source
    partitions in one timestamp merge: that merge, restricted to the key's records."""
    return stream_time_order(outputs, key=_ORDER)


_ORDER = itemgetter(0, 1, 2, 3)  # an Output's (stream time, source partition, offset, index)


def fold_key(plan: TaskPlan, item: tuple[tuple[int, bytes], Iterable[Output]]) -> Iterator[tuple[Any, ...]]:
    """One key's outputs, in the worker's task order, folded into the row its changelog record
    becomes (stamped, as the worker stamps it, with the time of the last of them)."""
    terminal = _parts(plan).terminal
    assert isinstance(terminal, Aggregate)
    (partition, raw_key), outputs = item
    ordered = _task_order(outputs)
    # A table's row is stamped with its last record's time, an aggregate with the largest
    # behind it (as the worker's, and Kafka Streams' KStreamAggregate).
    latest = ordered[-1][4] if terminal.kind in TABLE_KINDS else max(o[4] for o in ordered)
    present, value = fold(fold_step(terminal.kind, terminal.fn, terminal.initializer), ordered[0][5], (o[6] for o in ordered))
    if not present:
        # A key absent at the end: the backfill is one commit of a worker with its record cache
        # on, which forwards no tombstone for a key its store lacked before (Kafka Streams'
        # cache flush skips null -> null); one an earlier changelog holds gets its tombstone
        # from write_changelog.
        return
    raw_value = terminal.table.value_serde.dumps(value) if present else None
    if plan.output:
        yield (OUTPUT, None, raw_key, raw_value, latest, None)
    else:
        yield (CHANGELOG, partition, raw_key, raw_value, latest, None)


def job_rows(plan: TaskPlan, partitions: int, rows: Iterator[Any]) -> Iterator[tuple[bytes, bytes | None, int]]:
    """A job's (key, value) rows with the table partition of each key: where the worker's
    pipeline puts it (the hash of the key as the repartition topic, or else the source topic,
    encodes it)."""
    parts = _parts(plan)
    table_keys = parts.terminal.table.key_serde.loads
    encode = parts.repartition.key_serde.dumps if parts.repartition is not None else parts.key_dumps
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


def count_outputs(plan: TaskPlan, chunks: Iterator[SourceChunk]) -> Iterator[tuple[tuple[int, bytes], tuple[int, int]]]:
    """A count's outputs as ((table partition, key bytes), (count, latest timestamp)), added up
    in the task first: counts add up in any order. The usual shapes (a ``group_by`` with no
    operator after it; a count of the source's own keys) are tallied per key as the pipeline
    gives it, and each distinct key makes the repartition topic's round trip once, at the end."""
    parts = _parts(plan)
    terminal = parts.terminal
    assert isinstance(terminal, Aggregate)
    key_dumps = terminal.table.key_serde.dumps
    if parts.after is not None or (parts.repartition is None and parts.before is not None):
        yield from _placed_counts(plan, key_dumps, place_outputs(plan, chunks))
        return
    # (key as the pipeline gives it) -> [count, latest timestamp]: str keys in ``tally``, other
    # immutable ones in ``typed`` by (type, key) (so that True and 1 stay apart, as their JSON
    # does), others (not hashable) one by one.
    tally: dict[Any, list[int]] = {}
    typed: dict[tuple[type, Any], list[int]] = {}
    others: list[tuple[Any, int]] = []
    if parts.repartition is None:  # the source's keys, per source partition, as their bytes
        value_loads = parts.value_loads
        for source_partition, raw_keys, raw_values, _offsets, timestamps, _times in chunks:
            for raw_key, raw_value, ts in zip(raw_keys, raw_values, timestamps, strict=True):
                # a value that does not decode fails here, as in the worker; a count skips a
                # record without key or value (``ops.skips``), as the worker's
                if value_loads(raw_value) is None or raw_key is None:
                    continue
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
            add_tally(out, (source_partition, key_dumps(key_loads(raw)) or b""), n, ts)
        for where, (n, ts) in out.items():
            yield where, (n, ts)
        return
    regroup, run_before, key_loads = parts.key_by, parts.before, parts.key_loads
    value_loads = parts.value_loads
    decode_keys = run_before is not None or regroup is None
    for _source_partition, raw_keys, raw_values, _offsets, timestamps, _times in chunks:
        for raw_key, raw_value, ts in zip(raw_keys, raw_values, timestamps, strict=True):
            value = value_loads(raw_value)
            key = key_loads(raw_key) if decode_keys else None
            for k, v in ((key, value),) if run_before is None else run_before(key, value):
                if regroup is not None:
                    k = regroup(v)
                if k is None or v is None:  # skipped by a count (``ops.skips``)
                    continue
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
    keys = parts.repartition.key_serde
    dumps, loads, partitions = keys.dumps, keys.loads, plan.repartitions
    placed: dict[tuple[int, bytes], list[int]] = {}
    keys = [*((k, n, ts) for k, (n, ts) in tally.items()), *((k[1], n, ts) for k, (n, ts) in typed.items()),
            *((k, 1, ts) for k, ts in others)]
    for k, n, ts in keys:
        raw = dumps(k) or b""
        add_tally(placed, (partition_for_key(raw, partitions), key_dumps(loads(raw)) or b""), n, ts)
    for where, (n, ts) in placed.items():
        yield where, (n, ts)


def add_tally(into: dict[tuple[int, bytes], list[int]], where: tuple[int, bytes], n: int, ts: int) -> None:
    held = into.get(where)
    if held is None:
        into[where] = [n, ts]
    else:
        held[0] += n
        held[1] = max(held[1], ts)


def _placed_counts(
    plan: TaskPlan, key_dumps: Callable[[Any], bytes | None], placed: Iterator[Placed]
) -> Iterator[tuple[tuple[int, bytes], tuple[int, int]]]:
    """Counts of ``place_outputs``'s outputs (any pipeline shape)."""
    counts: dict[tuple[int, bytes], list[int]] = {}
    raws: dict[tuple[type, Any], bytes] = {}
    for partition, _now, _source_partition, _offset, ts, k, _v in placed:
        if isinstance(k, _IMMUTABLE):
            raw = raws.get((type(k), k))
            if raw is None:
                if len(raws) >= _SEEN_KEYS:
                    raws.clear()
                raw = raws[(type(k), k)] = key_dumps(k) or b""
        else:
            raw = key_dumps(k) or b""
        add_tally(counts, (partition, raw), 1, ts)
    for where, (n, ts) in counts.items():
        yield where, (n, ts)


def add_counts(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return a[0] + b[0], max(a[1], b[1])


def count_row(plan: TaskPlan, item: tuple[tuple[int, bytes], tuple[int, int]]) -> tuple[Any, ...]:
    terminal = _parts(plan).terminal
    assert isinstance(terminal, Aggregate)
    (partition, raw_key), (n, ts) = item
    value = terminal.table.value_serde.dumps(n)
    return (OUTPUT, None, raw_key, value, ts, None) if plan.output else (
        CHANGELOG, partition, raw_key, value, ts, None
    )


def plain_rows(plan: TaskPlan, rows: Iterator[Any]) -> Iterator[tuple[tuple[int, bytes], Output]]:
    terminal = _parts(plan).terminal
    assert isinstance(terminal, Aggregate)
    key_dumps = terminal.table.key_serde.dumps
    at, n = (-1, -1), 0  # a record's outputs (a flat map's) keep their order
    for partition, now, source_partition, offset, ts, k, v in place_outputs(plan, rows):
        n = n + 1 if (source_partition, offset) == at else 0
        at = (source_partition, offset)
        yield (partition, key_dumps(k) or b""), (now, source_partition, offset, n, ts, k, v)


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
        if key[:1] == WINDOW_DATA:
            raw = self.get(key)
            if raw is not None:
                self.dropped.append((key, raw))
        super().delete(key)
        self.stamps.pop(key, None)


def _merged(records: list[Placed]) -> list[Placed]:
    """A table partition's records in the order a worker's task takes them (``_task_order``'s,
    ``_core/order.py``): by their source partition's stream time at their record, source
    partition and offset (a flat map's outputs of one record keep their order: the sort is
    stable)."""
    return stream_time_order(records, key=_PLACED_ORDER)


_PLACED_ORDER = itemgetter(1, 2, 3)  # a Placed's (stream time, source partition, offset)


def window_rows(plan: TaskPlan, items: Iterator[tuple[int, Placed]]) -> Iterator[tuple[Any, ...]]:
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
        driver = WindowAggregator(
            table.spec, table.aggregation, store, emit=table.emit, retention_ms=table.retention_ms, skip=table.skip
        )
        for _p, _now, _source, _offset, ts, key, value in _merged(records):
            store.now = ts
            step = driver.process(key_dumps(key) or b"", ts, (key, value))
            if emitted:  # as the worker sends them: in the order emitted, stamped as each window
                # is (its latest record's timestamp); the task's stream time when it sent
                # them rides in the header slot (SENT_AT), for the order of the topic's writers.
                sent_at = [(SENT_AT, encode_ms(driver.stream_time.ms))]
                for window in step.emitted:
                    body = _JSON.dumps(window_body(window.start_ms, window.end_ms, window.value))
                    yield (EMITTED, partition, window.key, body, ts if window.ts_ms is None else window.ts_ms, sent_at)
            late = step.late
            if late is not None:
                headers = late_headers(table.name, late.reason, late.ts_ms, late.stream_time_ms)
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
    body = _JSON.dumps(window_body(start, end, value))
    return (OUTPUT, None, key, body, end, None)
