"""Fixtures shared by the whole suite: a manual clock and logs opened on temporary directories.

``tmp_log`` is a ``LogManager`` on a fresh data directory with no background thread and a
``ManualClock``, so upkeep runs only when a test calls ``run_upkeep`` and time moves only when
the test moves it. ``open_log`` opens more of them (on the same or another directory); every log
a fixture opened is closed at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamkit._core.clock import ManualClock
from streamkit.log.manager import LogManager

START_MS = 1_700_000_000_000  # a plausible "now" in ms, far from 0 so retention math is real

OpenLog = Callable[..., LogManager]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


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
