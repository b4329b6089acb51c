"""A backfilled table's stream (its ``to_stream()`` topic): written as the worker's tasks would
send it, then the map/filter pipelines reading it run over it into their topics."""

from __future__ import annotations

from typing import Any

from streamkit._core.errors import ConfigError
from streamkit._core.order import stream_time_order, stream_times
from streamkit._core.partitioner import partition_for_key
from streamkit.app.application import App
from streamkit.dsl.nodes import (
    Aggregate,
    Map,
    Pipeline,
    Sink,
    Source,
    TableJoin,
    WindowedAggregate,
)
from streamkit.dsl.ops import runner
from streamkit.spark.access import LogAccess
from streamkit.spark.executors import OUTPUT, Row
from streamkit.spark.planning import agent_inputs
from streamkit.spark.writes import append, ensure_topic

# A record one worker task sends: (key bytes, value bytes, timestamp ms), in the order it sends.
Sent = tuple[bytes | None, bytes | None, int]


def downstream(app: App, topic: Any) -> list[Pipeline]:
    """The pipelines reading ``topic`` (a table's windows topic or changelog: its
    ``to_stream()``), which the backfill runs after writing it so their topics hold what a
    worker would have written; a clear error for anything reading it that the backfill cannot
    run (it moves the app's group past what it wrote)."""
    found = [p for p in app.topologies if isinstance(p[0], Source) and p[0].topic.name == topic.name]
    for pipeline in found:
        terminal = pipeline[-1]
        if not isinstance(terminal, Sink) or not all(isinstance(n, Map) for n in pipeline[1:-1]):
            what = terminal.table.name if isinstance(terminal, (Aggregate, WindowedAggregate, TableJoin)) else None
            raise ConfigError(
                f"topic {topic.name!r} (a table's stream) feeds "
                + (f"table {what!r}" if what else "a pipeline that is not a chain of map/filter into a topic")
                + ": the backfill writes that topic and runs only map/filter pipelines into a topic after it; "
                "backfill with --to-topic instead, or run that pipeline in a worker"
            )
    ours = {p[-1].topic.name for p in found if isinstance(p[-1], Sink)}
    others = sorted(name for name, inputs in agent_inputs(app).items() if name not in ours and topic.name in inputs)
    if others:
        raise ConfigError(
            f"topic {topic.name!r} (a table's stream) is also read by {others} of app {app.id!r}: the backfill "
            "writes it and moves the app's group past what it wrote, which would skip those records for them"
        )
    return found


def publish(app: App, access: LogAccess, topic: Any, tasks: list[list[Sent]], times: list[list[int]] | None = None) -> list[list[Sent]]:
    """Append what each task sends to ``topic`` as the worker's tasks would: each record to the
    partition of its key's hash (keyless ones spread), each task's records in its order. Where
    several tasks write one partition, their records come as a worker with
    ``max_task_drift_ms=0`` hands them out: the tasks' records in one timestamp merge, each
    partition getting its part of it (``_core/order.py``, ``stream_time_order``), by the
    stream time of the sending task at each record: ``times`` (per task, per record: the
    stream time of the partition the task reads, at the record it sent this for), else the
    largest timestamp the task sent so far (the task's stream time where it sends: a windowed
    task sends on a record that moves stream time, or that updates a window). What each
    partition now ends with, in order."""
    declared = app.topics.get(topic.name)
    partitions = (declared.partitions if declared is not None else None) or topic.partitions or app.topic_partitions
    count = ensure_topic(access, topic.name, partitions, topic.config)
    # partition -> (the sending task's stream time, task, position in the task, record)
    queues: dict[int, list[tuple[int, int, int, Sent]]] = {}
    spread = 0
    for t, sent in enumerate(tasks):
        now = times[t] if times is not None else stream_times([r[2] for r in sent])
        for n, record in enumerate(sent):
            if record[0] is None:
                p, spread = spread % count, spread + 1
            else:
                p = partition_for_key(record[0], count)
            queues.setdefault(p, []).append((now[n], t, n, record))
    by_partition: list[list[Sent]] = [
        [r[3] for r in stream_time_order(queues.get(p, []), key=lambda r: r[:3])] for p in range(count)
    ]
    rows: list[Row] = [(OUTPUT, p, k, v, ts, None) for p, sent in enumerate(by_partition) for k, v, ts in sent]
    if rows:
        append(access, topic.name, rows)
    return by_partition


def forward(app: App, access: LogAccess, topic: Any, pipelines: list[Pipeline], by_partition: list[list[Sent]]) -> dict[str, int]:
    """Run ``pipelines`` (map/filter chains into a topic, see ``downstream``) over what
    ``topic``'s partitions now end with, one task per partition as the worker runs them, and
    append their outputs; records written per topic."""
    key_loads, value_loads = topic.key_serde.loads, topic.value_serde.loads
    written: dict[str, int] = {}
    for pipeline in pipelines:
        sink = pipeline[-1]
        assert isinstance(sink, Sink)
        run = runner(tuple(pipeline[1:-1]))
        key_dumps, value_dumps = sink.topic.key_serde.dumps, sink.topic.value_serde.dumps
        tasks: list[list[Sent]] = []
        times: list[list[int]] = []  # the stream time of each task's partition, at what it sent
        for sent in by_partition:
            out: list[Sent] = []
            out_times: list[int] = []
            for (raw_key, raw_value, ts), now in zip(sent, stream_times([r[2] for r in sent]), strict=True):
                key = key_loads(raw_key) if raw_key is not None else None
                value = value_loads(raw_value) if raw_value is not None else None
                for k, v in run(key, value):
                    out.append((key_dumps(k) if k is not None else None, value_dumps(v) if v is not None else None, ts))
                    out_times.append(now)
            tasks.append(out)
            times.append(out_times)
        publish(app, access, sink.topic, tasks, times)
        written[sink.topic.name] = written.get(sink.topic.name, 0) + sum(len(t) for t in tasks)
    return written


def table_stream_topic(app: App, pipeline: Pipeline) -> Any:
    """The topic a worker writes the table's ``to_stream()`` to, when the app asked for it: a
    windowed table's windows topic, or a plain table's changelog when a pipeline reads it."""
    terminal = pipeline[-1]
    if isinstance(terminal, WindowedAggregate):
        return terminal.table.emitted_topic
    assert isinstance(terminal, Aggregate)
    changelog = terminal.table.changelog_topic
    readers = [p for p in app.topologies if isinstance(p[0], Source) and p[0].topic.name == changelog.name]
    return changelog if readers else None
