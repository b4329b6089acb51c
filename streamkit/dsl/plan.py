"""A pipeline lowered into the plan both runners execute: stages, with every decision made once.

    >>> import streamkit as sk
    >>> app = sk.App("docs-plan")
    >>> views = app.topic("views", key_type=str, value_type=dict, partitions=4)
    >>> _ = app.stream(views).group_by(lambda v: v["user"], name="user").count("per_user")
    >>> plan = app.plans[-1]
    >>> [(s.name, [t.name for t in s.inputs]) for s in plan.stages]
    [('per_user-user', ['views']), ('per_user', ['docs-plan-per_user-user-repartition'])]
    >>> hop = plan.repartitions[0]
    >>> hop.topic.partitions, hop.like.name
    (4, 'views')

A plan is data, made when the app is declared (``App._register_pipeline``): each stage is one
sub-topology, as Kafka Streams cuts a topology at its repartition topics, and says what it
reads, which operators run on each record (``ops``, then a ``group_by``'s ``key_by``), and
where the results go (``output``: a topic, a table's fold, a window aggregation, a join). The
internal topics it needs (repartition topics, with their serializers and partition count) and
a stream-stream join's state table are declared on the app here, once. The worker compiles the
stages into agents when it starts (``runtime/stages.py``); the Spark backfill maps the same
stages onto its jobs (``spark/backfill.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamkit._core.errors import ConfigError
from streamkit._core.serde import Serde, serde_for
from streamkit.dsl.joinstate import JoinState
from streamkit.dsl.nodes import (
    Aggregate,
    GroupBy,
    Node,
    Pipeline,
    Sink,
    Source,
    StreamJoin,
    TableJoin,
    WindowedAggregate,
)
from streamkit.dsl.ops import REPARTITION_KEY_SERDE, rekeys, retypes
from streamkit.topics.topic import Topic

if TYPE_CHECKING:
    from streamkit.app.application import App


@dataclass(frozen=True, slots=True)
class Repartition:
    """A topic one stage writes, keyed by its group, and the next reads: created with
    ``topic.partitions``, or (undeclared) with as many partitions as ``like`` has, the stage's
    source (Kafka Streams' rule)."""

    topic: Topic
    like: Topic


@dataclass(frozen=True, slots=True)
class JoinSide:
    """One input of a windowed stream-stream join: the topic the join stage reads (the side's
    source, or its repartition topic), the operators it runs there, and how its values are
    stored in the join state (``through``: values the operators retyped come back through
    JSON, as the stored ones do, so the joiner sees one type whichever side came first)."""

    topic: Topic
    ops: tuple[Node, ...]
    value_serde: Serde
    through: bool


@dataclass(frozen=True, slots=True)
class JoinOutput:
    """A join stage's output: ``state`` (the join's table), both sides, and what happens to
    each joined record: ``after`` operators, a group's ``key_by``, then ``terminal``."""

    state: JoinState
    left: JoinSide
    right: JoinSide
    after: tuple[Node, ...]
    key_by: Callable[[Any], Any] | None
    terminal: Sink | Aggregate


Output = Sink | Aggregate | WindowedAggregate | TableJoin | JoinOutput


@dataclass(frozen=True, slots=True)
class Stage:
    """One sub-topology, run by the worker as one agent named ``name``: each record of
    ``inputs`` through ``ops`` and then, after a ``group_by``, re-keyed by ``key_by(value)``,
    into ``output``."""

    name: str
    inputs: tuple[Topic, ...]
    ops: tuple[Node, ...]
    key_by: Callable[[Any], Any] | None
    output: Output

    @property
    def sinks(self) -> list[Topic]:
        output = self.output
        if isinstance(output, JoinOutput):
            output = output.terminal
        return [output.topic] if isinstance(output, Sink) else []

    @property
    def writes(self) -> list[Topic]:
        """The topics the stage writes records of its own to: its sinks, and the windows
        topic of a windowed table whose ``to_stream`` was asked for."""
        output = self.output
        if isinstance(output, WindowedAggregate) and output.table.emitted_topic is not None:
            return [*self.sinks, output.table.emitted_topic]
        return self.sinks


@dataclass(frozen=True, slots=True)
class Plan:
    """The stages of the pipeline named ``name``, in order: each writes what the next reads."""

    name: str
    pipeline: Pipeline
    stages: tuple[Stage, ...]
    repartitions: tuple[Repartition, ...]

    @property
    def source(self) -> Source:
        source = self.pipeline[0]
        assert isinstance(source, Source)
        return source

    @property
    def terminal(self) -> Node:
        return self.pipeline[-1]


def lower(app: App, pipeline: Pipeline, name: str) -> Plan:
    """The plan of ``pipeline`` (named after its table or sink topic).

    A pipeline without ``group_by`` is one stage. One with it is two, as Kafka Streams splits
    a topology at a repartition topic: the first runs the operators before the grouping and
    writes each record keyed by its group to ``<app>-<name>-<by>-repartition`` (placed by the
    key's hash, like any keyed record); the second reads that topic, runs the rest and
    aggregates, so each key meets one partition.
    """
    source = pipeline[0]
    if not isinstance(source, Source):
        raise ConfigError("a pipeline starts at a source")
    terminal = pipeline[-1]
    middle = pipeline[1:-1]
    if isinstance(terminal, TableJoin):
        inputs = (terminal.left.changelog_topic, terminal.right.changelog_topic)
        return Plan(name, pipeline, (Stage(name, inputs, (), None, terminal),), ())
    if not isinstance(terminal, (Sink, Aggregate, WindowedAggregate)):
        raise ConfigError(f"a pipeline ends in a sink or a table, not {type(terminal).__name__}")
    at = next((i for i, n in enumerate(middle) if isinstance(n, StreamJoin)), None)
    if at is not None:
        return _lower_stream_join(app, pipeline, name, at)
    split = next((i for i, n in enumerate(middle) if isinstance(n, GroupBy)), None)
    if split is None:
        return Plan(name, pipeline, (Stage(name, (source.topic,), middle, None, terminal),), ())
    group = middle[split]
    assert isinstance(group, GroupBy)
    after = middle[split + 1 :]
    if any(isinstance(n, GroupBy) for n in after):
        raise ConfigError("a pipeline groups once: aggregate, then start from the table's stream")
    before = middle[:split]
    repartition = app.topic(
        repartition_topic_name(app.id, name, group.name),
        key_serializer=REPARTITION_KEY_SERDE,
        # Values keep the source's serializer unless an operator may have changed their type.
        value_serializer="json" if retypes(before) else source.topic.value_serde,
        partitions=source.topic.partitions,
        repartition=True,
    )
    first = Stage(f"{name}-{group.name}", (source.topic,), before, group.fn, Sink(repartition))
    second = Stage(name, (repartition,), after, None, terminal)
    return Plan(name, pipeline, (first, second), (Repartition(repartition, source.topic),))


def repartition_topic_name(app_id: str, name: str, group: str) -> str:
    return f"{app_id}-{name}-{group}-repartition"


def _lower_stream_join(app: App, pipeline: Pipeline, name: str, at: int) -> Plan:
    """The stages of a pipeline with a windowed stream-stream join (``middle[at]``).

    The join runs as one stage reading both sides' topics: the worker gives partition p of
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
    moves = {side: rekeys(ops) for side, (_src, ops) in sides.items()}
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
        count, key_serde, like = kept_topic.partitions, kept_topic.key_serde, kept_topic
    else:
        declared = [c for c in counts.values() if c is not None]
        count, key_serde, like = (max(declared) if declared else None), sides["left"][0].topic.key_serde, source.topic
        if len(stay) == 0:
            key_serde = serde_for(REPARTITION_KEY_SERDE, None)
    stages: list[Stage] = []
    hops: list[Repartition] = []
    joined: dict[str, JoinSide] = {}
    for side, (src, ops) in sides.items():
        value_serde = serde_for("json", None) if retypes(ops) else src.topic.value_serde
        if not moves[side]:
            joined[side] = JoinSide(src.topic, tuple(ops), value_serde, retypes(ops))
            continue
        hop = app.topic(
            f"{app.id}-{name}-{join.name}-{side}-repartition",
            key_serializer=key_serde, value_serializer=value_serde, partitions=count, repartition=True,
        )
        stages.append(Stage(f"{name}-{join.name}-{side}", (src.topic,), tuple(ops), None, Sink(hop)))
        hops.append(Repartition(hop, like))
        joined[side] = JoinSide(hop, (), value_serde, False)
    state = app._declare_table(
        f"{name}-{join.name}", JoinState,
        {"join": join, "key_serde": key_serde, "left_serde": joined["left"].value_serde,
         "right_serde": joined["right"].value_serde},
    )
    assert isinstance(state, JoinState)
    inputs = (joined["left"].topic,) if joined["left"].topic.name == joined["right"].topic.name else (
        joined["left"].topic, joined["right"].topic
    )
    split = next((i for i, n in enumerate(after) if isinstance(n, GroupBy)), None)
    if split is None and isinstance(terminal, (Sink, Aggregate)):
        output = JoinOutput(state, joined["left"], joined["right"], tuple(after), None, terminal)
        stages.append(Stage(name, inputs, (), None, output))
        return Plan(name, pipeline, tuple(stages), tuple(hops))
    if split is not None:
        group = after[split]
        assert isinstance(group, GroupBy)
        if any(isinstance(n, GroupBy) for n in after[split + 1 :]):
            raise ConfigError("a pipeline groups once: aggregate, then start from the table's stream")
        before, rest, key_by = after[:split], after[split + 1 :], group.fn
        hop = app.topic(
            repartition_topic_name(app.id, name, group.name), key_serializer=REPARTITION_KEY_SERDE,
            value_serializer="json", partitions=count, repartition=True,
        )
    else:
        before, rest, key_by = (), after, None
        hop = app.topic(
            f"{app.id}-{name}-{join.name}-joined", key_serializer=REPARTITION_KEY_SERDE,
            value_serializer="json", partitions=count, repartition=True,
        )
    hops.append(Repartition(hop, like))
    output = JoinOutput(state, joined["left"], joined["right"], tuple(before), key_by, Sink(hop))
    stages.append(Stage(f"{name}-{join.name}", inputs, (), None, output))
    assert isinstance(terminal, (Sink, Aggregate, WindowedAggregate))
    stages.append(Stage(name, (hop,), tuple(rest), None, terminal))
    return Plan(name, pipeline, tuple(stages), tuple(hops))
