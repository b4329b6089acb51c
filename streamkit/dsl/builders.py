"""The declarative DSL (Kafka Streams' KStream/KTable), spelled in Python.

    >>> import streamkit as sk
    >>> app = sk.App("docs-dsl")
    >>> views = app.topic("views", key_type=str, value_type=dict, partitions=4)
    >>> per_user = app.stream(views).group_by(lambda v: v["user"], name="user").count("views_per_user")
    >>> [type(node).__name__ for node in per_user.pipeline]
    ['Source', 'GroupBy', 'Aggregate']
    >>> per_user.table.changelog_topic.name
    'docs-dsl-views_per_user-changelog'

A definition is plain data: a ``Pipeline`` is a tuple of frozen nodes from a ``Source`` (a topic,
or a table's changes) to a terminal (``Sink`` to a topic, or ``Aggregate`` into a table),
holding the user's functions and nothing of a runtime. The app keeps every pipeline
(``app.topologies``); two runners walk them: the worker, which runs each pipeline as an agent
compiled here (so partition tasks, repartitioning, commits, dead letters and tables work as
for hand-written agents), and the Spark backfill, which plans the same nodes as DataFrame
operations.

Functions take the value (``filter``, ``map_values``, ``group_by``), except ``map``, which
takes key and value and returns a new (key, value) pair, as Kafka Streams' ``map`` does; a
later aggregation then repartitions by the new key. Functions must be plain (not ``async``):
the same function runs in the worker and in a Spark job.

Windowed stream-stream joins: ``stream.join(other_stream, joiner, within=600, grace=0,
how="inner"|"left"|"outer")`` pairs records of the same key whose timestamps differ by at most
``within`` (Kafka Streams' ``JoinWindows``; the rules are in ``streamkit.windows.join``). The
worker runs it as one agent reading partition p of both sides, so both sides' records of a key
meet in one task with one stream time; a side whose key a ``map`` changed, or whose topic is
partitioned differently, first goes through a repartition topic. The join state is a table
(``<pipeline>-<name>``: RocksDB or memory, a changelog, recovery), late records go to
``<app>-late``.

Duality: ``stream.to_table(name)`` keeps the latest value per key (a ``None`` value deletes
it); an aggregation (``count``, ``sum``, ``reduce``, ``aggregate``) is a table; and
``table.to_stream()`` is the stream of a table's changes: its changelog, where every commit
writes the keys that changed since the last one (Kafka Streams' record cache does the same).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from streamkit._core.errors import ConfigError
from streamkit._core.serde import Serde, serde_for
from streamkit.agents.stream import Event, Stream
from streamkit.tables.errors import TableError
from streamkit.tables.partition import MISSING, SortedPartition, WindowStoreView
from streamkit.tables.table import Table
from streamkit.topics.topic import Topic, to_ms
from streamkit.windows.join import JOIN_KINDS as STREAM_JOIN_KINDS
from streamkit.windows.join import Codec, WindowJoin
from streamkit.windows.records import late_headers, window_body
from streamkit.windows.spec import WindowSpec
from streamkit.windows.wtable import WindowedTable, late_counter

if TYPE_CHECKING:
    from streamkit.app.application import App

JOIN_KINDS = ("inner", "left")
TABLE_JOIN_KINDS = ("inner", "left", "outer")


# -- nodes ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Source:
    """Records of a topic (for ``table.to_stream()``: the table's changelog)."""

    topic: Topic
    table: Table | None = None  # set when the source is a table's changes


@dataclass(frozen=True, slots=True)
class Map:
    """``kind``: "map" (fn(key, value) -> (key, value)), "map_values" (fn(value) -> value),
    "flat_map" (fn(key, value) -> pairs), "flat_map_values" (fn(value) -> values) or
    "filter" (fn(value) -> keep?)."""

    kind: str
    fn: Callable[..., Any]


@dataclass(frozen=True, slots=True)
class GroupBy:
    """Re-key by ``fn(value)`` (None: by the current key) and repartition through
    ``<app>-<pipeline>-<name>-repartition``."""

    fn: Callable[[Any], Any] | None
    name: str


@dataclass(frozen=True, slots=True)
class Join:
    """Stream-table join: each record with the table's value for its key (or, for a global
    table, for ``key(value)``)."""

    table: Table
    joiner: Callable[[Any, Any], Any]
    how: str
    key: Callable[[Any], Any] | None = None


@dataclass(frozen=True, slots=True)
class StreamJoin:
    """Windowed stream-stream join with ``other`` (the right side's nodes, from its source):
    ``joiner(left, right)`` for records of one key at most ``within_ms`` apart (see
    ``streamkit.windows.join``). ``name`` names its state table and internal topics."""

    other: tuple[Any, ...]  # a Pipeline without a terminal
    joiner: Callable[[Any, Any], Any]
    within_ms: int
    grace_ms: int
    how: str
    name: str


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Into ``table``: "count", "sum" (``fn`` of the value), "reduce" (``fn(aggregate, value)``),
    "aggregate" (``fn(key, value, aggregate)`` from ``initializer()``) or "latest" (to_table)."""

    table: Table
    kind: str
    fn: Callable[..., Any] | None = None
    initializer: Callable[[], Any] | None = None


@dataclass(frozen=True, slots=True)
class TableJoin:
    """Table-table join of two tables' changes into ``table``."""

    left: Table
    right: Table
    joiner: Callable[[Any, Any], Any]
    how: str
    table: Table


@dataclass(frozen=True, slots=True)
class WindowedAggregate:
    """Into a windowed table: the table holds the window spec and the aggregation."""

    table: WindowedTable


@dataclass(frozen=True, slots=True)
class Sink:
    topic: Topic


Node = Source | Map | GroupBy | Join | StreamJoin | Aggregate | WindowedAggregate | TableJoin | Sink
Pipeline = tuple[Node, ...]


def _plain(fn: Any, what: str) -> Callable[..., Any]:
    if not callable(fn):
        raise ConfigError(f"{what} needs a function, not {fn!r}")
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise ConfigError(f"{what}: declarative functions must be plain functions, not async ones")
    return fn  # type: ignore[no-any-return]


# -- builders ------------------------------------------------------------------------------


class KStream:
    """A declarative stream: operators return new streams; terminals register a pipeline."""

    def __init__(self, app: App, nodes: Pipeline) -> None:
        self.app = app
        self.nodes = nodes

    def __repr__(self) -> str:
        return f"<KStream {' -> '.join(type(n).__name__ for n in self.nodes)}>"

    def _then(self, node: Node) -> KStream:
        return KStream(self.app, (*self.nodes, node))

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]]) -> KStream:
        return self._then(Map("map", _plain(fn, "map")))

    def map_values(self, fn: Callable[[Any], Any]) -> KStream:
        return self._then(Map("map_values", _plain(fn, "map_values")))

    def flat_map(self, fn: Callable[[Any, Any], Any]) -> KStream:
        """Each record becomes the (key, value) pairs ``fn(key, value)`` returns (maybe none)."""
        return self._then(Map("flat_map", _plain(fn, "flat_map")))

    def flat_map_values(self, fn: Callable[[Any], Any]) -> KStream:
        """Each record becomes one record per value ``fn(value)`` returns, with its key."""
        return self._then(Map("flat_map_values", _plain(fn, "flat_map_values")))

    def filter(self, fn: Callable[[Any], Any]) -> KStream:
        return self._then(Map("filter", _plain(fn, "filter")))

    def join(
        self, table: KStream | KTable | Table, joiner: Callable[[Any, Any], Any], *, how: str = "inner",
        key: Callable[[Any], Any] | None = None, within: float | timedelta | None = None,
        grace: float | timedelta = 0, name: str = "join",
    ) -> KStream:
        """Each record joined with ``table``'s current value for its key (the table must be
        co-partitioned with the stream: same key, same partition count). ``how="inner"`` drops
        a record whose key the table lacks; ``"left"`` passes ``None`` for it. With a global
        table, ``key=fn`` looks up ``fn(value)`` instead (Kafka Streams' GlobalKTable join).

        With another stream, a windowed stream-stream join: ``joiner(left, right)`` for each
        pair of records of the same key at most ``within`` seconds apart (``grace`` seconds
        more for out-of-order records); ``how="left"`` also emits each left record that met
        nothing as ``joiner(left, None)``, ``"outer"`` each such record of either side, once
        its window closed by stream time (see ``streamkit.windows.join``).

        >>> import streamkit as sk
        >>> app = sk.App("docs-join")
        >>> orders = app.topic("orders", key_type=str, value_type=dict, partitions=2)
        >>> payments = app.topic("payments", key_type=str, value_type=dict, partitions=2)
        >>> app.stream(orders).join(app.stream(payments), lambda o, p: {**o, "paid": p is not None},
        ...                         within=600, how="left").to("orders-paid")
        >>> app.tables["orders-paid-join"].changelog_topic.name
        'docs-join-orders-paid-join-changelog'
        """
        if isinstance(table, KStream):
            return self._stream_join(table, joiner, how, within, grace, name, key)
        if within is not None:
            raise ConfigError("join(within=...) is for joining two streams; a table join has no window")
        if how not in JOIN_KINDS:
            raise ConfigError(f"a stream-table join is one of {JOIN_KINDS}, not {how!r}")
        target = _table_of(table)
        if key is not None and not target.is_global:
            raise ConfigError(
                f"join(key=...) needs a global table: {target.name!r} is partitioned like its stream"
            )
        return self._then(Join(target, _plain(joiner, "join"), how, _plain(key, "join key") if key else None))

    def _stream_join(
        self, other: KStream, joiner: Callable[[Any, Any], Any], how: str,
        within: float | timedelta | None, grace: float | timedelta, name: str, key: Any,
    ) -> KStream:
        if how not in STREAM_JOIN_KINDS:
            raise ConfigError(f"a stream-stream join is one of {STREAM_JOIN_KINDS}, not {how!r}")
        if within is None:
            raise ConfigError("a stream-stream join needs within=: how far apart (seconds) two records may be")
        if key is not None:
            raise ConfigError("join(key=...) is for global tables; a stream-stream join pairs records by their key")
        if other.app is not self.app:
            raise ConfigError("a stream-stream join joins two streams of the same app")
        if any(isinstance(n, StreamJoin) for n in (*self.nodes, *other.nodes)):
            raise ConfigError("a pipeline holds one stream-stream join: write the first join to a topic and join that")
        within_ms = to_ms(within, "join within")
        grace_ms = to_ms(grace, "join grace")
        assert within_ms is not None and grace_ms is not None
        if not name or "/" in name:
            raise ConfigError(f"join name must be a plain name, not {name!r}")
        return self._then(StreamJoin(other.nodes, _plain(joiner, "join"), within_ms, grace_ms, how, name))

    def group_by(self, fn: Callable[[Any], Any], *, name: str = "by") -> KGroupedStream:
        return KGroupedStream(self.app, (*self.nodes, GroupBy(_plain(fn, "group_by"), name)))

    def group_by_key(self, *, name: str = "key") -> KGroupedStream:
        """Group by the current key; repartitions only when an earlier ``map`` changed keys."""
        rekeyed = any(isinstance(n, Map) and n.kind in ("map", "flat_map") for n in self.nodes)
        return KGroupedStream(self.app, (*self.nodes, GroupBy(None, name)) if rekeyed else self.nodes)

    def to(self, topic: Topic | str) -> None:
        """Write the stream to ``topic`` (keys and timestamps kept)."""
        target = self.app.topic(topic) if isinstance(topic, str) else topic
        self.app._register_pipeline((*self.nodes, Sink(target)), target.name)

    def to_table(self, name: str, **options: Any) -> KTable:
        """The latest value per key, as a table (a ``None`` value deletes the key)."""
        return _aggregate(self.app, self.nodes, name, options, "latest")


