"""Fixtures of the Faust-compatibility tests: a ``streamkit broker`` process and a python
with faust-streaming.

faust-streaming does not share streamkit's venv: it pins ``click<8.4`` (streamkit's venv has
a newer click), so it lives in the separate venv ``benchmarks/engine_bench.py`` uses,
``benchmarks/.data/venv-faust``, created from ``benchmarks/requirements-faust.txt`` on first
use (the same stamp file, so the benchmark and these tests share one install).
``STREAMKIT_FAUST_PYTHON`` names another python that has faust-streaming instead.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broker"))
from broker_helpers import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
FAUST_VENV = ROOT / "benchmarks" / ".data" / "venv-faust"
FAUST_REQUIREMENTS = ROOT / "benchmarks" / "requirements-faust.txt"
FAUST_INSTALL_TIMEOUT_S = 200.0  # under the tests' 300 s


@pytest.fixture(scope="session")
def faust_python() -> Path:
    explicit = os.environ.get("STREAMKIT_FAUST_PYTHON")
    if explicit:
        return Path(explicit)
    python = FAUST_VENV / "bin" / "python"
    digest = hashlib.sha256(FAUST_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = FAUST_VENV / "requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    base = getattr(sys, "_base_executable", sys.executable)
    # Wheels only: every pin has one for CPython 3.11 on Linux (about 10 s from an empty pip
    # cache), and a pin that had none would fail here at once instead of building from source
    # for longer than a test may take.
    steps = [
        [base, "-m", "venv", "--clear", str(FAUST_VENV)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--only-binary", ":all:",
         "-r", str(FAUST_REQUIREMENTS)],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=FAUST_INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            done = None  # failed below, outside the except block: one line, no exception chain
        if done is None:
            pytest.fail(f"installing faust-streaming into {FAUST_VENV} took over {FAUST_INSTALL_TIMEOUT_S:.0f} s", pytrace=False)
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            pytest.fail(f"cannot install faust-streaming into {FAUST_VENV}: {why}", pytrace=False)
    stamp.write_text(digest + "\n")
    return python


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("faust-broker") / "data", "--default-partitions", "1")
    proc.start(same_port=False)
    yield proc
    assert proc.stop() == 0, proc.stderr()
