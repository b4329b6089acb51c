"""The ``streamkit`` PySpark data source: batch reads, streaming reads and appends.

``register(spark)`` makes ``format("streamkit")`` known to a session. Where the work runs:

* on the driver: option parsing, the log's offsets, the plan (one ``OffsetRange`` per log
  partition, long ranges cut by ``maxRecordsPerPartition``), the streaming offsets, and a
  write's commit;
* on the executors: ``read`` of one ``OffsetRange`` (the segment files through
  ``log.reader``, or fetches from a broker), yielding Arrow record batches; ``write`` of one
  task's rows, which only *stages* them: it partitions and encodes them and hands them back
  in its commit message.

A write is atomic per task: nothing reaches the log until every task has succeeded and the
driver's ``commit`` appends the staged records (through the data directory's owner when one
runs, else by opening the directory). A failed task, a failed job (``abort``) or a schema
that does not fit (refused on the driver before any task runs) leaves the log untouched.
Staged rows travel to the driver in the commit messages, so a single write is bounded by the
driver's memory.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit.log.compression import CODEC_IDS
from streamkit.log.errors import OffsetOutOfRangeError
from streamkit.log.records import NewRecord
from streamkit.spark.arrow import arrow_schema, column
from streamkit.spark.columns import column_batches
from streamkit.spark.logs import SourceLog, open_source_log
from streamkit.spark.options import (
    EARLIEST,
    LATEST,
    OffsetRange,
    SourceOptions,
    parse_offsets,
    resolve,
    split_range,
)
from streamkit.spark.values import value_decoder

FORMAT = "streamkit"


def register(spark: Any) -> None:
    """Make ``spark.read/readStream/write.format("streamkit")`` known to ``spark``."""
    spark.dataSource.register(StreamkitDataSource)


@dataclass
class RangePartition(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one log partition."""

    partition: int
    start: int
    end: int


