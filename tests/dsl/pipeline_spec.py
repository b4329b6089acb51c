"""Declarative pipelines built from a JSON spec, for the differential test of the DSL's two
runners (``test_differential.py``).

A spec names its functions from fixed menus (below), so it is plain data: the test writes it
into a generated module (``app = build(SPEC, BROKER)``) that the worker imports in the test
process and the Spark backfill imports again, by reference, on its executors. This module is
copied beside the generated ones, so it imports nothing from ``tests``.

A spec (every key present)::

    {"partitions": 1 or 2,                  # the source topic's
     "before": [[kind, name], ...],         # operators before the grouping (MENUS[kind])
     "group": null | ["key"] | ["by", name],  # group_by_key() or group_by(GROUP_BY[name])
     "window": null | [kind, seconds...],   # WINDOWS[kind](*seconds)
     "agg": [kind, name],                   # "count", "sum", "reduce", "aggregate", "latest"
     "stream": null | {"emit": "update" | "close", "ops": [[kind, name], ...], "partitions": n}}

and optionally ``"expires": seconds``, the windowed table's ``expires=`` (its store's retention).

``group`` null and ``agg`` "latest" is ``to_table``; ``stream`` is ``to_stream(...)`` through
``ops`` into the topic ``out``. Every function takes ``None`` values (tombstones) in stride.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import streamkit as sk
from streamkit.windows import Hopping, Session, Sliding, Tumbling

APP_ID = "diff"
SOURCE = "events"
OUT = "out"
TABLE = "result"


def _num(v: Any) -> int:
    return 0 if v is None else int(v)


# Operators on the source's values (int or None) and keys (str), by kind and name.
MENUS: dict[str, dict[str, Callable[..., Any]]] = {
    "filter": {
        "even": lambda v: v is not None and v % 2 == 0,
        "not_none": lambda v: v is not None,
        "small": lambda v: v is None or v < 6,
    },
    "map_values": {
        "inc": lambda v: None if v is None else v + 1,
        "halve": lambda v: None if v is None else v // 2,
    },
    "map": {  # re-keys
        "first": lambda k, v: (k[:1], v),
        "by_value": lambda k, v: (k if v is None else f"v{v % 3}", v),
    },
    "flat_map": {  # re-keys
        "fan": lambda k, v: [(k, v), (k[:1], v)],
        "drop_none": lambda k, v: [] if v is None else [(k, v)],
    },
    "flat_map_values": {
        "twice": lambda v: [v, v],
        "upto": lambda v: [] if v is None else [v] * (v % 3),
    },
}
VALUE_KINDS = ("filter", "map_values", "flat_map_values")  # the operators that keep keys
GROUP_BY: dict[str, Callable[[Any], Any]] = {
    "parity": lambda v: "none" if v is None else ("even" if v % 2 == 0 else "odd"),
    "mod3": lambda v: "m" if v is None else f"m{v % 3}",
}
# name -> (function, commutes?): reducers, and aggregators as (initializer, adder, merger)
REDUCERS: dict[str, tuple[Callable[[Any, Any], Any], bool]] = {
    "add": (lambda a, b: _num(a) + _num(b), True),
    "digits": (lambda a, b: (_num(a) * 3 + _num(b)) % 1000, False),
}
AGGREGATORS: dict[str, tuple[Callable[[], Any], Callable[[Any, Any, Any], Any], Callable[[Any, Any, Any], Any], bool]] = {
    "add": (int, lambda _k, v, agg: agg + _num(v), lambda _k, a, b: a + b, True),
    "append": (list, lambda _k, v, agg: [*agg, v], lambda _k, a, b: [*a, *b], False),
}
SUMS: dict[str, Callable[[Any], Any] | None] = {"plain": None, "or0": _num}
WINDOWS: dict[str, Callable[..., Any]] = {
    "tumbling": Tumbling,  # (size, grace)
    "hopping": Hopping,  # (size, step, grace)
    "sliding": Sliding,  # (max_difference, grace)
    "session": Session,  # (gap, grace)
}
# Operators over a table's stream: windows ({"window_start", "window_end", "value"}) or a
# plain table's changes (a value, None for a deleted key).
STREAM_MENUS: dict[str, dict[str, Callable[..., Any]]] = {
    "filter": {"present": lambda v: v is not None},
    "map_values": {"text": lambda v: json.dumps(v, sort_keys=True)},
    "map": {"first": lambda k, v: (k if k is None else k[:1], v)},
}


def build(spec: dict[str, Any], broker: str, *, into: Any = None, prefix: str = "") -> Any:
    """The app ``spec`` describes, on ``broker``: its one table is ``TABLE``.

    ``into``: declare the pipeline in that app instead of a new one, its topics and table
    named ``prefix`` + ``SOURCE``/``TABLE``/``OUT`` (the oracle runs many cases in one app,
    each in its own topics, so its own tasks and stream time), and answer the table."""
    app = sk.App(APP_ID, broker=broker) if into is None else into
    source = app.topic(prefix + SOURCE, key_type=str, value_type=int, partitions=spec["partitions"])
    stream = app.stream(source)
    for kind, name in spec["before"]:
        stream = getattr(stream, kind)(MENUS[kind][name])
    kind, name = spec["agg"]
    if spec["group"] is None:
        assert kind == "latest" and spec["window"] is None
        table = stream.to_table(prefix + TABLE)
    else:
        grouped = stream.group_by_key() if spec["group"] == ["key"] else stream.group_by(GROUP_BY[spec["group"][1]])
        if spec["window"] is not None:
            wkind, *seconds = spec["window"]
            windowed = grouped.window(WINDOWS[wkind](*seconds))
            options = {"expires": spec["expires"]} if spec.get("expires") is not None else {}
            if kind == "count":
                table = windowed.count(prefix + TABLE, **options)
            elif kind == "reduce":
                table = windowed.reduce(prefix + TABLE, REDUCERS[name][0], **options)
            else:
                initializer, adder, merger, _ = AGGREGATORS[name]
                table = windowed.aggregate(prefix + TABLE, initializer, adder, merger, **options)
        elif kind == "count":
            table = grouped.count(prefix + TABLE)
        elif kind == "sum":
            table = grouped.sum(prefix + TABLE, SUMS[name])
        elif kind == "reduce":
            table = grouped.reduce(prefix + TABLE, REDUCERS[name][0])
        else:
            initializer, adder, _merger, _ = AGGREGATORS[name]
            table = grouped.aggregate(prefix + TABLE, initializer, adder)
    out = spec["stream"]
    if out is not None:
        changes = table.to_stream(emit=out["emit"]) if spec["window"] is not None else table.to_stream()
        for op_kind, op_name in out["ops"]:
            changes = getattr(changes, op_kind)(STREAM_MENUS[op_kind][op_name])
        changes.to(app.topic(prefix + OUT, key_type=str, partitions=out["partitions"]))
    if into is None:
        app.result = table  # type: ignore[attr-defined]
        return app
    return table
