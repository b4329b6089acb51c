"""Faust's ``@app.command()``: subcommands of ``app.main()`` with ``faust.cli`` options and
arguments (``from streamkit.cli import argument, option``), ``self`` as Faust passes it, sends
from a command, and a clean end on Ctrl-C; on the embedded log and against ``streamkit broker``."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import streamkit as faust
from streamkit.cli import argument, option
from tests.support.processes import interruptible

APP = '''
import asyncio

import streamkit as faust
from streamkit.cli import argument, option

app = faust.App("commands", broker="{broker}")
people = app.topic("people", key_type=str, value_type=str)


@app.command(argument("location"), argument("name"), option("--times", type=int, default=1))
async def joining(self, location: str, name: str, times: int) -> None:
    """Say that NAME joined LOCATION."""
    for _ in range(times):
        await people.send(key=location, value=name)
    self.say(f"{{name}} joined {{location}} ({{self.app.id}})")


@app.command()
async def hello():
    print("hello without self", flush=True)


@app.command()
async def keep_sending(self):
    i = 0
    while True:
        await people.send(key="loop", value=f"n{{i}}")
        print(f"SENT {{i}}", flush=True)
        i += 1
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    app.main()
'''


def _write(tmp_path: Path, broker: str) -> Path:
    script = tmp_path / "cmdapp.py"
    script.write_text(APP.format(broker=broker))
    return script


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=script.parent, capture_output=True, text=True, timeout=120
    )


def _consume(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "streamkit.cli", "consume", "people", "--from-beginning", "--print-keys", *args],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def _check_commands(script: Path, *where: str) -> None:
    joined = _run(script, "joining", "home", "alice", "--times", "2")
    assert joined.returncode == 0 and joined.stdout == "alice joined home (commands)\n", joined.stderr
    hello = _run(script, "hello")
    assert hello.returncode == 0 and hello.stdout == "hello without self\n", hello.stderr
    assert _consume(*where) == ['home\t"alice"', 'home\t"alice"']  # JSON strings, as Faust writes str values
    helped = _run(script, "--help")
    assert "joining" in helped.stdout and "keep-sending" in helped.stdout and "worker" in helped.stdout
    usage = _run(script, "joining", "home")
    assert usage.returncode == 2 and usage.stderr.startswith("streamkit: error: Missing argument 'NAME'")
    assert len(usage.stderr.splitlines()) == 1

    # Ctrl-C ends a command that never returns: exit 130, no traceback, its sends kept.
    proc = subprocess.Popen([sys.executable, str(script), "keep-sending"], cwd=script.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    sent = 0
    while time.monotonic() < deadline and sent < 3:
        line = proc.stdout.readline()
        if not line:
            break
        sent += line.startswith("SENT ")
    assert sent == 3
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err and err.strip() == "", err
    announced = sent + sum(1 for line in out.splitlines() if line.startswith("SENT "))
    loops = [line for line in _consume(*where) if line.startswith("loop\t")]
    assert len(loops) >= announced  # every send it announced is in the log


def test_commands_on_the_embedded_log(tmp_path: Path) -> None:
    script = _write(tmp_path, f"file://{tmp_path / 'log'}")
    _check_commands(script, "--data-dir", str(tmp_path / "log"))


def test_commands_against_streamkit_broker(tmp_path: Path, broker: object) -> None:
    bootstrap = broker.bootstrap  # type: ignore[attr-defined]
    script = _write(tmp_path, f"kafka://{bootstrap}")
    _check_commands(script, "--bootstrap", bootstrap)


def test_a_command_is_declared_as_faust_declares_it() -> None:
    app = faust.App("declared")

    @app.command(argument("x"), option("--y", default=2))
    async def add_up(self: object, x: str, y: int) -> None:
        """Add."""

    @app.command()
    async def plain() -> None:
        pass

    assert sorted(app.commands) == ["add-up", "plain"]
    assert app.commands["add-up"].takes_self and not app.commands["plain"].takes_self
    assert app.commands["add-up"].help == "Add."
    with pytest.raises(faust.ConfigError, match="already declared"):

        @app.command()
        async def plain() -> None:
            pass
    with pytest.raises(faust.ConfigError, match="async function"):
        app.command()(lambda: None)  # type: ignore[arg-type]
