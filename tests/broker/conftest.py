"""Fixtures of the broker tests: a real ``streamkit broker`` process per test module.

``broker`` is module-scoped: the tests of one module share a broker on a free loopback port
and use distinct topic and group names (``unique`` gives them). Tests that restart a broker
make their own with ``broker_factory``. When a test fails, the broker's stderr is attached to
its report.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_helpers import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("broker") / "data"
    proc = BrokerProcess(data_dir, "--default-partitions", "1").start(same_port=False)
    yield proc
    code = proc.stop()
    assert code == 0, f"broker exited with {code}\n{proc.stderr()}"
    assert "Traceback" not in proc.stderr(), proc.stderr()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type[BrokerProcess]]:
    made: list[BrokerProcess] = []

    class Factory(BrokerProcess):
        def __init__(self, *args: str, data_dir: Path | None = None) -> None:
            super().__init__(data_dir or tmp_path / f"data{len(made)}", *args)
            made.append(self)

    yield Factory
    for proc in made:
        proc.kill()


_counter = itertools.count()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A name no other test in the session uses (for topics and groups)."""
    name = re.sub(r"[^a-zA-Z0-9]", "-", request.node.name)[:60]
    return f"{name}-{next(_counter)}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed and call.when == "call":
        broker_proc = item.funcargs.get("broker") if hasattr(item, "funcargs") else None
        if isinstance(broker_proc, BrokerProcess):
            report.sections.append(("broker stderr", broker_proc.stderr()[-20000:]))
    return report