class KGroupedStream:
    """A stream grouped by key, ready to aggregate into a table."""

    def __init__(self, app: App, nodes: Pipeline) -> None:
        self.app = app
        self.nodes = nodes

    def count(self, name: str, **options: Any) -> KTable:
        options.setdefault("default", int)
        return _aggregate(self.app, self.nodes, name, options, "count")

    def window(self, spec: WindowSpec) -> KWindowedStream:
        """Aggregate per event-time window (``streamkit.windows``: Tumbling, Hopping,
        Sliding, Session) instead of per key."""
        return KWindowedStream(self.app, self.nodes, spec)

    def sum(self, name: str, fn: Callable[[Any], Any] | None = None, **options: Any) -> KTable:
        options.setdefault("default", int)
        return _aggregate(self.app, self.nodes, name, options, "sum", fn=_plain(fn, "sum") if fn else None)

    def reduce(self, name: str, fn: Callable[[Any, Any], Any], **options: Any) -> KTable:
        return _aggregate(self.app, self.nodes, name, options, "reduce", fn=_plain(fn, "reduce"))

    def aggregate(
        self, name: str, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any], **options: Any
    ) -> KTable:
        """``adder(key, value, aggregate)`` returns the new aggregate, from ``initializer()``."""
        return _aggregate(
            self.app, self.nodes, name, options, "aggregate",
            fn=_plain(adder, "aggregate"), initializer=_plain(initializer, "aggregate initializer"),
        )


