"""Entry point of the ``streamkit`` command: the command tree and how failures end.

Every failure ends with exactly one line on stderr, ``streamkit: error: ...``, and an exit
code (``--help`` and ``--version`` work as usual):

* 2: the command cannot run as asked: a bad or missing argument, an unknown topic, a locked
  data directory, an invalid topic config, unusable input;
* 1: the log is damaged or the system failed (a CRC mismatch on read, an I/O error, a worker
  whose agent kept failing), and ``log verify`` when it finds damage;
* 130: interrupted by Ctrl-C, 143: by SIGTERM; either way the log is closed cleanly (a group's
  offsets committed) and no traceback is printed. When stdout's reader goes away (``| head``)
  click ends the command quietly with 1.

Start-up stays cheap: a subcommand's module is imported only when that subcommand runs (or
its own ``--help`` is asked for), so ``streamkit --help`` and the log commands on a data
directory load none of the worker runtime, the wire-protocol server, the HTTP server, the
Kafka client (aiokafka), RocksDB, Spark or even asyncio (``cli/access.py`` imports those for
a broker only). The top-level ``--help`` lists each command from its one-line summary kept in
``COMMANDS``; ``tests/cli/test_cli_startup.py`` holds each summary to its command's help.
"""

from __future__ import annotations

import copy
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, NoReturn

import click

from streamkit._core.errors import StreamkitError
from streamkit.log.errors import InvalidRecordError, LogClosedError

EXIT_USAGE = 2
EXIT_FAILURE = 1
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every command unwinds and closes its log."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """How to import a subcommand (``load``, on first use) and its one-line ``summary``."""

    load: Callable[[], click.Command]
    summary: str


def _acls() -> click.Command:
    from streamkit.cli.acls import acls

    return acls


def _agents() -> click.Command:
    from streamkit.cli.apps import agents

    return agents


def _backfill() -> click.Command:
    from streamkit.cli.backfill import backfill

    return backfill


def _broker() -> click.Command:
    from streamkit.cli.broker import broker_command

    return broker_command


def _consume() -> click.Command:
    from streamkit.cli.consume import consume

    return consume


def _log() -> click.Command:
    from streamkit.cli.logtools import log_

    return log_


def _produce() -> click.Command:
    from streamkit.cli.produce import produce

    return produce


def _send() -> click.Command:
    from streamkit.cli.apps import send

    return send


def _tables() -> click.Command:
    from streamkit.cli.tables import tables

    return tables


def _topics() -> click.Command:
    from streamkit.cli.topics import topics

    return topics


def _users() -> click.Command:
    from streamkit.cli.users import users

    return users


def _worker() -> click.Command:
    from streamkit.cli.apps import worker

    return worker


# Every streamkit subcommand. ``summary`` is the first sentence of the command's docstring, which
# click shortens to fit the ``--help`` listing.
COMMANDS: dict[str, LazyCommand] = {
    "acls": LazyCommand(_acls, "Add, list and remove a broker's ACLs in its data directory (the broker stopped)."),
    "agents": LazyCommand(_agents, "List an app's agents with their input topics, repartition topics and sinks."),
    "backfill": LazyCommand(
        _backfill,
        "Recompute declared tables (app.stream(...)...count(NAME), windowed ones included) over the "
        "log's history on Spark, write them to their changelogs, and move the app's group past what "
        "was read, so a worker started afterwards serves the results and processes only newer records."
    ),
    "broker": LazyCommand(_broker, "Serve the log in --data-dir to Kafka clients over the Kafka wire protocol."),
    "consume": LazyCommand(_consume, "Print the records of TOPIC to stdout, one value per line."),
    "log": LazyCommand(_log, "Inspect segment files and check a data directory (read-only)."),
    "produce": LazyCommand(_produce, "Write each line of stdin as a record to TOPIC."),
    "send": LazyCommand(
        _send,
        "Send one record to TOPIC, serialized as the app declares it (JSON for typed values)."
    ),
    "tables": LazyCommand(_tables, "Query an app's tables: through a running worker, or its state directory."),
    "topics": LazyCommand(_topics, "Create, list, describe, alter and delete topics."),
    "users": LazyCommand(_users, "Add, list and delete the SASL users (SCRAM and PLAIN) of a streamkit broker data directory."),
    "worker": LazyCommand(_worker, "Run an app's agents, timers and tasks until SIGTERM or Ctrl-C."),
}


def load_command(name: str) -> click.Command:
    """Import the module that defines streamkit's subcommand ``name`` and return the command."""
    return COMMANDS[name].load()


