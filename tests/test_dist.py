"""The distribution: ``python -m build`` makes an sdist and, from it, a wheel; the wheel alone,
installed into an empty venv (no system site-packages, no source tree on the path), gives a
working ``streamkit`` command, the demo pipeline and a worker.

The wheel is built once per session from a copy of the files the sdist takes (so nothing is
written into the source tree); its dependencies come from the package index or pip's cache.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
SUPPORTED = ("3.11", "3.12", "3.13")


def _env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing pointing into this checkout or its venv."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("STREAMKIT_")
    }
    return {**env, **extra}


def _run(*args: str | Path, cwd: Path, timeout: float = 300, **env: str) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{args}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout + result.stderr


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the directory holding the sdist and the wheel, the build's output)."""
    work = tmp_path_factory.mktemp("dist")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "streamkit", source / "streamkit", ignore=shutil.ignore_patterns("__pycache__"))
    out = work / "out"
    log = _run(sys.executable, "-m", "build", "--outdir", out, source, cwd=work, timeout=600)
    return out, log


@pytest.fixture(scope="session")
def venv(dist: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of an empty venv with only the wheel (and its dependencies) installed."""
    out, _log = dist
    home = tmp_path_factory.mktemp("venv") / "venv"
    _run(sys.executable, "-m", "venv", home, cwd=home.parent)
    (wheel,) = out.glob("*.whl")
    _run(home / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel,
         cwd=home.parent, timeout=600)
    return home / "bin"


def test_build_makes_an_sdist_and_a_wheel_of_the_declared_version(dist: tuple[Path, str]) -> None:
    out, log = dist
    assert sorted(p.name for p in out.iterdir()) == [
        f"streamkit-{VERSION}-py3-none-any.whl", f"streamkit-{VERSION}.tar.gz",
    ]
    assert "SetuptoolsDeprecationWarning" not in log and "TOML table is deprecated" not in log, log
    with zipfile.ZipFile(out / f"streamkit-{VERSION}-py3-none-any.whl") as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"streamkit-{VERSION}.dist-info/METADATA").decode()
    assert "streamkit/py.typed" in names and "streamkit/cli/main.py" in names
    assert not [n for n in names if n.startswith(("tests/", "apps/", "benchmarks/"))]
    assert "License-Expression: Apache-2.0" in metadata
    assert "Requires-Python: >=3.11" in metadata
    for version in SUPPORTED:
        assert f"Classifier: Programming Language :: Python :: {version}" in metadata
    with tarfile.open(out / f"streamkit-{VERSION}.tar.gz") as sdist:
        members = sdist.getnames()
    for name in ("pyproject.toml", "README.md", "CHANGELOG.md", "streamkit/__init__.py"):
        assert f"streamkit-{VERSION}/{name}" in members


def test_the_wheel_alone_runs_the_cli_the_demo_pipeline_and_a_worker(venv: Path, tmp_path: Path) -> None:
    streamkit = venv / "streamkit"
    assert _run(streamkit, "--version", cwd=tmp_path).strip() == f"streamkit, version {VERSION}"
    assert "worker" in _run(streamkit, "--help", cwd=tmp_path)
    where = _run(venv / "python", "-c", "import streamkit; print(streamkit.__version__, streamkit.__file__)",
                 cwd=tmp_path).split()
    assert where[0] == VERSION and where[1].startswith(str(venv.parent)), where  # the wheel's copy

    # The demo's pipeline (the README's first app), run from a copy of the app file.
    shutil.copy2(ROOT / "apps" / "pageviews.py", tmp_path / "pageviews.py")
    data = tmp_path / "data"
    demo = _run(venv / "python", "pageviews.py", "--records", "2000", "--data-dir", data, cwd=tmp_path)
    assert "processed" in demo and "lag: 0" in demo, demo

    # A worker on the same log: it goes on from the demo's committed positions and cleans a
    # page view sent while it runs.
    state = tmp_path / "state"
    env = {"STREAMKIT_BROKER": f"file://{data}", "PYTHONPATH": str(tmp_path)}
    worker = subprocess.Popen(
        [str(streamkit), "worker", "-A", "pageviews:app", "--web-port", "0", "--state-dir", str(state),
         "--progress-interval", "0"],
        cwd=tmp_path, env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait_for(lambda: (state / ".web").exists() or worker.poll() is not None, "the worker to start")
        assert worker.poll() is None, worker.communicate()
        before = _visits(streamkit, tmp_path, data)
        view = {"session": "wheel-s1", "user": "wheel-user", "url": "https://shop.example/cart",
                "duration_ms": 1500, "user_agent": "Mozilla/5.0 (X11; Linux x86_64)"}
        _run(streamkit, "send", "-A", "pageviews:app", "pageviews", json.dumps(view), "--key", "wheel-s1",
             cwd=tmp_path, **env)
        _wait_for(lambda: _visits(streamkit, tmp_path, data) == before + 1, "the worker to clean the page view")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            _out, err = worker.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            _out, err = worker.communicate()
    assert worker.returncode == 0, err
    assert "Traceback" not in err, err


def _visits(streamkit: Path, cwd: Path, data: Path) -> int:
    """How many records the topic ``visits`` holds (one line each), read through the worker
    that owns the data directory."""
    consumed = subprocess.run(
        [str(streamkit), "consume", "visits", "--from-beginning", "--data-dir", str(data)],
        cwd=cwd, env=_env(), capture_output=True, text=True, timeout=60,
    )
    assert consumed.returncode == 0, consumed.stderr
    return sum(1 for line in consumed.stdout.splitlines() if line.strip())


def _wait_for(done: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
