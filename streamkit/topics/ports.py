"""What a declaration needs at run time from the layers above it, installed by them.

A topic declared in a plain script can send with no worker running, and ``app.main()`` runs
the command line: both need code of upper layers (``runtime``, ``cli``) that a declaration
must not import. The upper layers install it here; the package root (``streamkit``) does so
on import, so every program that declares an app has them.

    >>> from streamkit.topics import ports
    >>> ports.installed()
    True
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from streamkit._core.errors import ConfigError

if TYPE_CHECKING:
    from streamkit.app.application import App

# The runtime a script without a worker sends through: ``runtime.standalone.attach``.
ScriptAttach = Callable[["App"], Awaitable[Any]]
# The command line of ``app.main()``: ``cli.main.main_for_app``.
CommandLine = Callable[["App", Sequence[str]], None]

_script: ScriptAttach | None = None
_command_line: CommandLine | None = None


def install(*, script: ScriptAttach, command_line: CommandLine) -> None:
    global _script, _command_line
    _script, _command_line = script, command_line


def installed() -> bool:
    return _script is not None and _command_line is not None


async def attach_script(app: App) -> Any:
    """The script runtime of ``app`` (its producer and reply consumer), opened on first use."""
    if _script is None:
        raise ConfigError("no runtime is installed: import streamkit (its package root installs it)")
    return await _script(app)


def run_command_line(app: App, argv: Sequence[str]) -> None:
    if _command_line is None:
        raise ConfigError("no command line is installed: import streamkit (its package root installs it)")
    _command_line(app, argv)