class KWindowedStream:
    """A grouped stream cut into event-time windows, ready to aggregate per key and window.

    A window closes when the table's stream time (the largest timestamp it has seen) reaches
    its end + grace; a record whose windows are all closed is late: it changes nothing and goes
    to ``<app>-late`` with headers saying why."""

    def __init__(self, app: App, nodes: Pipeline, spec: WindowSpec) -> None:
        self.app = app
        self.nodes = nodes
        self.spec = spec

    def count(self, name: str, **options: Any) -> KWindowedTable:
        return self._aggregate(name, options, lambda: 0, lambda agg, kv: agg + 1, lambda a, b: a + b)

    def aggregate(
        self, name: str, initializer: Callable[[], Any], adder: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any] | None = None, **options: Any,
    ) -> KWindowedTable:
        """``adder(key, value, aggregate)``; for session windows ``merger(key, a, b)`` joins
        the aggregates of two sessions a record bridges."""
        add = _plain(adder, "aggregate")
        merge = _plain(merger, "aggregate merger") if merger is not None else None
        return self._aggregate(
            name, options, _plain(initializer, "aggregate initializer"),
            lambda agg, kv: add(kv[0], kv[1], agg),
            (lambda a, b: merge(None, a, b)) if merge is not None else None,
        )

    def reduce(self, name: str, fn: Callable[[Any, Any], Any], **options: Any) -> KWindowedTable:
        reducer = _plain(fn, "reduce")
        return self._aggregate(
            name, options, lambda: None,
            lambda agg, kv: kv[1] if agg is None else reducer(agg, kv[1]), reducer,
        )

    def _aggregate(
        self, name: str, options: dict[str, Any], initializer: Callable[[], Any],
        adder: Callable[[Any, Any], Any], merger: Callable[[Any, Any], Any] | None,
    ) -> KWindowedTable:
        table = self.app._declare_table(
            name, WindowedTable,
            {**options, "spec": self.spec, "initializer": initializer, "adder": adder, "merger": merger},
        )
        assert isinstance(table, WindowedTable)
        pipeline: Pipeline = (*self.nodes, WindowedAggregate(table))
        self.app._register_pipeline(pipeline, name)
        return KWindowedTable(self.app, table, pipeline)


