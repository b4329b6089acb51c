"""Records as Arrow record batches with the columns of Spark's Kafka source, and back.

The one module of ``spark/`` that builds or reads Arrow arrays. Columns, as Spark's Kafka
source names and types them::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int, headers array<struct<key: string, value: binary>>

``timestampType`` is 0 for CreateTime and 1 for LogAppendTime, as in Kafka. ``headers`` is
null for a record without headers (as in Spark's Kafka source) and left out when the
``includeHeaders`` option is false. The columns that always have a value (``topic`` to
``timestampType``) are declared not nullable, so Spark's row conversion skips their null checks. With a value decoder (see
``values.py``) ``value`` is a struct of the decoded record's fields instead of bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from streamkit.log.records import Record

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)

KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

# Records gathered into one Arrow batch: big enough that per-batch costs vanish.
ARROW_BATCH_RECORDS = 32_768

ValueColumn = Callable[[list[bytes | None]], pa.Array]


def arrow_schema(include_headers: bool, value_type: pa.DataType | None = None) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary() if value_type is None else value_type),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("timestampType", pa.int32(), nullable=False),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def record_batches(
    topic: str,
    partition: int,
    chunks: Iterator[tuple[bool, list[Record]]],
    *,
    include_headers: bool,
    value_column: ValueColumn | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records of ``chunks`` (log append time?, records) as Arrow batches: the record path,
    which the data source's column path (``columns.py``) is tested and measured against."""
    schema = arrow_schema(include_headers, value_column([]).type if value_column else pa.binary())
    pending: list[Record] = []
    kinds: list[tuple[int, bool]] = []  # (records so far, log append time) where a run begins
    for log_append_time, records in chunks:
        if not records:
            continue
        if not kinds or kinds[-1][1] != log_append_time:
            kinds.append((len(pending), log_append_time))
        pending.extend(records)
        if len(pending) >= ARROW_BATCH_RECORDS:
            yield _to_batch(schema, topic, partition, pending, kinds, include_headers, value_column)
            pending, kinds = [], []
    if pending:
        yield _to_batch(schema, topic, partition, pending, kinds, include_headers, value_column)


def _to_batch(
    schema: pa.Schema,
    topic: str,
    partition: int,
    records: list[Record],
    kinds: list[tuple[int, bool]],
    include_headers: bool,
    value_column: ValueColumn | None,
) -> pa.RecordBatch:
    values = [r.value for r in records]
    return kafka_batch(
        schema,
        topic,
        partition,
        pa.array([r.key for r in records], pa.binary()),
        value_column(values) if value_column else pa.array(values, pa.binary()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp for r in records], pa.int64()),
        _timestamp_types(len(records), kinds),
        _headers(records) if include_headers else None,
    )


def kafka_batch(
    schema: pa.Schema,
    topic: str,
    partition: int,
    key: pa.Array,
    value: pa.Array,
    offset: pa.Array,
    timestamp_ms: pa.Array,
    timestamp_type: pa.Array,
    headers: pa.Array | None,
) -> pa.RecordBatch:
    """The batch of ``schema`` (the Kafka columns) for one partition's records, from their
    per-record arrays (timestamps in ms; ``headers`` None when the schema has none)."""
    n = len(offset)
    columns: list[pa.Array] = [
        key,
        value,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offset,
        pc.multiply(timestamp_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
        timestamp_type,
    ]
    if headers is not None:
        columns.append(headers)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def record_batch(
    schema: pa.Schema,
    topic: str,
    partition: int,
    records: list[Record],
    log_append_time: bool,
    include_headers: bool,
) -> pa.RecordBatch:
    """The records of one log batch as an Arrow batch of ``schema`` (binary values)."""
    return _to_batch(schema, topic, partition, records, [(0, log_append_time)], include_headers, None)


def _timestamp_types(n: int, kinds: list[tuple[int, bool]]) -> pa.Array:
    if len(kinds) == 1:  # the usual case: one timestamp type for the whole batch
        return pa.repeat(pa.scalar(1 if kinds[0][1] else 0, pa.int32()), n)
    out: list[int] = []
    for i, (begin, lat) in enumerate(kinds):
        stop = kinds[i + 1][0] if i + 1 < len(kinds) else n
        out.extend([1 if lat else 0] * (stop - begin))
    return pa.array(out, pa.int32())


def _headers(records: Sequence[Record]) -> pa.Array:
    if not any(r.headers for r in records):
        return no_headers(len(records))
    return pa.array(
        [[{"key": k, "value": v} for k, v in r.headers] if r.headers else None for r in records], HEADERS_TYPE
    )


def no_headers(n: int) -> pa.Array:
    """A headers column of ``n`` records without headers: null, as Spark's Kafka source gives."""
    return pa.nulls(n, HEADERS_TYPE)


def column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    """The column ``name`` of ``batch`` as Python values; None when the batch has none."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    return list(batch.column(index).to_pylist())
