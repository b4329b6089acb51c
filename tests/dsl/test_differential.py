"""The declarative DSL has one meaning in both of its runners: for generated pipelines and
inputs, the worker (``AppDriver`` on the embedded log) and the Spark backfill over the same
history give the same table and write the same records to the table's stream and the topics
after it.

Hypothesis draws a pipeline (``pipeline_spec``: map, flat_map, map_values, flat_map_values and
filter, then group_by or group_by_key (none for to_table); count, sum, reduce, aggregate or
to_table; tumbling, hopping, sliding or session windows; ``to_stream(emit="update"|"close")``
through map/filter into a topic) and a history of a few keys, small values, tombstones
(``None``) and timestamps out of order, some beyond the grace. The history is loaded into a
log and copied; a worker processes one copy; the backfill recomputes the table over the other,
and a worker started there afterwards serves what it wrote. Compared: the table's contents,
and per topic partition and key the records (value, timestamp, headers) of the output topic,
the windows topic and the late topic. Kafka orders records per key, so that is what must
agree; how the records of several tasks interleave in one partition is the runtime's timing,
in both runners.

Where the worker's own answer depends on timing (after a repartition of several source
partitions its task takes them in an order the upstream tasks' timing decides), the generator
keeps to what does not: what depends on order (windows, reducers that do not commute, a
table's stream, stamped with each key's last record) after a repartition reads a source of
one partition.

The differences found are pinned by ``test_known_difference_*`` (strict xfail: each fails
until the runners agree, then says so), and the property test steps around exactly those.
Joins are not generated: the backfill refuses them by name
(``test_the_backfill_refuses_joins_by_name``).

Examples: ``STREAMKIT_DIFF_EXAMPLES`` (default 300, about 2-3 minutes on two cores; set it
higher for a longer search, e.g. ``STREAMKIT_DIFF_EXAMPLES=2000``). Every example and test
here shares the test session's one SparkSession (the ``spark`` fixture of
``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import streamkit as sk
from streamkit.testing import AppDriver
from tests.dsl import pipeline_spec as ps

HERE = Path(__file__).resolve().parent
EXAMPLES = int(os.environ.get("STREAMKIT_DIFF_EXAMPLES", "300"))
BASE = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a round minute
KEYS = ["a1", "a2", "b1", "b2", "c"]
_modules = itertools.count()

pytestmark = pytest.mark.spark


# -- what is generated ----------------------------------------------------------------------------


def _rekeys(ops: list[list[str]]) -> bool:
    return any(kind in ("map", "flat_map") for kind, _ in ops)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    op = st.sampled_from([[kind, name] for kind, menu in ps.MENUS.items() for name in menu])
    before = draw(st.lists(op, max_size=3))
    window = None if draw(st.booleans()) else draw(st.one_of(
        st.tuples(st.just("tumbling"), st.sampled_from([5, 10]), st.sampled_from([0, 3])).map(list),
        st.tuples(st.just("hopping"), st.just(10), st.sampled_from([5, 4]), st.sampled_from([0, 3])).map(list),
        st.tuples(st.just("sliding"), st.sampled_from([3, 5]), st.sampled_from([0, 2])).map(list),
        st.tuples(st.just("session"), st.sampled_from([2, 4]), st.sampled_from([0, 3])).map(list),
    ))
    nullable = not any(op == ["filter", "not_none"] or op == ["filter", "even"] for op in before)
    kinds = ["count", "reduce", "aggregate"] if window is not None else ["count", "sum", "reduce", "aggregate"]
    if window is None and not _rekeys(before):
        kinds.append("latest")  # to_table does not repartition: only over the source's keys
    kind = draw(st.sampled_from(kinds))
    if kind == "reduce" and nullable and window is not None:
        # KNOWN DIFFERENCE (test_known_difference_a_none_value_into_a_windowed_reduce): a None
        # value opening a window leaves a window nobody can read: windowed reduces get values
        # only. (Plain aggregations skip None values in both runners, as Kafka Streams.)
        before.append(["filter", "not_none"])
        nullable = False
    names = {
        "count": [""], "sum": ["plain", "or0"], "reduce": list(ps.REDUCERS),
        "aggregate": list(ps.AGGREGATORS), "latest": [""],
    }[kind]
    agg = [kind, draw(st.sampled_from(names))]
    group = None if kind == "latest" else draw(st.sampled_from([["key"], ["by", "parity"], ["by", "mod3"]]))
    stream = None
    if draw(st.booleans()):
        stream_op = st.sampled_from([[kind, name] for kind, menu in ps.STREAM_MENUS.items() for name in menu])
        stream = {
            "emit": draw(st.sampled_from(["update", "close"])) if window is not None else "update",
            "ops": draw(st.lists(stream_op, max_size=2)),
            "partitions": draw(st.sampled_from([1, 2])),
        }
    repartitions = group is not None and (group[0] == "by" or _rekeys(before))
    commutes = kind in ("count", "sum") or (kind == "reduce" and ps.REDUCERS[agg[1]][1]) or (
        kind == "aggregate" and ps.AGGREGATORS[agg[1]][3]
    )
    # A table's stream is stamped with the time of each key's last record in task order:
    # order-sensitive too.
    ordered = window is not None or not commutes or stream is not None
    # A re-key after the table's stream (map) sends the records of several table tasks to one
    # key of `out`: how they interleave there is the tasks' timing (the worker aligns only the
    # writers of topics its app reads, as Kafka Streams orders only within a task).
    merges_tasks = stream is not None and any(op_kind == "map" for op_kind, _ in stream["ops"])
    partitions = 1 if (repartitions and ordered) or merges_tasks else draw(st.sampled_from([1, 2]))
    return {"partitions": partitions, "before": before, "group": group, "window": window, "agg": agg,
            "stream": stream}


# (key, value or None, timestamp ms), in the order produced: out of order in time
records = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.one_of(st.none(), st.integers(0, 9)),
        st.integers(0, 40).map(lambda s: BASE + s * 1_000),
    ),
    max_size=25,
)


# -- running it both ways -------------------------------------------------------------------------


def _module(spec: dict[str, Any], broker: str, modules: Path) -> str:
    """A new module (a new name each time: Spark's Python workers keep what they imported)
    whose ``app`` is ``spec`` on ``broker``; its name."""
    name = f"diff_case_{os.getpid()}_{next(_modules)}"
    (modules / f"{name}.py").write_text(
        "import json\n\nfrom pipeline_spec import build\n\n"
        f"app = build(json.loads({json.dumps(json.dumps(spec))}), {broker!r})\n"
    )
    return name


def _load(data_dir: Path, partitions: int, history: list[tuple[str, int | None, int]]) -> None:
    loader = sk.App("loader")
    topic = loader.topic(ps.SOURCE, key_type=str, value_type=int, partitions=partitions)

    async def load() -> None:
        async with AppDriver(loader, data_dir=str(data_dir)) as driver:
            for key, value, ts in history:
                await driver.send(topic, value, key=key, timestamp=ts)

    asyncio.run(load())


Outcome = dict[str, Any]


async def _observe(app: Any, data_dir: Path, state_dir: Path) -> Outcome:
    """What a worker over ``data_dir`` holds and wrote once it processed everything: the
    table, and per topic, partition and key the records (value, timestamp, headers)."""
    async with AppDriver(app, data_dir=str(data_dir), state_dir=str(state_dir)) as driver:
        await driver.process()
        table = app.result
        topics = [app.topics.get(ps.OUT), getattr(table.table, "emitted_topic", None), app.topics.get(f"{app.id}-late")]
        written: dict[str, dict[str, list[Any]]] = {}
        for topic in topics:
            if topic is None:
                continue
            by_key: dict[str, list[Any]] = {}
            for e in await driver.read(topic):
                by_key.setdefault(f"{e.partition}/{e.key!r}", []).append(
                    (e.value, e.timestamp, [(k, v) for k, v in e.headers])
                )
            written[topic.name] = by_key
        return {
            "table": sorted((repr(k), v) for k, v in table.items()),
            "topics": written,
            "dead letters": [(e.key, e.value) for e in await driver.dead_letters()],
        }


def run_both(spark: Any, spec: dict[str, Any], history: list[tuple[str, int | None, int]],
             modules: Path) -> tuple[Outcome, Outcome]:
    """(the worker's outcome, the backfill's) for ``spec`` over ``history``."""
    from streamkit.spark.backfill import backfill

    work = Path(tempfile.mkdtemp(prefix="diff-", dir=modules))
    try:
        _load(work / "history", spec["partitions"], history)
        shutil.copytree(work / "history", work / "replay")
        name = _module(spec, f"file://{work / 'history'}", modules)
        try:
            module = importlib.import_module(name)
            worker = asyncio.run(_observe(module.app, work / "replay", work / "replay-state"))
            backfill(spark, f"{name}:app", ps.TABLE)
            backfilled = asyncio.run(_observe(module.app, work / "history", work / "state"))
        finally:
            sys.modules.pop(name, None)
        return worker, backfilled
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A directory on ``sys.path`` for the generated app modules, with their builder."""
    where = tmp_path_factory.mktemp("diff-modules")
    shutil.copy(HERE / "pipeline_spec.py", where / "pipeline_spec.py")
    sys.path.insert(0, str(where))
    yield where
    sys.path.remove(str(where))
    sys.modules.pop("pipeline_spec", None)


def _comparable(spec: dict[str, Any], outcome: Outcome) -> Outcome:
    """``outcome`` without what the known difference of a plain (not windowed) table's stream
    makes differ: after a ``map`` of the table's stream that sends several table keys to one
    output key, the order of those records (``test_known_difference_the_order_of_a_tables_
    changes``); everything else about those records is still compared."""
    if spec["window"] is not None or spec["stream"] is None:
        return outcome
    merged = any(kind == "map" for kind, _ in spec["stream"]["ops"])
    topics = {}
    for name, by_key in outcome["topics"].items():
        topics[name] = {}
        for where, sent in by_key.items():
            records = list(sent)
            topics[name][where] = sorted(records, key=repr) if merged else records
    return {**outcome, "topics": topics}


@pytest.mark.timeout(max(300, EXAMPLES * 15))
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=specs(), history=records)
def test_the_worker_and_the_backfill_agree(spark: Any, modules: Path, spec: dict[str, Any],
                                          history: list[tuple[str, int | None, int]]) -> None:
    note(f"spec = {json.dumps(spec)}")
    note(f"history = {history!r}")
    worker, backfilled = run_both(spark, spec, history, modules)
    note(f"worker = {worker!r}")
    note(f"backfill = {backfilled!r}")
    event(f"aggregation: {spec['agg'][0]}, window: {spec['window'][0] if spec['window'] else None}")
    event(f"source partitions: {spec['partitions']}, table's stream: {spec['stream'] is not None}")
    event(f"late records: {bool(worker['topics'].get(f'{ps.APP_ID}-late'))}")
    assert worker["dead letters"] == []  # the menus take every value
    assert backfilled["table"] == worker["table"]
    assert _comparable(spec, backfilled)["topics"] == _comparable(spec, worker)["topics"]


