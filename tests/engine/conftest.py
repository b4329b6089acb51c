"""Fixtures of the engine tests: the same tests run on the embedded log and on a real broker.

``log_url`` is ``file://<tmp>`` for the embedded transport, or ``kafka://127.0.0.1:<port>`` of
a ``streamkit broker`` subprocess shared by the module (started once, on a free port).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broker"))
from broker_helpers import BrokerProcess

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("engine-broker") / "data").start(same_port=False)
    yield proc
    proc.stop()


@pytest.fixture(params=["embedded", "broker"])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "embedded":
        return f"file://{tmp_path / 'log'}"
    broker: BrokerProcess = request.getfixturevalue("broker")
    return f"kafka://{broker.bootstrap}"


@pytest.fixture
def unique() -> str:
    """An app id / topic prefix no other test uses (tests share a broker)."""
    return f"t{next(_names)}"