class KTable:
    """A declarative table: the ``Table`` it fills, plus the pipeline that fills it.

    Reads go to the table (``ktable[key]``, ``ktable.get(key)``, as ``Table``)."""

    def __init__(self, app: App, table: Table, pipeline: Pipeline) -> None:
        self.app = app
        self.table = table
        self.pipeline = pipeline

    def __repr__(self) -> str:
        return f"<KTable {self.table.name!r}>"

    def __getitem__(self, key: Any) -> Any:
        return self.table[key]

    def get(self, key: Any, default: Any = None) -> Any:
        return self.table.get(key, default)

    def items(self) -> Any:
        return self.table.items()

    def to_stream(self) -> KStream:
        """The stream of this table's changes (key, new value; ``None`` for a deleted key)."""
        return table_stream(self.app, self.table)

    def join(
        self, other: KTable | Table, joiner: Callable[[Any, Any], Any], *, how: str = "inner",
        name: str | None = None, **options: Any,
    ) -> KTable:
        """A table of ``joiner(left, right)`` per key, updated when either side changes.

        ``inner``: keys both sides have; ``left``: keys this side has (``right`` may be
        ``None``); ``outer``: keys either side has. A key that stops qualifying (a side deleted
        it) is deleted from the result, as Kafka Streams forwards a tombstone."""
        if how not in TABLE_JOIN_KINDS:
            raise ConfigError(f"a table-table join is one of {TABLE_JOIN_KINDS}, not {how!r}")
        right = _table_of(other)
        result = self.app.Table(name or f"{self.table.name}-{how}-join-{right.name}", **options)
        source = Source(self.table.changelog_topic, self.table)
        pipeline: Pipeline = (source, TableJoin(self.table, right, _plain(joiner, "join"), how, result))
        self.app._register_pipeline(pipeline, result.name)
        return KTable(self.app, result, pipeline)


def copartitioning_errors(pipelines: list[Pipeline], count_of: Callable[[Topic], int | None]) -> list[str]:
    """What breaks co-partitioning in ``pipelines``, given topics' partition counts: a stream
    joined with a (non-global) table must have the table's partition count, and so must the
    two tables of a table-table join; else records and table keys would not meet."""
    errors = []
    for pipeline in pipelines:
        source = pipeline[0]
        assert isinstance(source, Source)
        for node in pipeline:
            if isinstance(node, Join) and not node.table.is_global:
                stream_count = count_of(source.topic)
                table_count = node.table.partition_count
                if stream_count is not None and table_count is not None and stream_count != table_count:
                    errors.append(
                        f"stream {source.topic.name!r} ({stream_count} partitions) is joined with table "
                        f"{node.table.name!r} ({table_count} partitions): they must be co-partitioned "
                        f"(declare both with the same partitions=, or re-key the stream with group_by first)"
                    )
            if isinstance(node, StreamJoin):
                other = node.other[0]
                assert isinstance(other, Source)
                counts = count_of(source.topic), count_of(other.topic)
                if (
                    None not in counts and counts[0] != counts[1]
                    and not _rekeys(pipeline[1:pipeline.index(node)]) and not _rekeys(node.other[1:])
                ):
                    errors.append(
                        f"streams {source.topic.name!r} ({counts[0]} partitions) and {other.topic.name!r} "
                        f"({counts[1]} partitions) are joined: they must be co-partitioned (declare both topics "
                        f"with partitions=, then a side partitioned differently is repartitioned)"
                    )
            if isinstance(node, TableJoin) and node.left.partition_count != node.right.partition_count:
                errors.append(
                    f"tables {node.left.name!r} ({node.left.partition_count} partitions) and "
                    f"{node.right.name!r} ({node.right.partition_count} partitions) are joined: they must "
                    f"have the same partitions="
                )
    return errors


class KWindowedTable:
    """A declarative windowed table: its ``WindowedTable`` and the pipeline that fills it."""

    def __init__(self, app: App, table: WindowedTable, pipeline: Pipeline) -> None:
        self.app = app
        self.table = table
        self.pipeline = pipeline

    def __repr__(self) -> str:
        return f"<KWindowedTable {self.table.name!r}>"

    def windows(self, key: Any, from_ms: int | None = None, to_ms: int | None = None) -> list[dict[str, Any]]:
        return self.table.windows(key, from_ms, to_ms)

    def items(self) -> Any:
        return self.table.items()

    def to_stream(self, emit: str = "update") -> KStream:
        """The stream of the table's windows, keyed by the group key, with the JSON value
        ``{"window_start": ms, "window_end": ms, "value": v}``: every change (``"update"``),
        or each window once, when it closes (``"close"``, Kafka Streams' suppress)."""
        table = self.table
        table.choose_emit(emit)
        if table.emitted_topic is None:
            table.emitted_topic = self.app.topic(
                f"{self.app.id}-{table.name}-windows",
                key_serializer=table.group_key_serde,
                value_serializer="json",
                partitions=table.declared_partitions,
                internal=True,
            )
        return KStream(self.app, (Source(table.emitted_topic),))


def table_stream(app: App, table: Table) -> KStream:
    return KStream(app, (Source(table.changelog_topic, table),))


def _table_of(table: KTable | Table) -> Table:
    if isinstance(table, KTable):
        return table.table
    if isinstance(table, Table):
        return table
    raise ConfigError(f"expected a table, not {table!r}")


def _aggregate(
    app: App, nodes: Pipeline, name: str, options: dict[str, Any], kind: str,
    fn: Callable[..., Any] | None = None, initializer: Callable[[], Any] | None = None,
) -> KTable:
    table = app.Table(name, **options)
    pipeline: Pipeline = (*nodes, Aggregate(table, kind, fn, initializer))
    app._register_pipeline(pipeline, name)
    return KTable(app, table, pipeline)


