"""A pipeline is lowered once, when declared, into the plan both runners execute: declaring
builds the plan and nothing else (no agent exists until a worker compiles it), and the
decisions the runners share are made there (the repartition topic's name, serializers and
partition count)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import streamkit as sk
from streamkit.runtime.stages import install_plans
from streamkit.testing import AppDriver
from streamkit.transport.embedded import EmbeddedLogClient


def _app(broker: str = "file://unused") -> tuple[sk.App, sk.Topic]:
    app = sk.App("plan", broker=broker, topic_partitions=8)
    views = app.topic("views", key_type=str, value_type=dict)  # no partition count declared
    app.stream(views).map_values(lambda v: {**v, "n": 1}).group_by(lambda v: v["user"], name="user").sum(
        "per_user", lambda v: v["n"]
    )
    app.stream(views).filter(lambda v: v["user"] != "bot").to("humans")
    return app, views


def test_declaring_builds_the_plan_and_no_agent() -> None:
    app, views = _app()
    assert app.agents == {}
    grouped, filtered = app.plans
    assert [(s.name, [t.name for t in s.inputs]) for s in grouped.stages] == [
        ("per_user-user", ["views"]),
        ("per_user", ["plan-per_user-user-repartition"]),
    ]
    (hop,) = grouped.repartitions
    assert hop.like is views and hop.topic.partitions is None
    assert hop.topic.key_serde.dumps("u1") == b'"u1"'  # JSON keys: both runners hash these bytes
    assert hop.topic.value_serde is not views.value_serde  # map_values may retype: JSON values
    assert [s.name for s in filtered.stages] == ["humans"] and filtered.stages[0].sinks == [app.topics["humans"]]
    install_plans(app)  # what a worker does when it starts
    assert sorted(app.agents) == ["humans", "per_user", "per_user-user"]
    install_plans(app)  # once per app
    assert len(app.agents) == 3


def test_an_undeclared_repartition_topic_takes_its_sources_partition_count(tmp_path: Path) -> None:
    """As in Kafka Streams (and as the backfill places records): not the app's default."""

    async def run() -> int | None:
        client = EmbeddedLogClient(str(tmp_path / "log"))
        await client.start()
        await client.ensure_topic("views", 3)
        await client.aclose()
        app, views = _app(f"file://{tmp_path / 'log'}")
        async with AppDriver(app, data_dir=str(tmp_path / "log")) as driver:
            await driver.send(views, {"user": "u1"}, key="k")
            await driver.process()
            assert dict(app.tables["per_user"].items()) == {"u1": 1}
            return await driver.client.partition_count("plan-per_user-user-repartition")

    assert asyncio.run(run()) == 3
