"""Fixtures of the engine tests. The same tests run on the embedded log and on a real broker
through ``log_url`` (``tests/support/plugin.py``), whose broker the module's tests share.
"""

from __future__ import annotations

import itertools

import pytest

_names = itertools.count()


@pytest.fixture
def unique() -> str:
    """An app id / topic prefix no other test uses (tests share a broker)."""
    return f"t{next(_names)}"
