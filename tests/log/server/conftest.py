"""Fixtures of the broker tests; the brokers themselves come from ``tests/support/plugin.py``.

The module's ``broker`` (shared by its tests) serves one partition per auto-created topic; the
tests use distinct topic and group names (``unique``, from the plugin, gives them). Tests that restart a broker
make their own with ``broker_factory``.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def broker_args() -> tuple[str, ...]:
    return ("--default-partitions", "1")
