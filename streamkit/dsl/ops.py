"""What the DSL's nodes do to records, defined once for both runners: the per-record operators
(``runner``: maps, flat maps, filters, stream-table joins) and the folds of an aggregation
(``fold_step``: count, sum, reduce, aggregate, latest). The worker applies them record by
record (``runtime/stages.py``); the Spark backfill calls the same functions on its executors.

    >>> from streamkit.dsl.nodes import Map
    >>> run = runner((Map("flat_map_values", lambda v: [v, v * 10]), Map("filter", lambda v: v > 1)))
    >>> run("k", 1)
    [('k', 10)]
    >>> step = fold_step("sum", None, None)
    >>> fold(step, "k", [1, 2, 3])
    (True, 6)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit.dsl.nodes import Join, Map, Node, StreamJoin
from streamkit.tables.partition import MISSING

Pairs = list[tuple[Any, Any]]
# A fold's step: the new aggregate of ``key`` from the current one (``MISSING``: none yet) and
# a value; ``MISSING`` back deletes the key (``latest`` of a ``None`` value, a tombstone).
Step = Callable[[Any, Any, Any], Any]

REPARTITION_KEY_SERDE = "json"  # how repartition topics encode keys (both runners hash these bytes)


def rekeys(nodes: Iterable[Node]) -> bool:
    """Whether ``nodes`` may change records' keys (so their partition no longer fits them)."""
    return any(isinstance(n, Map) and n.kind in ("map", "flat_map") for n in nodes)


def retypes(nodes: Iterable[Node]) -> bool:
    """Whether ``nodes`` may change values' type (so the source's serializer may not fit)."""
    return any(isinstance(n, (Join, StreamJoin)) or (isinstance(n, Map) and n.kind != "filter") for n in nodes)


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


def fold_step(kind: str, fn: Callable[..., Any] | None, initializer: Callable[[], Any] | None) -> Step:
    """The step of an aggregation of ``kind`` ("count", "sum" of ``fn(value)`` or the value,
    "reduce" with ``fn(aggregate, value)``, "aggregate" with ``fn(key, value, aggregate)`` from
    ``initializer()``, "latest" and "filter": the value, ``None`` deleting the key). A stream
    aggregation skips records without a key or value before its step (``skips``)."""
    if kind == "count":
        return lambda current, key, value: (0 if current is MISSING else current) + 1
    if kind == "sum":
        if fn is None:
            return lambda current, key, value: (0 if current is MISSING else current) + value
        add = fn
        return lambda current, key, value: (0 if current is MISSING else current) + add(value)
    if kind == "reduce":
        if fn is None:
            raise ConfigError("reduce needs a function")
        reduce = fn
        return lambda current, key, value: value if current is MISSING else reduce(current, value)
    if kind == "aggregate":
        if fn is None or initializer is None:
            raise ConfigError("aggregate needs an initializer and an adder")
        adder, init = fn, initializer
        return lambda current, key, value: adder(key, value, init() if current is MISSING else current)
    if kind in ("latest", "filter"):
        return lambda current, key, value: MISSING if value is None else value
    raise ConfigError(f"unknown aggregation {kind!r}")


TABLE_KINDS = ("latest", "filter")  # the folds that keep the latest value: None deletes


def skips(kind: str, key: Any, value: Any) -> bool:
    """Whether an aggregation of ``kind`` skips a record: count, sum, reduce and aggregate
    skip a record with a ``None`` key or value, as Kafka Streams' ``KStreamAggregate`` and
    ``KStreamReduce`` do (counted as dropped); a table's kinds take ``None`` as a deletion.

    >>> skips("count", "k", None), skips("count", None, 1), skips("latest", "k", None)
    (True, True, False)
    """
    return kind not in TABLE_KINDS and (key is None or value is None)


def fold(step: Step, key: Any, values: Iterable[Any]) -> tuple[bool, Any]:
    """(present?, aggregate) after folding ``values`` (in a task's order) with ``step`` from
    no aggregate: what the table holds for ``key`` afterwards."""
    current: Any = MISSING
    for value in values:
        current = step(current, key, value)
    return current is not MISSING, None if current is MISSING else current
