"""The DSL's nodes: a pipeline (``app.stream(...)...``) as plain data, a tuple of frozen nodes
from a ``Source`` to a terminal (``Sink`` to a topic, ``Aggregate``/``WindowedAggregate`` into
a table, ``TableJoin``), holding the user's functions and nothing of a runtime. ``plan.py``
lowers a pipeline into the stages both runners execute."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamkit.tables.table import Table
from streamkit.topics.topic import Topic
from streamkit.windows.wtable import WindowedTable


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
    "aggregate" (``fn(key, value, aggregate)`` from ``initializer()``), "latest" (to_table,
    KTable.map_values: ``None`` deletes, its tombstone always forwarded) or "filter"
    (KTable.filter: ``None`` deletes a key the table holds)."""

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
