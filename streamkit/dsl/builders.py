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
holding the user's functions and nothing of a runtime (``nodes.py``). Each pipeline is lowered
once, when declared, into a plan of stages (``plan.py``; ``app.plans``) that both runners
execute: the worker compiles each stage into an agent when it starts (so partition tasks,
repartitioning, commits, dead letters and tables work as for hand-written agents), and the
Spark backfill maps the same stages onto its jobs, with the same operators and folds
(``ops.py``).

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
it, and its tombstone is forwarded even for a key the table never held, as Kafka Streams'
toTable does); ``table.filter``/``table.map_values`` derive a table from a table's changes;
an aggregation (``count``, ``sum``, ``reduce``, ``aggregate``) is a table; and
``table.to_stream()`` is the stream of a table's changes: its changelog, where every commit
writes the keys that changed since the last one (Kafka Streams' record cache does the same).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from streamkit._core.errors import ConfigError
from streamkit.dsl.nodes import (
    Aggregate,
    GroupBy,
    Join,
    Map,
    Node,
    Pipeline,
    Sink,
    Source,
    StreamJoin,
    TableJoin,
    WindowedAggregate,
)
from streamkit.dsl.ops import rekeys
from streamkit.tables.table import Table
from streamkit.topics.topic import Topic, to_ms
from streamkit.windows.join import JOIN_KINDS as STREAM_JOIN_KINDS
from streamkit.windows.spec import Sliding, WindowSpec
from streamkit.windows.wtable import WindowedTable

if TYPE_CHECKING:
    from streamkit.app.application import App

JOIN_KINDS = ("inner", "left")
TABLE_JOIN_KINDS = ("inner", "left", "outer")


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

        def merge(a: Any, b: Any) -> Any:
            # Sessions are merged starting from the initializer's None: that is no value.
            return b if a is None else a if b is None else reducer(a, b)

        return self._aggregate(
            name, options, lambda: None,
            lambda agg, kv: kv[1] if agg is None else reducer(agg, kv[1]), merge,
        )

    def _aggregate(
        self, name: str, options: dict[str, Any], initializer: Callable[[], Any],
        adder: Callable[[Any, Any], Any], merger: Callable[[Any, Any], Any] | None,
    ) -> KWindowedTable:
        # Kafka Streams' sliding aggregation skips a record with a null value, before its
        # stream time (KStreamSlidingWindowAggregate.process); time and session windows
        # aggregate it (their processors skip only a null key).
        skip = _null_value if isinstance(self.spec, Sliding) else None
        table = self.app._declare_table(
            name, WindowedTable,
            {**options, "spec": self.spec, "initializer": initializer, "adder": adder, "merger": merger, "skip": skip},
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

    def filter(self, fn: Callable[[Any], Any], *, name: str | None = None, **options: Any) -> KTable:
        """A table of the keys whose value passes ``fn`` (Kafka Streams' ``KTable.filter``),
        updated with this table: a key that stops qualifying is deleted, and the deletion
        forwarded downstream; a deletion of a key that did not qualify forwards nothing.

        >>> import streamkit as sk
        >>> app = sk.App("docs-ktable-filter")
        >>> prices = app.stream(app.topic("prices", key_type=str, value_type=int)).to_table("prices")
        >>> dear = prices.filter(lambda v: v > 100, name="dear")
        >>> [type(node).__name__ for node in dear.pipeline], dear.table.name
        (['Source', 'Map', 'Aggregate'], 'dear')
        """
        keep = _plain(fn, "filter")
        return self._derive(name or f"{self.table.name}-filter", options, "filter",
                            lambda v: v if v is not None and keep(v) else None)

    def map_values(self, fn: Callable[[Any], Any], *, name: str | None = None, **options: Any) -> KTable:
        """A table of ``fn(value)`` per key (Kafka Streams' ``KTable.mapValues``), updated with
        this table; a deleted key stays deleted (``fn`` never sees a tombstone).

        >>> import streamkit as sk
        >>> app = sk.App("docs-ktable-map")
        >>> prices = app.stream(app.topic("prices", key_type=str, value_type=int)).to_table("prices")
        >>> cents = prices.map_values(lambda v: v * 100, name="cents")
        >>> cents.to_stream().nodes[0].topic.name
        'docs-ktable-map-cents-changelog'
        """
        change = _plain(fn, "map_values")
        return self._derive(name or f"{self.table.name}-map_values", options, "latest",
                            lambda v: None if v is None else change(v))

    def _derive(self, name: str, options: dict[str, Any], kind: str, fn: Callable[[Any], Any]) -> KTable:
        """A table computed from this table's changes, value by value (``None``: delete)."""
        source = Source(self.table.changelog_topic, self.table)
        options.setdefault("partitions", self.table.declared_partitions)
        return _aggregate(self.app, (source, Map("map_values", fn)), name, options, kind)

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
                    and not rekeys(pipeline[1:pipeline.index(node)]) and not rekeys(node.other[1:])
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


def _null_value(pair: tuple[Any, Any]) -> bool:
    return pair[1] is None


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
