"""Every command in the README's ```sh blocks runs as a user would type it.

Each block runs line by line through bash, in a new temporary directory that holds the README's
example app as ``shop.py`` and the checkout's ``apps/`` (the README's commands run from the
checkout). The venv's ``bin`` is first on PATH, so ``streamkit`` is the
installed console script. A command added to a block is tested without touching this file.

* Ports the block names (``127.0.0.1:N``, ``localhost:N``, ``--port N``, ``--web-port N``) are
  replaced by free loopback ports. ``/tmp/...`` paths are replaced by directories under the
  test's ``tmp_path``.
* A line ending in ``&``, and every ``streamkit broker`` or ``streamkit worker`` (they run
  until stopped; the README runs the worker in another terminal), starts in the background.
  The test waits for the command's readiness line. At the end of the block it stops the
  command with SIGTERM and expects a clean exit (code 0, no traceback).
* Every other line must exit with code 0.

Not run:

* ``make`` lines: ``make test`` runs this very suite, and ``make demo`` runs
  ``scripts/demo.sh``, which ``tests/cli/test_cli_demo.py`` runs.
* Lines that need a tool that is not installed. curl may be absent, and kcat comes from
  ``make system``. Such lines are named in a warning, and the rest of the block still runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent  # holds the installed ``streamkit`` script
START_TIMEOUT_S = 60
LINE_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30

NOT_RUN = {"make": "make targets: 'make test' is this suite, 'make demo' is tests/cli/test_cli_demo.py"}
BASH_BUILTINS = {"cd", "echo", "printf", "export", "test", "true", "false", "read", "wait", "sleep"}
_PORT = re.compile(r"(?:127\.0\.0\.1:|localhost:|--port[ =]|--web-port[ =])(\d{2,5})\b")
_TMP_PATH = re.compile(r"(?<![\w./])/tmp/")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def _lines(block: str) -> list[str]:
    """The commands of a block: continuation lines joined, blank and comment lines dropped."""
    lines: list[str] = []
    pending = ""
    for raw in block.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = (pending + raw).strip()
        pending = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


SH_BLOCKS = _blocks("sh")


def _block_id(block: str) -> str:
    first = _lines(block)[0] if _lines(block) else "empty"
    return re.sub(r"[^a-zA-Z0-9]+", "-", " ".join(first.split()[:3])).strip("-")


def test_the_readme_has_command_blocks_and_the_shop_app() -> None:
    assert len(SH_BLOCKS) >= 3, "the README's ```sh blocks were not found"
    assert _shop_source()


def _shop_source() -> str:
    for block in _blocks("python"):
        if re.search(r'sk\.App\("shop"', block):
            return block
    raise AssertionError("the README's example app (sk.App(\"shop\", ...)) was not found")


def _commands(line: str) -> list[str]:
    """The programs a shell line runs (first word of each pipeline stage)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands, expect_command = [], True
    for token in lexer:
        if token in ("|", "||", "&&", ";", "&", "(", ")"):
            expect_command = True
        elif expect_command and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", token):
            commands.append(token)
            expect_command = False
    return commands


def _without_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a '#' outside quotes after a blank)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


@dataclass
class Background:
    line: str
    proc: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def output(self) -> str:
        return f"$ {self.line}\n{self.stdout.read_text(errors='replace')}{self.stderr.read_text(errors='replace')}"


@dataclass
class Session:
    cwd: Path
    env: dict[str, str]
    background: list[Background] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def context(self) -> str:
        return "\n".join(b.output() for b in self.background)


def _readiness(line: str) -> tuple[str, re.Pattern[str]] | None:
    """Which stream of a long-running command says it is ready, and how; None if not one."""
    words = _commands(line)
    argv = shlex.split(line, comments=True)
    if words[:1] == ["streamkit"] and argv[1:2] == ["broker"]:
        return "stdout", re.compile(r"^streamkit broker listening on ", re.M)
    if words[:1] == ["streamkit"] and argv[1:2] == ["worker"]:
        if "--web-port" in argv:
            return "stderr", re.compile(r"^  web: http", re.M)
        return "stderr", re.compile(r"^streamkit worker: app ", re.M)
    return None


def _start(session: Session, line: str, index: int) -> None:
    command = _without_comment(line).removesuffix("&").rstrip()
    readiness = _readiness(command)
    assert readiness is not None, f"no readiness line known for a background command: {line!r}"
    stream, pattern = readiness
    stdout, stderr = session.cwd / f".bg{index}.out", session.cwd / f".bg{index}.err"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"], cwd=session.cwd, env=session.env, stdout=out, stderr=err,
            stdin=subprocess.DEVNULL,
        )
    started = Background(line, proc, stdout, stderr)
    session.background.append(started)
    deadline = time.monotonic() + START_TIMEOUT_S
    watched = stdout if stream == "stdout" else stderr
    while not pattern.search(watched.read_text(errors="replace")):
        assert proc.poll() is None, f"exited with {proc.returncode} before it was ready:\n{started.output()}"
        assert time.monotonic() < deadline, f"not ready after {START_TIMEOUT_S} s:\n{started.output()}"
        time.sleep(0.05)


