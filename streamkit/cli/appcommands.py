"""Commands an app adds to its command line with ``@app.command()`` (Faust's), run by
``app.main()`` (``python app.py NAME ARGS``), and Faust's ``option``/``argument`` helpers.

A command is an async function; its click options and arguments are given to
``@app.command(...)`` in the order they appear on the command line. It runs on a fresh event
loop with a producer on the app's broker installed as the app's sender, so
``await topic.send(...)`` works in it; what it sent is flushed before it returns. A function
that takes parameters gets the command object first (Faust's ``self``: ``self.app``,
``self.say(...)``). Ctrl-C cancels it: sends already made are kept, the producer closes, and
the command line ends with exit code 130 and no traceback (``cli/main.py``).
"""

from __future__ import annotations

import json
from typing import IO, TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from streamkit.app.application import App, Command
    from streamkit.topics.topic import Topic


def option(*args: Any, show_default: bool = True, **kwargs: Any) -> Any:
    """click's ``option``, showing defaults in ``--help`` as Faust's does."""
    return click.option(*args, show_default=show_default, **kwargs)


def argument(*args: Any, **kwargs: Any) -> Any:
    """click's ``argument``."""
    return click.argument(*args, **kwargs)


class AppCommand:
    """What a command function gets as ``self``."""

    def __init__(self, app: App, command: Command) -> None:
        self.app = app
        self.command = command
        self.quiet = False

    @property
    def key_serializer(self) -> Any:
        return self.app.conf.key_serializer

    @property
    def value_serializer(self) -> Any:
        return self.app.conf.value_serializer

    def say(self, message: Any, file: IO[str] | None = None, err: bool = False, **kwargs: Any) -> None:
        """Print ``message`` (to stderr with ``err=True``) unless the command is quiet."""
        if not self.quiet:
            click.echo(message, file=file, err=bool(err), **kwargs)

    def dumps(self, obj: Any) -> str:
        return json.dumps(obj)


def click_command(app: App, command: Command) -> click.Command:
    """The click command that runs ``command`` of ``app``."""

    def callback(**params: Any) -> None:
        import asyncio  # not at import time: ``streamkit --help`` starts without the event loop

        asyncio.run(run_command(app, command, params))

    # click's decorators stack bottom-up; Faust lists them top-down.
    for decorate in reversed(command.options):
        callback = decorate(callback)
    return click.command(command.name, help=command.help)(callback)


async def run_command(app: App, command: Command, params: dict[str, Any]) -> None:
    # Imported when a command runs, not when ``streamkit.cli`` is: the command line starts
    # without the runtime (see cli/main.py on start-up).
    from streamkit._core.clock import SYSTEM_CLOCK
    from streamkit.runtime.sender import RuntimeSender
    from streamkit.transport.connect import open_log_client

    if app.sender is not None:  # a worker (or a caller) already sends for this app
        await _call(app, command, params)
        return
    client = open_log_client(app.broker, options=app.conf.client_options())
    await client.start()
    try:
        producer = client.producer()
        await producer.start()
        try:

            async def partitions(topic: Topic) -> int:
                return await client.ensure_topic(topic.name, topic.partitions or app.topic_partitions, topic.config)

            app.sender = RuntimeSender(producer, SYSTEM_CLOCK, partitions)
            try:
                await _call(app, command, params)
            finally:
                app.sender = None
                await producer.flush()
        finally:
            await producer.aclose()
    finally:
        await client.aclose()


async def _call(app: App, command: Command, params: dict[str, Any]) -> None:
    if command.takes_self:
        await command.fn(AppCommand(app, command), **params)
    else:
        await command.fn(**params)
