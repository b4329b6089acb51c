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

Duality: ``stream.to_table(name)`` keeps the latest value per key (a ``None`` value deletes
it); an aggregation (``count``, ``sum``, ``reduce``, ``aggregate``) is a table; and
``table.to_stream()`` is the stream of a table's changes: its changelog, where every commit
writes the keys that changed since the last one (Kafka Streams' record cache does the same).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamkit._core.errors import ConfigError
from streamkit.streams import Event, Stream
from streamkit.tables.errors import TableError
from streamkit.tables.partition import MISSING, SortedPartition
from streamkit.tables.table import Table
from streamkit.topics import Topic
from streamkit.windows.spec import WindowSpec
from streamkit.windows.wtable import WindowedTable

if TYPE_CHECKING:
    from streamkit.app import App

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


Node = Source | Map | GroupBy | Join | Aggregate | WindowedAggregate | TableJoin | Sink
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
        self, table: KTable | Table, joiner: Callable[[Any, Any], Any], *, how: str = "inner",
        key: Callable[[Any], Any] | None = None,
    ) -> KStream:
        """Each record joined with ``table``'s current value for its key (the table must be
        co-partitioned with the stream: same key, same partition count). ``how="inner"`` drops
        a record whose key the table lacks; ``"left"`` passes ``None`` for it. With a global
        table, ``key=fn`` looks up ``fn(value)`` instead (Kafka Streams' GlobalKTable join)."""
        if how not in JOIN_KINDS:
            raise ConfigError(f"a stream-table join is one of {JOIN_KINDS}, not {how!r}")
        target = _table_of(table)
        if key is not None and not target.is_global:
            raise ConfigError(
                f"join(key=...) needs a global table: {target.name!r} is partitioned like its stream"
            )
        return self._then(Join(target, _plain(joiner, "join"), how, _plain(key, "join key") if key else None))

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
                        value={"window_start": window.start_ms, "window_end": window.end_ms, "value": window.value},
                    )
                late = step.late
                if late is not None:
                    await table.late_topic.send(
                        key=late.key,
                        value=value,
                        headers=[
                            ("streamkit.table", table.name),
                            ("streamkit.reason", late.reason),
                            ("streamkit.timestamp", str(late.ts_ms)),
                            ("streamkit.stream_time", str(late.stream_time_ms)),
                        ],
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
