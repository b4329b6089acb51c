"""Pieces every command shares: the log options, KEY=VALUE parsing, stderr messages.

The log options: ``--data-dir DIR`` (env STREAMKIT_DATA_DIR, default ``.streamkit``) opens
the embedded log, ``--bootstrap HOST:PORT`` (env STREAMKIT_BOOTSTRAP) reaches a running
broker instead. They exclude each other: given both on the command line (or both in the
environment) the command stops with a usage error; otherwise the command line beats the
environment. A malformed HOST:PORT is a usage error; an unreachable broker ends the command
with one line and exit code 2, like a locked data directory. With ``--bootstrap``,
``--command-config FILE`` (env STREAMKIT_COMMAND_CONFIG; Kafka's tools' option) names a client
properties file of TLS and SASL settings, over those of the environment (``STREAMKIT_SASL_PASSWORD``
and the others, docs/security.md); a refused login or an untrusted certificate is one line and
exit code 2.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from streamkit.cli.access import DEFAULT_DATA_DIR, LogTarget


class InputError(click.ClickException):
    """The command's input (not its arguments) is unusable: one line, exit code 2."""

    exit_code = 2


class BootstrapServers(click.ParamType[str]):
    """``HOST:PORT``, or several joined by commas; IPv6 hosts in brackets (``[::1]:9092``)."""

    name = "HOST:PORT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        servers = [part.strip() for part in str(value).split(",")]
        for server in servers:
            problem = _host_port_problem(server)
            if problem:
                self.fail(f"{server!r} is not HOST:PORT ({problem})", param, ctx)
        return ",".join(servers)


def _host_port_problem(server: str) -> str | None:
    host, sep, port = server.rpartition(":")
    if not sep or not host:
        return "no host" if sep else "no port"
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            return "unclosed IPv6 bracket"
    elif ":" in host:
        return "put an IPv6 host in brackets"
    if any(c.isspace() for c in host):
        return "spaces in the host"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return "the port must be 1 to 65535"
    return None


def log_target_options(func: Callable[..., None]) -> Callable[..., None]:
    """Add ``--data-dir`` and ``--bootstrap`` to a command; hand it a ``target: LogTarget``."""

    @functools.wraps(func)
    def wrapper(
        *args: Any, data_dir: Path, bootstrap: str | None, command_config: Path | None, **kwargs: Any
    ) -> None:
        ctx = click.get_current_context()
        target = _target(ctx, data_dir, bootstrap)
        if target.bootstrap is not None:
            target = LogTarget(data_dir=data_dir, bootstrap=target.bootstrap, command_config=command_config)
        elif command_config is not None and ctx.get_parameter_source("command_config") == ParameterSource.COMMANDLINE:
            raise click.UsageError("--command-config is for a broker: give --bootstrap too")
        func(*args, target=target, **kwargs)

    with_config = command_config_option(wrapper)
    with_bootstrap = click.option(
        "--bootstrap",
        type=BootstrapServers(),
        envvar="STREAMKIT_BOOTSTRAP",
        help="Reach the log through the broker (or worker) at HOST:PORT instead of opening "
        "a data directory (env STREAMKIT_BOOTSTRAP).",
    )(with_config)
    return click.option(
        "--data-dir",
        type=click.Path(path_type=Path),
        default=DEFAULT_DATA_DIR,
        show_default=True,
        envvar="STREAMKIT_DATA_DIR",
        help="Data directory of the embedded log (env STREAMKIT_DATA_DIR).",
    )(with_bootstrap)


def command_config_option(func: Callable[..., None]) -> Callable[..., None]:
    """``--command-config FILE``: Kafka's client settings (TLS, SASL) for reaching a broker."""
    return click.option(
        "--command-config",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        envvar="STREAMKIT_COMMAND_CONFIG",
        metavar="FILE",
        help="Client properties file with Kafka's TLS and SASL settings (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.ca.location, ...), over the STREAMKIT_* variables of docs/security.md "
        "(env STREAMKIT_COMMAND_CONFIG).",
    )(func)


_RANK = {ParameterSource.COMMANDLINE: 2, ParameterSource.ENVIRONMENT: 1}


def _target(ctx: click.Context, data_dir: Path, bootstrap: str | None) -> LogTarget:
    """The command line beats the environment; both at the same level is an error."""
    if bootstrap is None:
        return LogTarget(data_dir=data_dir)
    dir_rank = _RANK.get(ctx.get_parameter_source("data_dir") or ParameterSource.DEFAULT, 0)
    bootstrap_rank = _RANK.get(ctx.get_parameter_source("bootstrap") or ParameterSource.DEFAULT, 0)
    if dir_rank == bootstrap_rank == 2:
        raise click.UsageError("--bootstrap and --data-dir exclude each other: give one")
    if dir_rank == bootstrap_rank == 1:
        raise click.UsageError(
            "STREAMKIT_BOOTSTRAP and STREAMKIT_DATA_DIR are both set: unset one, "
            "or pick with --bootstrap or --data-dir"
        )
    if dir_rank > bootstrap_rank:
        return LogTarget(data_dir=data_dir)
    return LogTarget(data_dir=data_dir, bootstrap=bootstrap)


def parse_pairs(values: Iterable[str], option: str) -> list[tuple[str, str]]:
    """``KEY=VALUE`` strings as pairs; a usage error names ``option`` when one has no '='."""
    pairs = []
    for raw in values:
        key, sep, value = raw.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {raw!r}", param_hint=option)
        pairs.append((key, value))
    return pairs


def warn(message: str) -> None:
    click.echo(f"streamkit: warning: {message}", err=True)


def info(message: str) -> None:
    """A status line for people; stdout stays for data."""
    click.echo(message, err=True)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``count(1, "batch", "batches")`` -> "1 batch"; ``count(2, "record")`` -> "2 records"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns
