"""Fixtures of the Faust-compatibility tests. ``faust_python`` (a python with faust-streaming,
in its own venv) and ``broker`` come from ``tests/support/plugin.py``; the module's broker
serves one partition per auto-created topic, as Faust's examples expect of a fresh Kafka.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def broker_args() -> tuple[str, ...]:
    return ("--default-partitions", "1")