class StreamkitDataSource(DataSource):
    """``format("streamkit")``: a topic of a streamkit log as Spark's Kafka source shows one."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self) -> SourceOptions:
        return SourceOptions.parse(dict(self.options))

    def schema(self) -> StructType:
        opts = self._options()
        decoder = value_decoder(opts.value_app, opts.value_type, opts.topic)
        value_type = decoder.arrow_type if decoder else pa.binary()
        return from_arrow_schema(arrow_schema(opts.include_headers, value_type))

    def reader(self, schema: StructType) -> StreamkitReader:
        return StreamkitReader(self._options())

    def streamReader(self, schema: StructType) -> StreamkitStreamReader:
        return StreamkitStreamReader(self._options())

    def writer(self, schema: StructType, overwrite: bool) -> StreamkitWriter:
        if overwrite:
            raise ConfigError("a streamkit topic is append-only: use mode('append')")
        return StreamkitWriter.create(dict(self.options), schema)


# -- reading ------------------------------------------------------------------------------


def _read_range(opts: SourceOptions, rng: RangePartition) -> Iterator[pa.RecordBatch]:
    """The records of one Spark partition, as Arrow batches (runs on an executor)."""
    decoder = value_decoder(opts.value_app, opts.value_type, opts.topic)
    log = open_source_log(opts.path, opts.bootstrap, opts.topic, opts.security)
    try:
        yield from column_batches(  # segment files or fetched batches alike
            opts.topic,
            rng.partition,
            log.batches(rng.partition, rng.start, rng.end),
            rng.start,
            rng.end,
            include_headers=opts.include_headers,
            value_column=decoder.column if decoder else None,
        )
    finally:
        log.close()


def _check_start(opts: SourceOptions, partition: int, offset: int, bounds: tuple[int, int]) -> int:
    start, end = bounds
    if offset > end:
        raise OffsetOutOfRangeError(offset, start, end)
    if offset < start:
        if opts.fail_on_data_loss:
            raise ConfigError(
                f"starting offset {offset} of {opts.topic}-{partition} lies before the log start "
                f"{start} (deleted by retention); set failOnDataLoss=false to start at the log start"
            )
        return start
    return offset


def _plan(opts: SourceOptions, log: SourceLog) -> list[OffsetRange]:
    starting = parse_offsets(opts.starting, opts.topic, EARLIEST, "startingOffsets")
    ending = parse_offsets(opts.ending, opts.topic, LATEST, "endingOffsets")
    if EARLIEST in ending.values():
        raise ConfigError("option endingOffsets cannot be earliest (-2) in a batch query")
    if LATEST in starting.values():
        raise ConfigError("option startingOffsets cannot be latest (-1) in a batch query")
    count = log.partition_count()
    named = {p for p in (*starting, *ending) if p >= 0}
    if named and max(named) >= count:
        raise ConfigError(f"offsets name partition {max(named)} but topic {opts.topic!r} has {count}")
    ranges: list[OffsetRange] = []
    for p in range(count):
        bounds = log.bounds(p)
        if opts.starting_timestamp is not None:
            found = log.offset_for_timestamp(p, opts.starting_timestamp)
            start = bounds[1] if found is None else found
        else:
            start = _check_start(opts, p, resolve(starting, p, bounds), bounds)
        if opts.ending_timestamp is not None:
            found = log.offset_for_timestamp(p, opts.ending_timestamp)
            end = bounds[1] if found is None else found
        else:
            end = resolve(ending, p, bounds)
            if end > bounds[1]:
                raise OffsetOutOfRangeError(end, bounds[0], bounds[1])
        ranges.extend(split_range(OffsetRange(p, start, end), opts.max_records_per_partition))
    return ranges


class StreamkitReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        log = open_source_log(self.opts.path, self.opts.bootstrap, self.opts.topic, self.opts.security)
        try:
            ranges = _plan(self.opts, log)
        finally:
            log.close()
        return [RangePartition(r.partition, r.start, r.end) for r in ranges] or [
            RangePartition(0, 0, 0)  # Spark wants at least one partition
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        if partition.end > partition.start:
            yield from _read_range(self.opts, partition)


# -- streaming ------------------------------------------------------------------------------


class StreamkitStreamReader(DataSourceStreamReader):
    """Micro-batches over per-partition offsets ``{"topic": {"0": 42, ...}}``, which Spark
    checkpoints; a restarted query goes on from its checkpoint, not from ``startingOffsets``.
    Partitions added to the topic while the query runs are read from their start."""

    def __init__(self, opts: SourceOptions) -> None:
        if opts.ending is not None or opts.ending_timestamp is not None:
            raise ConfigError("endingOffsets/endingTimestamp are for batch queries only")
        self.opts = opts

    def _ends(self) -> dict[int, tuple[int, int]]:
        log = open_source_log(self.opts.path, self.opts.bootstrap, self.opts.topic, self.opts.security)
        try:
            return {p: log.bounds(p) for p in range(log.partition_count())}
        finally:
            log.close()

    def _wrap(self, offsets: Mapping[int, int]) -> dict[str, Any]:
        return {self.opts.topic: {str(p): o for p, o in sorted(offsets.items())}}

    def _unwrap(self, offsets: Mapping[str, Any]) -> dict[int, int]:
        return {int(p): int(o) for p, o in offsets.get(self.opts.topic, {}).items()}

    def initialOffset(self) -> dict[str, Any]:
        bounds = self._ends()
        if self.opts.starting_timestamp is not None:
            log = open_source_log(self.opts.path, self.opts.bootstrap, self.opts.topic, self.opts.security)
            try:
                found = {p: log.offset_for_timestamp(p, self.opts.starting_timestamp) for p in bounds}
            finally:
                log.close()
            return self._wrap({p: _or(found[p], b[1]) for p, b in bounds.items()})
        wanted = parse_offsets(self.opts.starting, self.opts.topic, LATEST, "startingOffsets")
        return self._wrap(
            {p: _check_start(self.opts, p, resolve(wanted, p, b), b) for p, b in bounds.items()}
        )

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = self._unwrap(start)
        bounds = self._ends()
        ends = {p: b[1] for p, b in bounds.items()}
        if isinstance(limit, ReadMaxRows):
            ends = _limit(begin, bounds, limit.max_rows)
        return self._wrap(ends)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = self._unwrap(start), self._unwrap(end)
        # A partition added since the last batch is read from its log start.
        new = self._ends() if set(stop) - set(begin) else {}
        out: list[InputPartition] = []
        for p, e in sorted(stop.items()):
            s = begin[p] if p in begin else min(new.get(p, (0, 0))[0], e)
            for r in split_range(OffsetRange(p, s, e), self.opts.max_records_per_partition):
                out.append(RangePartition(r.partition, r.start, r.end))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        if partition.end > partition.start:
            yield from _read_range(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        return None  # Spark's checkpoint holds the progress; the log keeps every record


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _limit(begin: Mapping[int, int], bounds: Mapping[int, tuple[int, int]], max_rows: int) -> dict[int, int]:
    """Ends that add at most ``max_rows`` offsets past ``begin``, shared out evenly."""
    starts = {p: max(begin.get(p, b[0]), b[0]) for p, b in bounds.items()}
    left = {p: max(0, b[1] - starts[p]) for p, b in bounds.items()}
    ends = dict(starts)
    budget = max_rows
    while budget > 0 and any(left.values()):
        open_parts = [p for p, n in left.items() if n > 0]
        share = max(1, budget // len(open_parts))
        for p in open_parts:
            take = min(share, left[p], budget)
            ends[p] += take
            left[p] -= take
            budget -= take
            if budget == 0:
                break
    return ends


# -- writing ---------------------------------------------------------------------------------


@dataclass
class StagedRecords(WriterCommitMessage):
    """One task's rows, partitioned and ready to append."""

    by_partition: dict[int, list[NewRecord]] = field(default_factory=dict)


_WRITE_COLUMNS = ("key", "value", "topic", "partition", "timestamp", "headers")


