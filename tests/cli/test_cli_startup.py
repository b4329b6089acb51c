"""Start-up of the command line: what a command imports, and the ``--help`` listing that lets
``streamkit --help`` run without importing any subcommand (cli/main.py).

Structural checks, not timings: each command runs as its own process (as ``python -m
streamkit.cli`` runs it) and reports the modules it ended with; the heavy libraries must not
be among them on the embedded log. ``benchmarks/cli_startup.py`` measures the times.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from streamkit.cli.main import COMMANDS, cli, load_command, main_for_app

# What the embedded path and --help never need: the Kafka client, RocksDB, Spark and its
# Arrow/numpy, the wire-protocol codecs (the broker) and the HTTP server (the worker).
HEAVY = ("aiokafka", "rocksdict", "numpy", "pyarrow", "pyspark", "kio", "aiohttp")
# Nor the event loop: the log is plain synchronous code (DESIGN.md), so a command that opens a
# data directory itself starts without asyncio (a third of what it imported besides).
NOT_EMBEDDED = (*HEAVY, "asyncio")

# Runs the command line as ``python -m streamkit.cli ARGS`` does, then writes the names of the
# modules loaded to the file named by its first argument (also when the command exits).
_REPORT_MODULES = """
import runpy, sys
out = sys.argv.pop(1)
try:
    if sys.argv[1:] == ["--import-only"]:
        import streamkit
    else:
        runpy.run_module("streamkit.cli", run_name="__main__", alter_sys=True)
finally:
    with open(out, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
"""


def _loaded(tmp_path: Path, *args: str, input: bytes = b"") -> set[str]:
    """The top-level packages a run of ``streamkit ARGS`` (in ``tmp_path``) imported."""
    report = tmp_path / "modules.txt"
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMKIT_DATA_DIR", "STREAMKIT_BOOTSTRAP")}
    proc = subprocess.run(
        [sys.executable, "-c", _REPORT_MODULES, str(report), *args],
        input=input, capture_output=True, cwd=tmp_path, env=env, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return {name.partition(".")[0] for name in report.read_text().split()}


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--import-only"], id="import streamkit"),
        pytest.param(["--help"], id="--help"),
        pytest.param(["--version"], id="--version"),
        pytest.param(["topics", "--help"], id="topics --help"),
        pytest.param(["topics", "list"], id="topics list"),
        pytest.param(["topics", "describe", "t"], id="topics describe"),
        pytest.param(["produce", "t"], id="produce"),
        pytest.param(["consume", "t", "--from-beginning"], id="consume"),
    ],
)
def test_the_embedded_log_and_help_import_no_heavy_library(tmp_path: Path, args: list[str]) -> None:
    created = _loaded(tmp_path, "topics", "create", "t")
    assert "streamkit" in created  # the report works
    loaded = _loaded(tmp_path, *args, input=b"a\nb\n")
    assert not set(NOT_EMBEDDED) & loaded, sorted(set(NOT_EMBEDDED) & loaded)


def test_a_command_on_a_broker_loads_the_kafka_client(tmp_path: Path) -> None:
    """The other side of the check above: a command given --bootstrap does import aiokafka,
    and asyncio, so the report sees lazily imported modules (nothing answers: exit code 2)."""
    report = tmp_path / "modules.txt"
    proc = subprocess.run(
        [sys.executable, "-c", _REPORT_MODULES, str(report), "topics", "list", "--bootstrap", "127.0.0.1:1"],
        capture_output=True, cwd=tmp_path, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr.decode()
    assert {"aiokafka", "asyncio"} <= {name.partition(".")[0] for name in report.read_text().split()}


@pytest.mark.parametrize("width", [50, 80, 200])
def test_the_listing_is_the_one_the_commands_themselves_give(width: int) -> None:
    """``--help`` lists each command from its summary in COMMANDS; the listing must be what
    click makes from the loaded commands (a docstring changed without its summary fails)."""
    ctx = click.Context(cli)
    lazy = click.HelpFormatter(width=width)
    cli.format_commands(ctx, lazy)
    eager = click.HelpFormatter(width=width)
    loaded = click.Group("streamkit", commands={name: load_command(name) for name in COMMANDS})
    click.Group.format_commands(loaded, ctx, eager)
    assert lazy.getvalue() == eager.getvalue()
    assert all(f"  {name}  " in lazy.getvalue() for name in COMMANDS)


def test_every_command_is_listed_and_runs_its_help() -> None:
    runner = CliRunner()
    listing = runner.invoke(cli, ["--help"], catch_exceptions=False).output
    assert sorted(COMMANDS) == ["acls", "agents", "backfill", "broker", "consume", "log", "produce", "send",
                                "tables", "topics", "users", "worker"]
    for name in COMMANDS:
        assert f"\n  {name} " in listing, listing
        result = runner.invoke(cli, [name, "--help"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"Usage: streamkit {name} "), result.output


def test_an_unknown_command_is_one_line(
    run_process: Callable[..., subprocess.CompletedProcess[bytes]], one_line_error: Callable[..., None]
) -> None:
    proc = run_process("nosuch", module=True)
    assert proc.returncode == 2
    one_line_error(proc.stderr, "No such command 'nosuch'", "streamkit --help")


def test_an_apps_command_wins_over_a_lazy_one_of_the_same_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``app.main()`` lists streamkit's commands beside the app's; the app's ``produce`` is the
    one that runs, and streamkit's stay loadable."""
    import streamkit as sk

    app = sk.App("startup-test", broker=f"file://{tmp_path}")

    @app.command()
    async def produce() -> None:
        """The app's own produce."""
        print("the app's produce ran")

    globals()["_APP"] = app  # main_for_app finds the app by identity in a module
    try:
        with pytest.raises(SystemExit) as exit_:
            main_for_app(app, ["--help"])
        assert exit_.value.code == 0
        listing = capsys.readouterr().out
        assert "produce   The app's own produce." in listing
        assert "topics    Create, list, describe, alter and delete topics." in listing
        with pytest.raises(SystemExit) as exit_:
            main_for_app(app, ["produce"])
        assert exit_.value.code == 0
        assert capsys.readouterr().out == "the app's produce ran\n"
    finally:
        del globals()["_APP"]
