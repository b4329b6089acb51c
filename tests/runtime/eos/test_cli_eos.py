"""The exactly-once options of the CLI: bad values get one line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STREAMKIT = str(Path(sys.executable).parent / "streamkit")


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(HERE), "EOS_BROKER": f"file://{tmp_path / 'log'}"}
    return subprocess.run([STREAMKIT, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


def _one_error_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamkit: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_a_bad_processing_guarantee_is_one_line(tmp_path: Path) -> None:
    result = _run(["worker", "-A", "eos_app:app", "--processing-guarantee", "sometimes"], tmp_path)
    _one_error_line(result, "--processing-guarantee", "sometimes")


def test_a_bad_isolation_level_is_one_line(tmp_path: Path) -> None:
    result = _run(["consume", "results", "--isolation-level", "maybe", "--data-dir", str(tmp_path)], tmp_path)
    _one_error_line(result, "--isolation-level", "maybe")
