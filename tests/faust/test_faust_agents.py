"""Faust's agents: ``@app.agent()`` with its own topic named as Faust names it,
``key_type``/``value_type``, ``send``/``cast``, ``stream.active_partitions``,
``isolated_partitions=True``, and sinks of every kind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import streamkit as faust
from streamkit.testing import AppDriver


class Greeting(faust.Record):
    to: str
    text: str


async def test_agent_without_a_channel_gets_its_own_typed_topic() -> None:
    app = faust.App("greeter", version=2)
    got: list[tuple[str, Greeting]] = []

    @app.agent(key_type=str, value_type=Greeting)
    async def greet(stream: faust.Stream) -> None:
        async for key, greeting in stream.items():
            got.append((key, greeting))

    @app.agent(name="shout")
    async def loud(stream: faust.Stream) -> None:
        async for _ in stream:
            pass

    # Faust's rule: {app.conf.id}-{agent name}, the name being module.function unless given.
    assert greet.channel.name == f"greeter-v2-{__name__}.greet"
    assert loud.channel.name == "greeter-v2-shout"
    assert greet.channel.value_type is Greeting and greet.channel.key_type is str
    with pytest.raises(faust.SerdeError, match="takes values of type Greeting"):
        await greet.send(value="hello")
    with pytest.raises(faust.ConfigError, match="apply to the agent's own topic"):
        app.agent(app.topic("x"), value_type=int)

    async with AppDriver(app) as driver:
        await greet.send(key="a", value=Greeting("ann", "hi"))
        await greet.cast(Greeting("bob", "hey"), key="b")
        await driver.process()
    assert got == [("a", Greeting("ann", "hi")), ("b", Greeting("bob", "hey"))]


SCRIPT = """
import streamkit as faust

app = faust.App("named")

@app.agent()
async def count(stream):
    async for _ in stream:
        pass

print(count.channel.name)
"""


def test_an_agent_of_a_script_run_as_main_is_named_by_the_scripts_module(tmp_path: Path) -> None:
    package = tmp_path / "shop" / "jobs"
    package.mkdir(parents=True)
    (tmp_path / "shop" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "counter.py").write_text(SCRIPT)
    (tmp_path / "alone.py").write_text(SCRIPT)

    def topic_of(script: Path) -> str:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert topic_of(tmp_path / "alone.py") == "named-alone.count"
    # Faust lists the package folders innermost first: a Faust app there names it so too.
    assert topic_of(package / "counter.py") == "named-jobs.shop.counter.count"


async def test_active_partitions_and_isolated_partitions() -> None:
    app = faust.App("isolated")
    clicks = app.topic("clicks", key_type=str, value_type=int, partitions=3)
    per_instance: dict[frozenset[faust.TopicPartition], int] = {}

    @app.agent(clicks, isolated_partitions=True)
    async def count(stream: faust.Stream) -> None:
        mine = 0  # one instance per partition: this local total is that partition's
        async for n in stream:
            mine += n
            partitions = stream.active_partitions
            assert partitions is not None and partitions() == partitions
            per_instance[frozenset(partitions)] = mine

    with pytest.raises(faust.ConfigError, match="concurrency must be 1 with isolated_partitions"):
        app.agent(clicks, name="twice", isolated_partitions=True, concurrency=2)(count.fn)

    async with AppDriver(app) as driver:
        for p in range(3):
            for n in range(1, p + 2):
                await driver.send(clicks, n, key=f"k{p}", partition=p)
        await driver.process()
    assert per_instance == {
        frozenset({faust.TopicPartition("clicks", 0)}): 1,
        frozenset({faust.TopicPartition("clicks", 1)}): 3,
        frozenset({faust.TopicPartition("clicks", 2)}): 6,
    }


async def test_sinks_of_every_kind() -> None:
    app = faust.App("sinks")
    words = app.topic("words", value_type=str)
    upper = app.topic("upper", value_type=str)
    lengths = app.channel(value_type=str)
    got: dict[str, list[str]] = {"agent": [], "channel": [], "callable": []}

    @app.agent()
    async def collect(stream: faust.Stream) -> None:
        async for word in stream:
            got["agent"].append(word)

    @app.agent(lengths)
    async def measure(stream: faust.Stream) -> None:
        async for word in stream:
            got["channel"].append(word)

    @app.agent(words, sink=[upper, collect, lengths, got["callable"].append])
    async def shout(stream: faust.Stream):  # type: ignore[no-untyped-def]
        async for word in stream:
            yield word.upper()

    async with AppDriver(app) as driver:
        for word in ["a", "bc"]:
            await driver.send(words, word)
        await driver.process()
        assert [e.value for e in await driver.read(upper)] == ["A", "BC"]
    assert got == {"agent": ["A", "BC"], "channel": ["A", "BC"], "callable": ["A", "BC"]}