# -- the worker's runner: a pipeline compiled to agents ---------------------------------------


@dataclass(frozen=True, slots=True)
class CompiledAgent:
    """One agent a pipeline runs as: its name, inputs, function and sink topics."""

    name: str
    topics: list[Topic]
    fn: Callable[[Stream], Any]
    sinks: list[Topic]


Pairs = list[tuple[Any, Any]]


REPARTITION_KEY_SERDE = "json"  # how repartition topics encode keys (the backfill hashes the same bytes)


def grouping(pipeline: Pipeline) -> GroupBy | None:
    return next((n for n in pipeline if isinstance(n, GroupBy)), None)


def stage_names(pipeline: Pipeline, name: str) -> list[str]:
    """The agents a pipeline named ``name`` runs as (see ``compile_pipeline``)."""
    group = grouping(pipeline)
    return [f"{name}-{group.name}", name] if group is not None else [name]


def repartition_topic_name(app_id: str, pipeline: Pipeline, name: str) -> str | None:
    group = grouping(pipeline)
    return f"{app_id}-{name}-{group.name}-repartition" if group is not None else None


def compile_pipeline(app: App, pipeline: Pipeline, name: str) -> list[CompiledAgent]:
    """The agents that run ``pipeline`` in a worker.

    A pipeline without ``group_by`` is one agent. One with it is two, as Kafka Streams splits
    a topology into sub-topologies at a repartition topic: the first runs the operators before
    the grouping and writes each record keyed by its group to ``<app>-<name>-<by>-repartition``
    (placed by the key's hash, like any keyed record); the second reads that topic, runs the
    rest and aggregates, so each key meets one partition.
    """
    source = pipeline[0]
    if not isinstance(source, Source):
        raise ConfigError("a pipeline starts at a source")
    terminal = pipeline[-1]
    middle = pipeline[1:-1]
    if isinstance(terminal, TableJoin):
        update = _table_join(terminal)

        async def join_tables(stream: Stream) -> None:
            async for event in stream.events():
                update(event)

        return [CompiledAgent(name, [terminal.left.changelog_topic, terminal.right.changelog_topic], join_tables, [])]
    at = next((i for i, n in enumerate(middle) if isinstance(n, StreamJoin)), None)
    if at is not None:
        return _compile_stream_join(app, pipeline, name, at)
    split = next((i for i, n in enumerate(middle) if isinstance(n, GroupBy)), None)
    if split is None:
        return [_stage(name, source.topic, middle, terminal)]
    group = middle[split]
    assert isinstance(group, GroupBy)
    after = middle[split + 1 :]
    if any(isinstance(n, GroupBy) for n in after):
        raise ConfigError("a pipeline groups once: aggregate, then start from the table's stream")
    before = middle[:split]
    changed = any(isinstance(n, Map) and n.kind != "filter" for n in before)
    repartition = app.topic(
        f"{app.id}-{name}-{group.name}-repartition",
        key_serializer=REPARTITION_KEY_SERDE,
        # Values keep the source's serializer unless an operator may have changed their type.
        value_serializer="json" if changed else source.topic.value_serde,
        partitions=source.topic.partitions,
        internal=True,
    )
    regroup = Map("map", lambda k, v, fn=group.fn: (fn(v), v)) if group.fn is not None else None
    first_name, _ = stage_names(pipeline, name)
    first = _stage(first_name, source.topic, (*before, *([regroup] if regroup else [])), Sink(repartition))
    second = _stage(name, repartition, after, terminal)
    return [first, second]


def _rekeys(nodes: Any) -> bool:
    """Whether ``nodes`` may change records' keys (so their partition no longer fits them)."""
    return any(isinstance(n, Map) and n.kind in ("map", "flat_map") for n in nodes)


def _retypes(nodes: Any) -> bool:
    """Whether ``nodes`` may change values' type (so the source's serializer may not fit)."""
    return any(isinstance(n, (Join, StreamJoin)) or (isinstance(n, Map) and n.kind != "filter") for n in nodes)


class JoinState(Table):
    """The state of one windowed stream-stream join: per partition, both sides' records in the
    join driver's store layout (``streamkit.windows.join``), changelogged and restored as
    windowed tables are. Declared by ``compile_pipeline``; not queryable."""

    is_windowed = True  # partitions are SortedPartitions holding a driver's sorted store

    def __init__(
        self, app: Any, name: str, *, join: StreamJoin, key_serde: Serde, left_serde: Serde, right_serde: Serde,
        partitions: int | None = None, store: str | None = None,
    ) -> None:
        super().__init__(
            app, name, key_serializer="raw", value_serializer="raw", partitions=partitions, store=store,
            help=f"state of the windowed {join.how} join {join.name!r}",
        )
        self.join = join
        self.join_key_serde = key_serde
        self.left = Codec(_dumps_of(left_serde), left_serde.loads)
        self.right = Codec(_dumps_of(right_serde), right_serde.loads)
        self.late_topic = app.topic(f"{app.id}-late", key_serializer="raw", value_serializer="json", internal=True)
        self.late = late_counter(app, name)  # records sent to the late topic by this worker, by reason

    @property
    def late_records(self) -> int:
        return self.late.total

    def driver(self, state: SortedPartition) -> WindowJoin:
        """The join driver over one partition's state."""
        join = self.join
        return WindowJoin(join.within_ms, join.grace_ms, join.how, WindowStoreView(state), left=self.left, right=self.right)

    def windows(self, key: Any, from_ms: int | None = None, to_ms: int | None = None) -> list[dict[str, Any]]:
        raise TableError(f"table {self.name!r} is a join's state: it is not queryable")

    def items(self) -> Any:
        raise TableError(f"table {self.name!r} is a join's state: it is not queryable")

    def __getitem__(self, key: Any) -> Any:
        raise TableError(f"table {self.name!r} is a join's state: it is not queryable")

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TableError(f"table {self.name!r} is written by its join only")

    def __delitem__(self, key: Any) -> None:
        raise TableError(f"table {self.name!r} is written by its join only")