def test_a_delete_of_a_key_absent_before_and_after_forwards_nothing(spark: Any, modules: Path) -> None:
    """Found here: to_table over only a tombstone. A commit of the worker (its record cache on)
    and the backfill (one commit of the whole range) forward no tombstone for a key the table
    lacked before and lacks after, as Kafka Streams' cache flush skips null -> null: not for
    a1 (only deleted) nor b1 (set and deleted within the commit). With the cache off every
    deletion is forwarded (``tests/dsl/test_dsl.py``)."""
    spec = {"partitions": 1, "before": [], "group": None, "window": None, "agg": ["latest", ""],
            "stream": {"emit": "update", "ops": [], "partitions": 1}}
    history = [("a1", None, BASE), ("b1", 4, BASE + 1_000), ("b1", None, BASE + 2_000), ("c", 1, BASE),
               ("b1", None, BASE + 3_000)]
    worker, backfilled = run_both(spark, spec, history, modules)
    assert worker["table"] == backfilled["table"] == [("'c'", 1)]
    assert worker["topics"] == backfilled["topics"] == {"out": {"0/'c'": [(1, BASE, [])]}}


COUNT = {"partitions": 1, "before": [], "group": ["key"], "window": None, "agg": ["count", ""],
         "stream": {"emit": "update", "ops": [], "partitions": 1}}