def check_write_schema(schema: StructType) -> None:
    """Refuse, before any task runs, a DataFrame whose columns cannot become records."""

    def is_bytes(t: DataType) -> bool:
        return isinstance(t, (BinaryType, StringType))

    names = [f.name for f in schema.fields]
    unknown = [n for n in names if n not in _WRITE_COLUMNS]
    if unknown:
        raise ConfigError(
            f"cannot write columns {unknown} to a streamkit topic: the columns are "
            "key, value, and optionally topic, partition, timestamp, headers"
        )
    if "value" not in names:
        raise ConfigError("writing to a streamkit topic needs a value column (binary or string)")
    types = {f.name: f.dataType for f in schema.fields}
    wrong: list[str] = []
    for name, ok in (
        ("key", is_bytes),
        ("value", is_bytes),
        ("topic", lambda t: isinstance(t, StringType)),
        ("partition", lambda t: isinstance(t, IntegerType)),
        ("timestamp", lambda t: isinstance(t, TimestampType)),
        ("headers", _is_headers_type),
    ):
        if name in types and not ok(types[name]):
            wrong.append(f"{name} is {types[name].simpleString()}")
    if wrong:
        raise ConfigError(
            "cannot write to a streamkit topic: "
            + ", ".join(wrong)
            + " (key and value: binary or string; partition: int; timestamp: timestamp; "
            "headers: array<struct<key: string, value: binary>>)"
        )


def _is_headers_type(t: DataType) -> bool:
    if not isinstance(t, ArrayType) or not isinstance(t.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in t.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], (BinaryType, StringType))
    )


def _as_bytes(value: bytes | str | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return value.encode()


class StreamkitWriter(DataSourceArrowWriter):
    def __init__(
        self, path: str | None, bootstrap: str | None, topic: str, partitions: int, compression: str,
        security: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.path, self.bootstrap, self.topic = path, bootstrap, topic
        self.security = security  # the kafka.* options: strings, pickled to the executors
        self.partitions = partitions
        self.compression = compression

    @classmethod
    def create(cls, options: dict[str, str], schema: StructType) -> StreamkitWriter:
        """A writer for ``options``, after checking (on the driver, before any task runs) the
        DataFrame's columns and that the topic exists."""
        opts = SourceOptions.parse(options)
        compression = next((v for k, v in options.items() if k.lower() == "compression"), "none")
        if compression not in CODEC_IDS:
            raise ConfigError(f"option compression must be one of {sorted(CODEC_IDS)}, not {compression!r}")
        check_write_schema(schema)
        log = open_source_log(opts.path, opts.bootstrap, opts.topic, opts.security)
        try:
            partitions = log.partition_count()
        finally:
            log.close()
        return cls(opts.path, opts.bootstrap, opts.topic, partitions, compression, opts.security)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRecords:
        from pyspark import TaskContext

        context = TaskContext.get()
        sticky = context.partitionId() if context is not None else 0
        now_ms = int(time.time() * 1000)
        staged = StagedRecords()
        for batch in iterator:
            values = column(batch, "value") or []
            n = len(values)
            keys = column(batch, "key") or [None] * n
            topics = column(batch, "topic")
            parts = column(batch, "partition")
            timestamps = _timestamps_ms(batch)
            headers = column(batch, "headers")
            for i in range(n):
                if topics is not None and topics[i] not in (None, self.topic):
                    raise ConfigError(
                        f"a row names topic {topics[i]!r} but the write goes to {self.topic!r}"
                    )
                key = _as_bytes(keys[i])
                p = parts[i] if parts is not None else None
                if p is None:
                    if key is None:
                        p = sticky % self.partitions
                        sticky += 1
                    else:
                        p = partition_for_key(key, self.partitions)
                elif not 0 <= p < self.partitions:
                    raise ConfigError(f"a row names partition {p} but topic {self.topic!r} has {self.partitions}")
                ts = _or(timestamps[i], now_ms) if timestamps is not None else now_ms
                hdrs = (
                    [(h["key"], _as_bytes(h["value"])) for h in headers[i]]
                    if headers is not None and headers[i]
                    else ()
                )
                staged.by_partition.setdefault(p, []).append(NewRecord(key, _as_bytes(values[i]), ts, hdrs))
        return staged

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log = open_source_log(self.path, self.bootstrap, self.topic, self.security)
        try:
            for message in messages:
                if not isinstance(message, StagedRecords):
                    continue
                for p, records in sorted(message.by_partition.items()):
                    log.append(p, records, self.compression)
        finally:
            log.close()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # The staged rows live only in the messages: dropping them leaves the log untouched.
        return None


def _timestamps_ms(batch: pa.RecordBatch) -> list[int | None] | None:
    index = batch.schema.get_field_index("timestamp")
    if index < 0:
        return None
    col = batch.column(index)
    unit = col.type.unit
    per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    raw = col.cast(pa.int64()).to_pylist()
    return [None if v is None else int(v // per_ms) if per_ms >= 1 else int(v * 1000) for v in raw]