def _stop_all(session: Session) -> list[str]:
    problems = []
    for started in reversed(session.background):
        if started.proc.poll() is None:
            started.proc.send_signal(signal.SIGTERM)
        try:
            code = started.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            started.proc.kill()
            started.proc.wait()
            problems.append(f"ignored SIGTERM:\n{started.output()}")
            continue
        if code != 0 or "Traceback" in started.stderr.read_text(errors="replace"):
            problems.append(f"ended with exit code {code}:\n{started.output()}")
    return problems


def _localize(block: str, tmp_path: Path) -> str:
    """The block with its ports replaced by free ones and /tmp/ by a directory of the test."""
    for port in sorted(set(_PORT.findall(block)), key=len, reverse=True):
        block = re.sub(rf"(?<![\d.]){port}(?!\d)", str(free_port()), block)
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return _TMP_PATH.sub(f"{scratch}/", block)


def _runs_until_stopped(line: str) -> bool:
    return _without_comment(line).endswith("&") or _readiness(line) is not None


def _session(tmp_path: Path) -> Session:
    """A new temporary directory holding the README's shop app and the checkout's apps/."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "shop.py").write_text(_shop_source())
    (cwd / "apps").symlink_to(ROOT / "apps")  # the README's commands run from the checkout
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMKIT_DATA_DIR", "STREAMKIT_BOOTSTRAP")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return Session(cwd, env)


def _run_block(session: Session, block: str, first_index: int = 0) -> int:
    """Run the lines of ``block`` (already localized) in ``session``; the long-running ones
    start in the background and stay in ``session.background``. Returns how many lines ran."""
    ran = 0
    for index, line in enumerate(_lines(block), start=first_index):
        commands = _commands(line)
        not_run = next((NOT_RUN[c] for c in commands if c in NOT_RUN), None)
        if not_run is not None:
            continue
        missing = [c for c in commands if c not in BASH_BUILTINS and shutil.which(c, path=session.env["PATH"]) is None]
        if missing:
            session.skipped.append(f"{line!r} (not installed: {', '.join(missing)})")
            continue
        ran += 1
        if _runs_until_stopped(line):
            _start(session, line, index)
            continue
        result = subprocess.run(
            ["bash", "-c", line], cwd=session.cwd, env=session.env, capture_output=True, timeout=LINE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, (
            f"$ {line}\nexit code {result.returncode}\n{result.stdout.decode(errors='replace')}"
            f"{result.stderr.decode(errors='replace')}\n--- background commands ---\n{session.context()}"
        )
    return ran


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", [
    # `streamkit backfill` runs Spark: its block needs the spark extra (skipped without it).
    pytest.param(b, marks=[pytest.mark.spark] if "streamkit backfill" in b else []) for b in SH_BLOCKS
], ids=[_block_id(b) for b in SH_BLOCKS])
def test_readme_block_runs(block: str, tmp_path: Path) -> None:
    session = _session(tmp_path)
    try:
        ran = _run_block(session, _localize(block, tmp_path))
    finally:
        problems = _stop_all(session)
    assert not problems, "\n".join(problems)
    if session.skipped:
        warnings.warn("README lines not run: " + "; ".join(session.skipped), stacklevel=1)
    if ran == 0:
        pytest.skip("every line of this block is a make target (see NOT_RUN)")


def _streamkit(session: Session, *args: str) -> str:
    result = subprocess.run(
        ["streamkit", *args], cwd=session.cwd, env=session.env, capture_output=True, text=True,
        timeout=LINE_TIMEOUT_S, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"$ streamkit {' '.join(args)}\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest.mark.spark  # the blocks include `streamkit backfill`
@pytest.mark.timeout(900)
def test_readme_blocks_in_order_with_the_long_running_commands_left_running(tmp_path: Path) -> None:
    """A user with several terminals: every block in order in one directory, each worker and
    broker left running while the next blocks run (ports and /tmp/ localized per block, as
    above), and at the end the workers the README started on the embedded log all work."""
    session = _session(tmp_path)
    try:
        index = 0
        for block in SH_BLOCKS:
            lines = _lines(block)
            _run_block(session, _localize(block, tmp_path), index)
            index += len(lines)
        workers = [b for b in session.background if _readiness(b.line) is not None and " worker " in b.line]
        assert [b.proc.poll() for b in workers] == [None] * len(workers), session.context()
        embedded = [b for b in workers if "--broker" not in b.line]
        assert len(embedded) >= 2, session.context()
        # the first worker owns .streamkit, the ones after it joined it (instead of a refusal)
        for later in embedded[1:]:
            assert "joining it as a Kafka client" in later.stderr.read_text(errors="replace"), later.output()
        # the shop worker found the big order the README sent before starting it ...
        big = _streamkit(session, "consume", "big-orders", "--from-beginning", "--max", "1")
        assert '"o1"' in big, big
        # ... and the wordcount worker counted its line
        count = json.loads(_streamkit(session, "tables", "get", "-A", "apps.wordcount:app", "word_counts", "cat"))
        assert count == {"key": "cat", "value": 1}, count
    finally:
        problems = _stop_all(session)
    assert not problems, "\n".join(problems)