def _dumps_of(serde: Serde) -> Callable[[Any], bytes]:
    dumps = serde.dumps

    def to_bytes(value: Any) -> bytes:
        return dumps(value) or b""

    return to_bytes


def _compile_stream_join(app: App, pipeline: Pipeline, name: str, at: int) -> list[CompiledAgent]:
    """The agents of a pipeline with a windowed stream-stream join (``middle[at]``).

    The join runs as one agent reading both sides' topics: the worker gives partition p of
    every input of an agent to one task, so the records of a key from both sides meet in one
    task, with one stream time and one partition of the join state (two agents sharing a
    state partition would each need the other's stream time, and their interleaving would be
    the runtime's, not the records'). Both inputs must be keyed alike and partitioned alike: a
    side whose key a ``map``/``flat_map`` changed, or whose topic has fewer partitions than
    the other's, is first written to ``<app>-<name>-<join>-<side>-repartition`` by a stage of
    its own (keyed with the other side's key serializer when only one side moves, so equal
    keys hash to equal partitions; JSON when both do). After the join, a ``group_by`` or a
    windowed aggregation goes through a topic again (``<app>-<name>-<join>-joined``, or the
    group's repartition topic), so it sees the joined records' timestamps.
    """
    source, middle, terminal = pipeline[0], pipeline[1:-1], pipeline[-1]
    assert isinstance(source, Source)
    join = middle[at]
    assert isinstance(join, StreamJoin)
    other = join.other[0]
    if not isinstance(other, Source):
        raise ConfigError("the joined stream starts at a source")
    sides = {"left": (source, middle[:at]), "right": (other, tuple(join.other[1:]))}
    after = middle[at + 1 :]
    if any(isinstance(n, StreamJoin) for n in after):
        raise ConfigError("a pipeline holds one stream-stream join: write the first join to a topic and join that")
    counts = {side: src.topic.partitions for side, (src, _ops) in sides.items()}
    moves = {side: _rekeys(ops) for side, (_src, ops) in sides.items()}
    if not any(moves.values()) and None not in counts.values() and counts["left"] != counts["right"]:
        moves["left" if (counts["left"] or 0) < (counts["right"] or 0) else "right"] = True
    stay = [side for side in ("left", "right") if not moves[side]]
    if len(stay) == 1:
        kept_topic = sides[stay[0]][0].topic
        if kept_topic.partitions is None and source.topic.name != other.topic.name:
            raise ConfigError(
                f"join {join.name!r} repartitions one side to match topic {kept_topic.name!r}: declare that "
                f"topic with partitions= so the repartition topic can have as many"
            )
        count, key_serde = kept_topic.partitions, kept_topic.key_serde
    else:
        declared = [c for c in counts.values() if c is not None]
        count, key_serde = (max(declared) if declared else None), sides["left"][0].topic.key_serde
        if len(stay) == 0:
            key_serde = serde_for(REPARTITION_KEY_SERDE, None)
    stages: list[CompiledAgent] = []
    inputs: dict[str, tuple[Topic, Callable[[Any, Any], Pairs], Serde]] = {}
    for side, (src, ops) in sides.items():
        value_serde = serde_for("json", None) if _retypes(ops) else src.topic.value_serde
        if not moves[side]:
            run = runner(tuple(ops))
            if _retypes(ops):
                # Stored values come back through JSON: so does the record in hand, so the
                # joiner sees one type whichever side came first.
                run = _through(run, value_serde)
            inputs[side] = (src.topic, run, value_serde)
            continue
        hop = app.topic(
            f"{app.id}-{name}-{join.name}-{side}-repartition",
            key_serializer=key_serde, value_serializer=value_serde, partitions=count, internal=True,
        )
        stages.append(_stage(f"{name}-{join.name}-{side}", src.topic, tuple(ops), Sink(hop)))
        inputs[side] = (hop, runner(()), value_serde)
    state = app._declare_table(
        f"{name}-{join.name}", JoinState,
        {"join": join, "key_serde": key_serde, "left_serde": inputs["left"][2], "right_serde": inputs["right"][2]},
    )
    assert isinstance(state, JoinState)
    split = next((i for i, n in enumerate(after) if isinstance(n, GroupBy)), None)
    if split is None and isinstance(terminal, (Sink, Aggregate)):
        stages.append(_join_stage(name, state, inputs, runner(tuple(after)), terminal))
        return stages
    if split is not None:
        group = after[split]
        assert isinstance(group, GroupBy)
        if any(isinstance(n, GroupBy) for n in after[split + 1 :]):
            raise ConfigError("a pipeline groups once: aggregate, then start from the table's stream")
        before, rest = after[:split], after[split + 1 :]
        regroup = [Map("map", lambda k, v, fn=group.fn: (fn(v), v))] if group.fn is not None else []
        hop = app.topic(
            f"{app.id}-{name}-{group.name}-repartition", key_serializer=REPARTITION_KEY_SERDE,
            value_serializer="json", partitions=count, internal=True,
        )
        run_before = runner((*before, *regroup))
    else:
        rest = after
        hop = app.topic(
            f"{app.id}-{name}-{join.name}-joined", key_serializer=REPARTITION_KEY_SERDE,
            value_serializer="json", partitions=count, internal=True,
        )
        run_before = runner(())
    stages.append(_join_stage(f"{name}-{join.name}", state, inputs, run_before, Sink(hop)))
    stages.append(_stage(name, hop, tuple(rest), terminal))
    return stages


