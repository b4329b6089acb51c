"""The examples in the docstrings of the Faust-compatibility modules run and hold."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

import streamkit._core.record
import streamkit.app.conf
import streamkit.faust.typenames


@pytest.mark.parametrize("module", [streamkit.app.conf, streamkit.faust.typenames, streamkit._core.record])
def test_docstring_examples(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
