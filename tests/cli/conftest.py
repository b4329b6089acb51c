"""Helpers for the CLI tests: run the real ``streamkit`` command tree in-process or as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from streamkit.cli.main import cli

STREAMKIT = Path(sys.executable).parent / "streamkit"

Run = Callable[..., Result]


@pytest.fixture
def run(data_dir: Path) -> Run:
    """``run("topics", "list", input=b"...")``: the command in-process, ``--data-dir`` preset.

    The data directory comes from STREAMKIT_DATA_DIR, so tests spell only what they test.
    """

    def invoke(*args: str, input: bytes | str | None = None) -> Result:
        runner = CliRunner()
        return runner.invoke(
            cli, list(args), input=input, env={"STREAMKIT_DATA_DIR": str(data_dir)}, catch_exceptions=False
        )

    return invoke


def _run_process(
    *args: str, data_dir: Path | None = None, input: bytes | None = None, module: bool = False
) -> subprocess.CompletedProcess[bytes]:
    """The command as its own process: the console script, or ``python -m streamkit.cli``."""
    argv = [sys.executable, "-m", "streamkit.cli"] if module else [str(STREAMKIT)]
    env = dict(os.environ)
    env.pop("STREAMKIT_DATA_DIR", None)
    if data_dir is not None:
        env["STREAMKIT_DATA_DIR"] = str(data_dir)
    return subprocess.run([*argv, *args], input=input, capture_output=True, env=env, timeout=60)


def _assert_one_line_error(stderr: str | bytes, *fragments: str) -> None:
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert lines[0].startswith("streamkit: error: "), text
    for fragment in fragments:
        assert fragment in lines[0], text


@pytest.fixture
def run_process() -> Callable[..., subprocess.CompletedProcess[bytes]]:
    return _run_process


@pytest.fixture
def one_line_error() -> Callable[..., None]:
    """``one_line_error(stderr, "fragment", ...)``: exactly one ``streamkit: error:`` line."""
    return _assert_one_line_error
