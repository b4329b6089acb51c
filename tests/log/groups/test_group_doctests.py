"""The examples in the group coordinator's docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["coordinator", "group", "membership", "messages", "outbox", "registry", "store"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"streamkit.log.groups.{name}")
    result = doctest.testmod(module, raise_on_error=False, verbose=False)
    assert result.failed == 0
