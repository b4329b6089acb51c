"""The DSL's plans compiled into agents, when a worker starts (``install_plans``).

Each stage of a plan (``dsl/plan.py``) becomes one agent: its inputs are the agent's topics,
so partition tasks, commits, dead letters and tables work as for hand-written agents. The
operators and folds are the DSL's own (``dsl/ops.py``), the ones the Spark backfill runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamkit._core.context import current_event
from streamkit._core.errors import ConfigError
from streamkit._core.serde import Serde
from streamkit.agents.agent import Agent
from streamkit.agents.stream import Event, Stream
from streamkit.dsl.joinstate import JoinState
from streamkit.dsl.nodes import Aggregate, Map, Node, Sink, TableJoin, WindowedAggregate
from streamkit.dsl.ops import Pairs, fold_step, runner, skips
from streamkit.dsl.plan import JoinOutput, JoinSide, Stage
from streamkit.tables.errors import TableError
from streamkit.tables.partition import MISSING, SortedPartition
from streamkit.windows.join import WindowJoin
from streamkit.windows.records import late_headers, window_body
from streamkit.windows.wtable import WindowedTable, late_counter

if TYPE_CHECKING:
    from streamkit.app.application import App


def install_plans(app: App) -> None:
    """Compile every stage of ``app``'s plans into an agent of the app (once per app: a second
    worker over the same app finds them there)."""
    for plan in app.plans:
        for stage in plan.stages:
            if stage.name in app.agents:
                continue
            fn = compile_stage(stage)
            fn.__name__ = stage.name
            app.agents[stage.name] = Agent(app, fn, stage.inputs, name=stage.name, sinks=stage.sinks)


def compile_stage(stage: Stage) -> Callable[[Stream], Any]:
    """The agent function running ``stage``."""
    output = stage.output
    if isinstance(output, TableJoin):
        return _table_join(output)
    if isinstance(output, JoinOutput):
        return _join_streams(output)
    nodes = stage.ops
    if stage.key_by is not None:
        key_by = stage.key_by
        nodes = (*nodes, Map("map", lambda k, v: (key_by(v), v)))
    run = runner(nodes)
    if isinstance(output, Sink):
        async def forward(stream: Stream) -> Any:
            # The worker sends what an agent yields with the current event's key and
            # timestamp: set the key of each output on the event before yielding it.
            async for event in stream.events():
                for key, value in run(event.key, event.value):
                    event.key = key
                    yield value

        return forward
    if isinstance(output, WindowedAggregate):
        output.table.late.sources.update(topic.name for topic in stage.inputs)  # named by its warning
        return _windowed_agent(output.table, run)
    if isinstance(output, Aggregate):
        apply = _aggregator(output)

        async def aggregate(stream: Stream) -> None:
            async for event in stream.events():
                for key, value in run(event.key, event.value):
                    apply(key, value)

        return aggregate
    raise ConfigError(f"a pipeline ends in a sink or a table, not {type(output).__name__}")


def _aggregator(node: Aggregate) -> Callable[[Any, Any], None]:
    """The fold of ``node`` applied to its table, record by record. A record an aggregation
    skips (``ops.skips``: no key or value) is counted on ``/status`` (``late_records``, by
    reason ``null-key``/``null-value``), as Kafka Streams counts it in dropped-records. A
    deletion: ``to_table`` deletes even a key it does not hold (Kafka Streams' toTable
    forwards it; with the table's cache on, the commit sends no tombstone for a key absent
    before and after, as Kafka Streams' cache flush); ``KTable.filter`` only a key it holds
    (its result is materialized: a key that never qualified has nothing to delete)."""
    table, kind, step = node.table, node.kind, fold_step(node.kind, node.fn, node.initializer)
    get, pop, tombstone, set_at, stamp_of = table.get, table.pop, table.tombstone, table.set_at, table.timestamp_of
    dropped = late_counter(table.app, table.name) if skips(kind, None, None) else None
    forward_deletes = kind == "latest"

    def apply(key: Any, value: Any) -> None:
        if dropped is not None and (key is None or value is None):
            dropped.add("null-key" if key is None else "null-value")
            return
        new = step(get(key, MISSING), key, value)
        if new is not MISSING:
            event = current_event.get()
            ts = event.timestamp if event is not None else None
            if dropped is not None and ts is not None:
                # An aggregate is stamped with the largest timestamp behind it, as Kafka
                # Streams' KStreamAggregate/KStreamReduce do (a table's kinds: the record's).
                before = stamp_of(key)
                ts = ts if before is None else max(ts, before)
            if ts is None:
                table[key] = new
            else:
                set_at(key, new, ts)
        elif forward_deletes:
            tombstone(key)
        else:
            pop(key, None)

    return apply


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
                        key=key_loads(window.key), value=window_body(window.start_ms, window.end_ms, window.value),
                        timestamp=window.ts_ms,
                    )
                late = step.late
                if late is not None:
                    await table.late_topic.send(
                        key=late.key,
                        value=value,
                        headers=late_headers(table.name, late.reason, late.ts_ms, late.stream_time_ms),
                    )

    return aggregate_windows


def _side_runner(side: JoinSide) -> Callable[[Any, Any], Pairs]:
    run = runner(side.ops)
    if not side.through:
        return run
    # Stored values come back through JSON: so does the record in hand, so the joiner sees
    # one type whichever side came first.
    serde: Serde = side.value_serde
    dumps, loads = serde.dumps, serde.loads

    def run_through(key: Any, value: Any) -> Pairs:
        return [(k, v if v is None else loads(dumps(v))) for k, v in run(key, value)]

    return run_through


def _join_streams(output: JoinOutput) -> Callable[[Stream], Any]:
    """The agent joining both sides: each record through its side's operators, into the join
    driver of its partition; each result through the joiner and the operators after the join,
    to the sink topic (with the result's timestamp) or the table."""
    state_table: JoinState = output.state
    joiner = state_table.join.joiner
    run_left, run_right = _side_runner(output.left), _side_runner(output.right)
    left_name, right_name = output.left.topic.name, output.right.topic.name
    key_dumps, key_loads = state_table.join_key_serde.dumps, state_table.join_key_serde.loads
    late_topic = state_table.late_topic
    late_counter = state_table.late
    late_counter.sources.update((left_name, right_name))  # named by its warning
    after: tuple[Node, ...] = output.after
    if output.key_by is not None:
        key_by = output.key_by
        after = (*after, Map("map", lambda k, v: (key_by(v), v)))
    run_after = runner(after)
    terminal = output.terminal
    if isinstance(terminal, Sink):
        sink = terminal.topic

        def emit(key: Any, value: Any, ts: int) -> None:
            for k, v in run_after(key, value):
                sink.send_soon(key=k, value=v, timestamp=ts)
    else:
        apply = _aggregator(terminal)

        def emit(key: Any, value: Any, ts: int) -> None:
            for k, v in run_after(key, value):
                apply(k, v)

    def set_aside(side: str, raw_key: bytes | None, value: Any, ts: int, reason: str, now: int) -> None:
        late_counter.late(reason, ts, now)
        late_topic.send_soon(
            key=raw_key, value=value, timestamp=ts, headers=late_headers(state_table.name, reason, ts, now, side=side)
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
                        # It still moves the join's stream time, and an outer side's record
                        # with a value but no key is emitted unpaired (KStreamKStreamJoin).
                        driver.skip(ts)
                        if value is not None and driver.is_outer(side):  # type: ignore[arg-type]
                            emit(key, joiner(value, None) if side == "left" else joiner(None, value), ts)
                        else:
                            reason = "null-key" if raw_key is None else "null-value"
                            set_aside(side, raw_key, value, ts, reason, driver.stream_time.ms)
                        late_counter.seen()
                        continue
                    step = driver.process(side, raw_key, ts, value)  # type: ignore[arg-type]
                    for result in step.results:
                        out_key = key if result.key == raw_key else key_loads(result.key)
                        emit(out_key, joiner(result.left, result.right), result.ts_ms)
                    late = step.late
                    if late is not None:
                        set_aside(side, raw_key, value, ts, late.reason, late.stream_time_ms)
                    late_counter.seen()

    return join_streams


def _table_join(node: TableJoin) -> Callable[[Stream], Any]:
    left, right, joiner, how, result = node.left, node.right, node.joiner, node.how, node.table
    left_topic = left.changelog_topic.name

    def update(event: Event) -> None:
        key = event.key
        from_left = event.topic == left_topic
        if from_left:
            lv, rv = event.value, right.get(key)
        else:
            lv, rv = left.get(key), event.value
        new, other = (lv, rv) if from_left else (rv, lv)
        # Kafka Streams' KTableKTable{Inner,Left,Right,Outer}Join: an update of one side is
        # forwarded unless the other side lacks the key and: always (inner, and the right side
        # of a left join), or (outer, the left side of a left join) the update deletes a key
        # this side did not hold either (then the result, which holds a row for each key this
        # side holds, lacks it). So the same row again is forwarded, and a tombstone for a key
        # the result never held.
        if other is None and (
            how == "inner" or (how == "left" and not from_left) or (new is None and key not in result)
        ):
            return
        if how == "inner":
            keep = lv is not None and rv is not None
        elif how == "left":
            keep = lv is not None
        else:
            keep = lv is not None or rv is not None
        # Stamped with the larger of both sides' timestamps (the other side's, when known).
        ts = event.timestamp
        other_ts = (right if from_left else left).timestamp_of(key) if other is not None else None
        if other_ts is not None and other_ts > ts:
            ts = other_ts
        if keep:
            result.set_at(key, joiner(lv, rv), ts)
        else:
            result.tombstone(key, ts)

    async def join_tables(stream: Stream) -> None:
        async for event in stream.events():
            update(event)

    return join_tables
