"""``import streamkit``: the public API, imported name by name on first use (streamkit/__init__.py).

Importing the package loads none of its modules, so a program that uses one part of
streamkit (the command line, the log) does not pay for the rest; every exported name and
every subpackage is still there when asked for.
"""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys

import pytest

import streamkit


def _fresh(code: str) -> str:
    """Run ``code`` in a new interpreter; its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_importing_the_package_loads_only_the_ports_it_fills() -> None:
    """The package root installs the script runtime and the command line into the ports the
    declarations use (``topics/ports.py``): that module and the error it raises, nothing else."""
    out = _fresh("import sys, streamkit; print(sorted(m for m in sys.modules if m.startswith('streamkit.')))")
    assert out.strip() == str(["streamkit._core", "streamkit._core.errors", "streamkit.topics", "streamkit.topics.ports"])


def test_each_exported_name_is_the_object_its_module_defines() -> None:
    exports = streamkit._exports()
    for name, value in exports.items():
        defined = getattr(importlib.import_module(value.__module__), value.__name__)  # Faust's AgentT is Agent
        assert getattr(streamkit, name) is value is defined, name
    assert set(exports) == set(streamkit.__all__) - {"__version__"}
    assert set(streamkit.__all__) <= set(dir(streamkit))


def test_a_star_import_and_a_from_import_work_in_a_fresh_process() -> None:
    out = _fresh(
        "from streamkit import *\n"
        "from streamkit import App as A\n"
        "print(App is A, Record.__module__, callable(uuid), Tumbling if 'Tumbling' in dir() else '-')"
    )
    assert out.split() == ["True", "streamkit._core.record", "True", "-"]


def test_subpackages_are_reached_as_attributes() -> None:
    out = _fresh("import streamkit as sk; print(sk.windows.Tumbling.__name__, sk.testing.__name__)")
    assert out.split() == ["Tumbling", "streamkit.testing"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'streamkit' has no attribute 'nosuch'"):
        streamkit.nosuch  # noqa: B018
    with pytest.raises(AttributeError):
        streamkit._private  # noqa: B018
    assert not hasattr(streamkit, "Nosuch")


def test_the_docstring_example_runs() -> None:
    result = doctest.testmod(streamkit)
    assert result.attempted > 0 and result.failed == 0
