"""The examples in the group coordinator's docstrings run."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import streamkit.log.groups

# The modules whose docstrings carry examples. A module listed here must have some (a test
# that runs none passes for nothing); a module not listed must have none (or it is missed).
MODULES = ["coordinator", "messages", "registry", "store"]


def _examples(name: str) -> int:
    module = importlib.import_module(f"streamkit.log.groups.{name}")
    return sum(len(test.examples) for test in doctest.DocTestFinder().find(module))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"streamkit.log.groups.{name}")
    result = doctest.testmod(module, raise_on_error=False, verbose=False)
    assert result.attempted > 0, f"{name} has no docstring examples"
    assert result.attempted == _examples(name)
    assert result.failed == 0


def test_every_module_with_examples_is_listed() -> None:
    names = [m.name for m in pkgutil.iter_modules(streamkit.log.groups.__path__)]
    with_examples = sorted(n for n in names if _examples(n))
    assert with_examples == sorted(MODULES)
