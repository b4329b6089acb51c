"""What a backfill runs: the declarative table's pipeline and plan found by name (or refused
by name when the backfill cannot run it), the app loaded from its reference (on the driver and
again on each executor), and who else reads a topic (how it reaches the log: ``access.py``)."""

from __future__ import annotations

import os
import sys

from streamkit._core.errors import ConfigError
from streamkit._core.refs import import_ref
from streamkit.app.application import App
from streamkit.dsl.nodes import (
    Aggregate,
    Join,
    Pipeline,
    Sink,
    Source,
    StreamJoin,
    TableJoin,
    WindowedAggregate,
)
from streamkit.dsl.plan import Plan


def _declarative(app: App) -> list[str]:
    return sorted(
        p[-1].table.name for p in app.topologies if isinstance(p[-1], (Aggregate, WindowedAggregate))
    )


def find_pipeline(app: App, table: str) -> Pipeline:
    """The declarative pipeline that fills ``table``, or a clear error."""
    for pipeline in app.topologies:
        terminal = pipeline[-1]
        if isinstance(terminal, (Aggregate, WindowedAggregate)) and terminal.table.name == table:
            refuse_unsupported(pipeline, table)
            return pipeline
        if isinstance(terminal, TableJoin) and terminal.table.name == table:
            raise ConfigError(f"table {table!r} is a table-table join: the backfill does not run those")
    declarative = _declarative(app)
    if table in app.tables:
        raise ConfigError(
            f"table {table!r} is filled by agent code, which the backfill cannot plan; it runs "
            f"declarative tables (app.stream(...)): {declarative or 'the app has none'}"
        )
    raise ConfigError(f"the app has no table {table!r}; declarative tables: {declarative or 'none'}")


def refuse_unsupported(pipeline: Pipeline, table: str) -> None:
    source = pipeline[0]
    assert isinstance(source, Source)
    if source.table is not None:
        raise ConfigError(f"table {table!r} is computed from the changes of table {source.table.name!r}: "
                          "the backfill does not run pipelines over a table's changes")
    for node in pipeline:
        if isinstance(node, Join):
            raise ConfigError(f"table {table!r} joins a stream with table {node.table.name!r}: the backfill "
                              "does not run stream-table joins (their answer depends on when each side arrived)")
        if isinstance(node, StreamJoin):
            raise ConfigError(f"table {table!r} is fed by the windowed stream-stream join {node.name!r}: the "
                              "backfill does not run stream-stream joins")
        if isinstance(node, Sink):
            raise ConfigError(f"the pipeline of table {table!r} writes a topic midway: not a backfill")


def plan_of(app: App, table: str) -> Plan:
    """The plan of the declarative pipeline that fills ``table`` (refused by name when the
    backfill cannot run it)."""
    find_pipeline(app, table)
    return next(p for p in app.plans if isinstance(p.terminal, (Aggregate, WindowedAggregate))
                and p.terminal.table.name == table)


def load_app(app_ref: str, root: str | None) -> App:
    """The ``App`` named ``module:attribute``, importing from ``root`` first when given."""
    app = import_ref(app_ref, root=root or None)
    if not isinstance(app, App):
        raise ConfigError(f"{app_ref!r} is not a streamkit App")
    return app


def import_root(app_ref: str) -> str | None:
    """The directory ``app_ref``'s module is imported from (for the executors)."""
    module = sys.modules.get(app_ref.partition(":")[0])
    path: str | None = getattr(module, "__file__", None)
    if module is None or path is None:
        return None
    root = os.path.dirname(os.path.abspath(path))
    for _ in range(module.__name__.count(".") + (1 if path.endswith("__init__.py") else 0)):
        root = os.path.dirname(root)
    return root


def agent_inputs(app: App) -> dict[str, set[str]]:
    """Every agent's input topics by agent name: the app's agents and its plans' stages."""
    readers = {stage.name: {t.name for t in stage.inputs} for plan in app.plans for stage in plan.stages}
    for agent in app.agents.values():
        readers.setdefault(agent.name, {t.name for t in agent.topics})
    return readers


def plans_named(app: App, pipelines: list[tuple[str, Pipeline]]) -> list[Plan]:
    names = {name for name, _p in pipelines}
    return [plan for plan in app.plans if plan.name in names]
