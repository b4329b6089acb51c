"""Pieces every command shares: the log options, KEY=VALUE parsing, stderr messages."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click

from streamkit.cli.access import DEFAULT_DATA_DIR, LogTarget


class InputError(click.ClickException):
    """The command's input (not its arguments) is unusable: one line, exit code 2."""

    exit_code = 2


def log_target_options(func: Callable[..., None]) -> Callable[..., None]:
    """Add ``--data-dir`` to a command and hand it a ``target: LogTarget`` instead."""

    @functools.wraps(func)
    def wrapper(*args: Any, data_dir: Path, **kwargs: Any) -> None:
        func(*args, target=LogTarget(data_dir=data_dir), **kwargs)

    return click.option(
        "--data-dir",
        type=click.Path(path_type=Path),
        default=DEFAULT_DATA_DIR,
        show_default=True,
        envvar="STREAMKIT_DATA_DIR",
        help="Data directory of the embedded log (env STREAMKIT_DATA_DIR).",
    )(wrapper)


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