def _through(run: Callable[[Any, Any], Pairs], serde: Serde) -> Callable[[Any, Any], Pairs]:
    dumps, loads = serde.dumps, serde.loads

    def run_through(key: Any, value: Any) -> Pairs:
        return [(k, v if v is None else loads(dumps(v))) for k, v in run(key, value)]

    return run_through


def _join_stage(
    name: str, state_table: JoinState, inputs: dict[str, tuple[Topic, Callable[[Any, Any], Pairs], Serde]],
    run_after: Callable[[Any, Any], Pairs], terminal: Node,
) -> CompiledAgent:
    """The agent joining both sides: each record through its side's operators, into the join
    driver of its partition; each result through the joiner and the operators after the join,
    to the sink topic (with the result's timestamp) or the table."""
    join = state_table.join
    joiner = join.joiner
    left_topic, run_left, _ = inputs["left"]
    right_topic, run_right, _ = inputs["right"]
    left_name, right_name = left_topic.name, right_topic.name
    key_dumps, key_loads = state_table.join_key_serde.dumps, state_table.join_key_serde.loads
    late_topic = state_table.late_topic
    if isinstance(terminal, Sink):
        sink = terminal.topic

        def emit(key: Any, value: Any, ts: int) -> None:
            for k, v in run_after(key, value):
                sink.send_soon(key=k, value=v, timestamp=ts)
    else:
        assert isinstance(terminal, Aggregate)
        apply = _aggregator(terminal)

        def emit(key: Any, value: Any, ts: int) -> None:
            for k, v in run_after(key, value):
                apply(k, v)

    def set_aside(side: str, key: Any, raw_key: bytes | None, value: Any, ts: int, reason: str, now: int) -> None:
        state_table.late.add(reason)
        late_topic.send_soon(
            key=raw_key,
            value=value,
            timestamp=ts,
            headers=late_headers(state_table.name, reason, ts, now, side=side),
        )

    async def join_streams(stream: Stream) -> None:
        drivers: dict[int, tuple[SortedPartition, WindowJoin]] = {}
        async for event in stream.events():
            partition = event.partition
            held = drivers.get(partition)
            state = state_table.partition_state(partition)
            if held is None or held[0] is not state:  # (re)assigned: a driver over the new state
                if not isinstance(state, SortedPartition):
                    raise TableError(f"join state {state_table.name!r} has no partition {partition} here")
                held = drivers[partition] = (state, state_table.driver(state))
            held[0].timestamp_ms = ts = event.timestamp
            driver = held[1]
            topic = event.topic
            for side, run in (("left", run_left), ("right", run_right)):
                if topic != (left_name if side == "left" else right_name):
                    continue
                for key, value in run(event.key, event.value):
                    raw_key = key_dumps(key) if key is not None else None
                    if raw_key is None or value is None:
                        reason = "null-key" if raw_key is None else "null-value"
                        set_aside(side, key, raw_key, value, ts, reason, driver.stream_time.ms)
                        continue
                    step = driver.process(side, raw_key, ts, value)  # type: ignore[arg-type]
                    for result in step.results:
                        out_key = key if result.key == raw_key else key_loads(result.key)
                        emit(out_key, joiner(result.left, result.right), result.ts_ms)
                    late = step.late
                    if late is not None:
                        set_aside(side, key, raw_key, value, ts, late.reason, late.stream_time_ms)

    topics = [left_topic] if left_name == right_name else [left_topic, right_topic]
    return CompiledAgent(name, topics, join_streams, [terminal.topic] if isinstance(terminal, Sink) else [])


def _stage(name: str, topic: Topic, nodes: tuple[Node, ...], terminal: Node) -> CompiledAgent:
    run = runner(nodes)
    if isinstance(terminal, Sink):
        async def forward(stream: Stream) -> Any:
            # The worker sends what an agent yields with the current event's key and
            # timestamp: set the key of each output on the event before yielding it.
            async for event in stream.events():
                for key, value in run(event.key, event.value):
                    event.key = key
                    yield value

        return CompiledAgent(name, [topic], forward, [terminal.topic])
    if isinstance(terminal, WindowedAggregate):
        return CompiledAgent(name, [topic], _windowed_agent(terminal.table, run), [])
    if isinstance(terminal, Aggregate):
        apply = _aggregator(terminal)

        async def aggregate(stream: Stream) -> None:
            async for event in stream.events():
                for key, value in run(event.key, event.value):
                    apply(key, value)

        return CompiledAgent(name, [topic], aggregate, [])
    raise ConfigError(f"a pipeline ends in a sink or a table, not {type(terminal).__name__}")