def test_an_aggregates_change_is_stamped_with_the_largest_timestamp_behind_it(spark: Any, modules: Path) -> None:
    """Both runners, as Kafka Streams' KStreamAggregate (it was the worker's last record's)."""
    worker, backfilled = run_both(spark, COUNT, [("a1", 1, BASE + 1_000), ("a1", 2, BASE)], modules)
    assert worker["table"] == backfilled["table"] == [("'a1'", 2)]
    assert backfilled["topics"]["out"] == worker["topics"]["out"] == {"0/'a1'": [(2, BASE + 1_000, [])]}


def test_a_none_value_into_a_reduce_is_skipped(spark: Any, modules: Path) -> None:
    """Both runners skip it, as Kafka Streams ignores records with a null value (the worker
    dead-lettered it, the backfill folded it in)."""
    spec = {**COUNT, "agg": ["reduce", "add"], "stream": None}
    worker, backfilled = run_both(spark, spec, [("a1", None, BASE), ("a1", 2, BASE + 1_000)], modules)
    assert worker["table"] == backfilled["table"] == [("'a1'", 2)]
    assert worker["dead letters"] == []


# -- the differences found, pinned: each fails until the runners agree (strict xfail) ---------------

# Not strict: the backfill's order is Spark's order of the keys, which may happen to be the worker's.
@pytest.mark.xfail(strict=False, reason=(
    "a plain table's changes of one commit: the worker writes (and its stream forwards) them in the order "
    "of each key's first write, the backfill in Spark's order of the keys (Kafka Streams' record cache: "
    "the order of each key's last write); seen once a map of the stream sends two keys to one"
))
def test_known_difference_the_order_of_a_tables_changes(spark: Any, modules: Path) -> None:
    spec = {**COUNT, "group": ["by", "mod3"], "agg": ["sum", "plain"],
            "stream": {"emit": "update", "ops": [["map", "first"]], "partitions": 1}}
    worker, backfilled = run_both(spark, spec, [("a1", 8, BASE), ("a1", 0, BASE)], modules)
    assert worker["table"] == backfilled["table"] == [("'m0'", 0), ("'m2'", 8)]
    # worker: m2's 8, then m0's 0 (first written first); backfill: 0, then 8
    assert backfilled["topics"]["out"] == worker["topics"]["out"] == {"0/'m'": [(8, BASE, []), (0, BASE, [])]}