class StreamkitGroup(click.Group):
    """A click group whose standalone run reports errors in one line (see the module doc).

    Subcommands in ``COMMANDS`` are loaded when first asked for; a command added to
    ``commands`` (an app's own, in ``main_for_app``) takes precedence over one of the same name.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is None and cmd_name in COMMANDS:
            command = load_command(cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, from each lazy command's summary instead of the command itself."""
        rows: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None:
                command = click.Command(name, help=COMMANDS[name].summary)
            if not command.hidden:
                rows.append((name, command))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit)) for name, command in rows])

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            previous = signal.signal(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main thread: leave signals alone
            previous = None
        try:
            result = super().main(
                args, prog_name or "streamkit", complete_var, standalone_mode=False, **extra
            )
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _fail(exc.format_message() + hint, EXIT_USAGE)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort as exc:  # click's form of KeyboardInterrupt (and EOF on a prompt)
            terminated = isinstance(exc.__cause__, Terminated)
            sys.exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)
        except Terminated:
            sys.exit(EXIT_TERMINATED)
        except KeyboardInterrupt:
            sys.exit(EXIT_INTERRUPTED)
        except (InvalidRecordError, LogClosedError) as exc:
            _fail(str(exc), EXIT_FAILURE)
        except StreamkitError as exc:
            _fail(str(exc), EXIT_FAILURE if _is_agent_failure(exc) else EXIT_USAGE)
        except OSError as exc:
            _fail(_os_message(exc), EXIT_FAILURE)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        sys.exit(result if isinstance(result, int) else 0)


def _is_agent_failure(exc: StreamkitError) -> bool:
    """A worker's agent kept failing: imported here, only a worker (which loaded it) raises it."""
    from streamkit.runtime.tasks import AgentFailedError

    return isinstance(exc, AgentFailedError)


def _fail(message: str, code: int) -> NoReturn:
    one_line = " ".join(line.strip() for line in message.splitlines() if line.strip())
    click.echo(f"streamkit: error: {one_line}", err=True)
    sys.exit(code)


def _os_message(exc: OSError) -> str:
    if exc.strerror and exc.filename is not None:
        return f"{exc.strerror}: {exc.filename}"
    return str(exc) or type(exc).__name__


@click.group("streamkit", cls=StreamkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="streamkit")
def cli() -> None:
    """streamkit: Kafka's stream-processing model for Python.

    Log commands (topics, produce, consume) open the embedded log in --data-dir
    (default .streamkit, or $STREAMKIT_DATA_DIR) and hold its lock while they run; when
    a worker or broker owns that directory they go through it over the wire. With
    --bootstrap HOST:PORT they talk to a running broker instead.

    App commands (worker, agents, send, tables) take -A MODULE:APP. `streamkit broker` serves
    a data directory to Kafka clients.
    """



def main() -> None:
    """The console script ``streamkit``."""
    cli.main(prog_name="streamkit")


APP_COMMANDS = ("worker", "agents", "send", "tables", "backfill")


def main_for_app(app: object, argv: list[str]) -> None:
    """``app.main()``: the command line with ``-A`` naming ``app`` (Faust's ``python app.py
    worker``). The app is found in the module that defines it, by identity."""
    module = next(
        (m for m in list(sys.modules.values())
         if m is not None and any(v is app for v in list(getattr(m, "__dict__", {}).values()))),
        None,
    )
    attr = next((k for k, v in vars(module).items() if v is app), None) if module is not None else None
    if module is None or attr is None:
        _fail("app.main(): the app is not a module-level name", EXIT_USAGE)
    ref = f"{module.__name__}:{attr}"
    if argv[:1] and argv[0] in APP_COMMANDS and "-A" not in argv and "--app" not in argv:
        if argv[0] == "tables" and len(argv) > 1:
            argv = [argv[0], argv[1], "-A", ref, *argv[2:]]
        else:
            argv = [argv[0], "-A", ref, *argv[1:]]
    group = cli
    commands = getattr(app, "commands", None) or {}
    if commands:
        # The app's own commands (``@app.command()``) beside streamkit's, in a copy of the group;
        # one named as a streamkit command (``produce``) is the app's: it is what its user runs.
        from streamkit.cli.appcommands import click_command

        group = copy.copy(cli)
        group.commands = {**cli.commands, **{name: click_command(app, c) for name, c in commands.items()}}  # type: ignore[arg-type]
    group.main(args=argv, prog_name=sys.argv[0] if sys.argv and sys.argv[0] else "streamkit")
