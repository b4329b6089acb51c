"""Fixtures shared by the whole suite: a manual clock and logs opened on temporary directories.

``tmp_log`` is a ``LogManager`` on a fresh data directory with no background thread and a
``ManualClock``, so upkeep runs only when a test calls ``run_upkeep`` and time moves only when
the test moves it. ``open_log`` opens more of them (on the same or another directory); every log
a fixture opened is closed at teardown.

Tests that need an optional extra carry its marker (``spark``: everything under
``tests/spark/`` gets it here, other tests say ``@pytest.mark.spark``); where the extra is not
installed they are skipped with the reason, so a plain ``pip install -e '.[dev]'`` runs the
rest of the suite.

The fixtures every directory shares (``broker``, ``log_url``, ``data_dir``, ...) are in the
plugin ``tests/support/plugin.py``, registered here.

``spark`` is ONE local SparkSession for the whole test session (starting a JVM takes seconds),
for every Spark test wherever it lives: ``local[2]``, two shuffle partitions, no UI, and Python
workers that run this interpreter (the venv with streamkit). At the end the session stops and
its JVM process is shut down and waited for, so no JVM outlives the tests.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamkit._core.clock import ManualClock
from streamkit.log.manager import LogManager

START_MS = 1_700_000_000_000  # a plausible "now" in ms, far from 0 so retention math is real

OpenLog = Callable[..., LogManager]

pytest_plugins = ["tests.support.plugin"]

TESTS = Path(__file__).resolve().parent
# Each optional extra of pyproject.toml: the modules its tests import, and the directory whose
# tests all need it.
EXTRAS: dict[str, tuple[tuple[str, ...], Path]] = {
    "spark": (("pyspark", "pyarrow", "numpy"), TESTS / "spark"),
}


def _missing(modules: tuple[str, ...]) -> list[str]:
    return [name for name in modules if importlib.util.find_spec(name) is None]


def _skip_reason(extra: str, missing: list[str]) -> str:
    return f"the {extra} extra is not installed (no {', '.join(missing)}): pip install -e '.[dev,{extra}]'"


class _NeedsMissingExtra(pytest.Module):
    """A test module of an extra's directory when the extra is missing: reported skipped with
    the reason, and never imported (its imports would fail)."""

    reason = ""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        pytest.skip(self.reason)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    for extra, (modules, directory) in EXTRAS.items():
        missing = _missing(modules)
        if missing and module_path.is_relative_to(directory):
            module = _NeedsMissingExtra.from_parent(parent, path=module_path)
            module.reason = _skip_reason(extra, missing)
            return module
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for extra, (modules, directory) in EXTRAS.items():
        missing = _missing(modules)
        skip = pytest.mark.skip(reason=_skip_reason(extra, missing))
        for item in items:
            if item.path.is_relative_to(directory):
                item.add_marker(getattr(pytest.mark, extra))
            if missing and item.get_closest_marker(extra) is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from streamkit.spark import register

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver and its workers on loopback only
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("streamkit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        proc = getattr(gateway, "proc", None)
        gateway.shutdown()
        if proc is not None:
            proc.stdin.close()  # the JVM exits when its stdin closes
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
                proc.wait(timeout=30)
        SparkContext._gateway = None
        SparkContext._jvm = None


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def open_log(data_dir: Path, clock: ManualClock) -> Iterator[OpenLog]:
    """A factory: ``open_log(path=None, **LogManager kwargs)`` opens a log and closes it later."""
    opened: list[LogManager] = []

    def _open(path: Path | None = None, **kwargs: Any) -> LogManager:
        kwargs.setdefault("background", False)
        kwargs.setdefault("clock", clock)
        log = LogManager(data_dir if path is None else path, **kwargs).open()
        opened.append(log)
        return log

    yield _open
    for log in reversed(opened):
        log.close()


@pytest.fixture
def tmp_log(open_log: OpenLog) -> LogManager:
    return open_log()


@pytest.fixture(autouse=True)
def _no_current_event() -> Iterator[None]:
    """Each test starts outside any event: a test that drives a source by hand (outside an
    agent's task) would otherwise leave its last event as the current one for the next test,
    and tables would take that test's code for an agent's."""
    from streamkit._core.context import current_event

    token = current_event.set(None)
    yield
    current_event.reset(token)