@pytest.mark.xfail(strict=True, raises=sk.StreamkitError, reason=(
    "a None value opening a window of a windowed reduce is stored as the window's value, which then "
    "does not decode (SerdeError: does not decode as json), in both runners (they share the window "
    "driver); Kafka Streams ignores records with a null value"
))
def test_known_difference_a_none_value_into_a_windowed_reduce(spark: Any, modules: Path) -> None:
    spec = {**COUNT, "window": ["tumbling", 10, 0], "agg": ["reduce", "add"], "stream": None}
    worker, backfilled = run_both(spark, spec, [("a1", None, BASE), ("a1", 2, BASE + 1_000)], modules)
    assert worker["table"] == backfilled["table"]


# -- what the backfill does not run -----------------------------------------------------------------


def test_the_backfill_refuses_joins_by_name(spark: Any, modules: Path) -> None:
    """Joins are not generated above: the backfill refuses each kind, naming it and the table."""
    from streamkit.spark.backfill import backfill

    work = Path(tempfile.mkdtemp(prefix="joins-", dir=modules))
    name = f"diff_joins_{os.getpid()}_{next(_modules)}"
    (modules / f"{name}.py").write_text(JOINS_APP.format(broker=f"file://{work}"))
    try:
        for table, refusal in [
            ("stream_table", "table 'stream_table' joins a stream with table 'latest': the backfill does not run "
                             "stream-table joins"),
            ("table_table", "table 'table_table' is a table-table join: the backfill does not run those"),
            ("stream_stream", "table 'stream_stream' is fed by the windowed stream-stream join 'join': the "
                              "backfill does not run stream-stream joins"),
            ("of_changes", "table 'of_changes' is computed from the changes of table 'latest': the backfill "
                           "does not run pipelines over a table's changes"),
            ("filtered", "table 'filtered' is computed from the changes of table 'latest': the backfill "
                         "does not run pipelines over a table's changes"),
            ("mapped", "table 'mapped' is computed from the changes of table 'latest': the backfill "
                       "does not run pipelines over a table's changes"),
        ]:
            with pytest.raises(sk.StreamkitError) as refused:
                backfill(spark, f"{name}:app", table)
            assert str(refused.value).startswith(refusal)
    finally:
        sys.modules.pop(name, None)
        shutil.rmtree(work, ignore_errors=True)


JOINS_APP = """\
import streamkit as sk

app = sk.App("joins", broker={broker!r})
left = app.topic("left", key_type=str, value_type=int, partitions=2)
right = app.topic("right", key_type=str, value_type=int, partitions=2)
latest = app.stream(right).to_table("latest")
other = app.stream(left).to_table("other")
app.stream(left).join(latest, lambda v, r: v + (r or 0)).group_by_key().count("stream_table")
latest.join(other, lambda a, b: [a, b], name="table_table")
app.stream(left).join(app.stream(right), lambda a, b: [a, b], within=10).group_by_key().count("stream_stream")
app.stream(latest).group_by_key().count("of_changes")
latest.filter(lambda v: v > 1, name="filtered")
latest.map_values(lambda v: v + 1, name="mapped")
"""
