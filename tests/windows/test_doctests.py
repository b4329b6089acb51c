"""The examples in the windows package's docstrings run, and ``__all__`` is exact."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import streamkit.windows

MODULES = ["aggregate", "join", "keys", "lateness", "records", "session", "sliding", "spec", "store", "streamtime", "wtable"]


# Faust's windowed tables (streamkit.faust.windows) sit above the windows package, over it.
@pytest.mark.parametrize("name", [*(f"streamkit.windows.{m}" for m in MODULES), "streamkit.faust.windows"])
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, raise_on_error=False, verbose=False)
    assert result.attempted > 0, f"{name} has no docstring examples"
    assert result.failed == 0


def test_every_module_is_listed() -> None:
    names = sorted(m.name for m in pkgutil.iter_modules(streamkit.windows.__path__))
    assert names == sorted(MODULES)


def test_public_names() -> None:
    exported = {name for name in dir(streamkit.windows) if not name.startswith("_")}
    assert set(streamkit.windows.__all__) == exported - set(MODULES)
