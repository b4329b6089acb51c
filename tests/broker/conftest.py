"""Fixtures of the broker tests; the brokers themselves come from ``tests/support/plugin.py``.

The module's ``broker`` (shared by its tests) serves one partition per auto-created topic; the
tests use distinct topic and group names (``unique`` gives them). Tests that restart a broker
make their own with ``broker_factory``.
"""

from __future__ import annotations

import itertools
import re

import pytest


@pytest.fixture(scope="module")
def broker_args() -> tuple[str, ...]:
    return ("--default-partitions", "1")


_counter = itertools.count()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A name no other test in the session uses (for topics and groups)."""
    name = re.sub(r"[^a-zA-Z0-9]", "-", request.node.name)[:60]
    return f"{name}-{next(_counter)}"