def _windowed_agent(table: WindowedTable, run: Callable[[Any, Any], Pairs]) -> Callable[[Stream], Any]:
    """An agent feeding each output of ``run`` to the window driver of its event's partition:
    emitted windows go to the table's windows topic (when ``to_stream`` asked for it), late
    records to ``<app>-late``."""
    key_dumps, key_loads = table.group_key_serde.dumps, table.group_key_serde.loads

    async def aggregate_windows(stream: Stream) -> None:
        drivers: dict[int, tuple[SortedPartition, Any]] = {}
        async for event in stream.events():
            state = table.partition_state(event.partition)
            if not isinstance(state, SortedPartition):
                raise TableError(f"windowed table {table.name!r} has no partition {event.partition} here")
            held = drivers.get(event.partition)
            if held is None or held[0] is not state:  # (re)assigned: a driver over the new state
                held = drivers[event.partition] = (state, table.aggregator(state))
            state.timestamp_ms = event.timestamp
            for key, value in run(event.key, event.value):
                step = held[1].process(key_dumps(key) or b"", event.timestamp, (key, value))
                emitted = table.emitted_topic
                for window in step.emitted if emitted is not None else ():
                    await emitted.send(
                        key=key_loads(window.key),
                        value=window_body(window.start_ms, window.end_ms, window.value),
                    )
                late = step.late
                if late is not None:
                    await table.late_topic.send(
                        key=late.key,
                        value=value,
                        headers=late_headers(table.name, late.reason, late.ts_ms, late.stream_time_ms),
                    )

    return aggregate_windows


def runner(nodes: tuple[Node, ...]) -> Callable[[Any, Any], Pairs]:
    """One function running ``nodes`` (maps, flat maps, filters, joins) on a key and value:
    the (key, value) pairs that come out (none when dropped, several after a flat map)."""
    ops = [_op(node) for node in nodes]
    if not ops:
        return lambda key, value: [(key, value)]
    if len(ops) == 1:
        return ops[0]

    def run(key: Any, value: Any) -> Pairs:
        pairs = [(key, value)]
        for op in ops:
            out: Pairs = []
            for k, v in pairs:
                out.extend(op(k, v))
            if not out:
                return out
            pairs = out
        return pairs

    return run


def _op(node: Node) -> Callable[[Any, Any], Pairs]:
    if isinstance(node, StreamJoin):
        raise ConfigError(
            f"the windowed stream-stream join {node.name!r} runs in a worker only: the backfill does not run it"
        )
    if isinstance(node, Join):
        table, joiner, inner, key_fn = node.table, node.joiner, node.how == "inner", node.key

        def join(key: Any, value: Any) -> Pairs:
            other = table.get(key if key_fn is None else key_fn(value))
            if other is None and inner:
                return []
            return [(key, joiner(value, other))]

        return join
    if not isinstance(node, Map):
        raise ConfigError(f"{type(node).__name__} cannot appear here in a pipeline")
    fn, kind = node.fn, node.kind
    if kind == "filter":
        return lambda key, value: [(key, value)] if fn(value) else []
    if kind == "map_values":
        return lambda key, value: [(key, fn(value))]
    if kind == "flat_map_values":
        return lambda key, value: [(key, v) for v in fn(value)]
    if kind == "flat_map":
        return lambda key, value: [(k, v) for k, v in fn(key, value)]
    return lambda key, value: [fn(key, value)]


def _aggregator(node: Aggregate) -> Callable[[Any, Any], None]:
    table, fn, kind = node.table, node.fn, node.kind
    if kind == "count":
        def count(key: Any, value: Any) -> None:
            table[key] = table.get(key, 0) + 1

        return count
    if kind == "sum":
        def add(key: Any, value: Any) -> None:
            table[key] = table.get(key, 0) + (fn(value) if fn is not None else value)

        return add
    if kind == "reduce":
        assert fn is not None

        def reduce(key: Any, value: Any) -> None:
            current = table.get(key, MISSING)
            table[key] = value if current is MISSING else fn(current, value)

        return reduce
    if kind == "aggregate":
        assert fn is not None and node.initializer is not None
        initializer = node.initializer

        def aggregate(key: Any, value: Any) -> None:
            current = table.get(key, MISSING)
            table[key] = fn(key, value, initializer() if current is MISSING else current)

        return aggregate

    def latest(key: Any, value: Any) -> None:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    return latest


def _table_join(node: TableJoin) -> Callable[[Event], None]:
    left, right, joiner, how, result = node.left, node.right, node.joiner, node.how, node.table
    left_topic = left.changelog_topic.name

    def update(event: Event) -> None:
        key = event.key
        if event.topic == left_topic:
            lv, rv = event.value, right.get(key)
        else:
            lv, rv = left.get(key), event.value
        if how == "inner":
            keep = lv is not None and rv is not None
        elif how == "left":
            keep = lv is not None
        else:
            keep = lv is not None or rv is not None
        if keep:
            result[key] = joiner(lv, rv)
        else:
            result.pop(key, None)

    return update
