"""Fixtures of the exactly-once tests: a ``streamkit broker`` subprocess shared by a module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broker"))
from broker_helpers import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("eos-broker") / "data").start(same_port=False)
    yield proc
    proc.stop()


@pytest.fixture(params=["embedded", "broker"])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "embedded":
        return f"file://{tmp_path / 'log'}"
    broker: BrokerProcess = request.getfixturevalue("broker")
    return f"kafka://{broker.bootstrap}"
