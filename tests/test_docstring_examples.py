"""Every docstring example in the package runs (the windows package's are also checked,
with their modules' exports, in tests/windows/test_doctests.py)."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "streamkit"


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " not in path.read_text():
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("name", _modules_with_examples())
def test_the_examples_run(name: str) -> None:
    if name.startswith("streamkit.spark") and importlib.util.find_spec("pyspark") is None:
        pytest.skip("the spark extra is not installed")
    result = doctest.testmod(importlib.import_module(name), raise_on_error=False, verbose=False)
    assert result.failed == 0
