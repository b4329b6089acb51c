"""streamkit: Kafka's stream-processing model for Python.

    >>> import streamkit as sk
    >>> app = sk.App("hello")
    >>> sorted(n for n in sk.__all__ if n[0].isupper())[:4]
    ['Agent', 'AgentT', 'App', 'ChannelT']

Importing this package stays cheap: it loads no RocksDB, Spark or Kafka client, and none of
the names below until one is first used (``sk.App``, ``from streamkit import App``), so a
program that needs only a part of streamkit (the ``streamkit`` command line, the log) does not
pay for the rest. A subpackage is reached the same way (``sk.windows.Tumbling``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streamkit.topics import ports

if TYPE_CHECKING:
    from streamkit._core.errors import ConfigError, StreamkitError
    from streamkit._core.record import Record
    from streamkit._core.serde import Serde, SerdeError
    from streamkit._core.types import TopicPartition
    from streamkit.agents.agent import Agent
    from streamkit.agents.stream import Event, Stream
    from streamkit.app.application import App
    from streamkit.app.conf import Settings
    from streamkit.app.credentials import (
        GSSAPICredentials,
        OAuthCredentials,
        SASLCredentials,
        SSLCredentials,
    )
    from streamkit.app.services import Service
    from streamkit.faust.typenames import AgentT, ChannelT, EventT, StreamT, TableT, TopicT, uuid
    from streamkit.topics.topic import Topic

__all__ = [
    "Agent",
    "AgentT",
    "App",
    "ChannelT",
    "ConfigError",
    "Event",
    "EventT",
    "GSSAPICredentials",
    "OAuthCredentials",
    "Record",
    "SASLCredentials",
    "SSLCredentials",
    "Serde",
    "SerdeError",
    "Service",
    "Settings",
    "Stream",
    "StreamT",
    "StreamkitError",
    "TableT",
    "Topic",
    "TopicPartition",
    "TopicT",
    "__version__",
    "uuid",
]



def _exports() -> dict[str, Any]:
    """Every public name, from the modules that define them (imported on first use of one)."""
    from streamkit._core.errors import ConfigError, StreamkitError
    from streamkit._core.record import Record
    from streamkit._core.serde import Serde, SerdeError
    from streamkit._core.types import TopicPartition
    from streamkit.agents.agent import Agent
    from streamkit.agents.stream import Event, Stream
    from streamkit.app.application import App
    from streamkit.app.conf import Settings
    from streamkit.app.credentials import (
        GSSAPICredentials,
        OAuthCredentials,
        SASLCredentials,
        SSLCredentials,
    )
    from streamkit.app.services import Service
    from streamkit.faust.typenames import AgentT, ChannelT, EventT, StreamT, TableT, TopicT, uuid
    from streamkit.topics.topic import Topic

    return {
        "ConfigError": ConfigError, "StreamkitError": StreamkitError, "Record": Record, "Serde": Serde,
        "SerdeError": SerdeError, "TopicPartition": TopicPartition, "Agent": Agent, "Event": Event,
        "Stream": Stream, "App": App, "Settings": Settings, "Service": Service, "AgentT": AgentT,
        "ChannelT": ChannelT, "EventT": EventT, "StreamT": StreamT, "TableT": TableT, "TopicT": TopicT,
        "uuid": uuid, "Topic": Topic, "SASLCredentials": SASLCredentials, "SSLCredentials": SSLCredentials,
        "GSSAPICredentials": GSSAPICredentials, "OAuthCredentials": OAuthCredentials,
    }


def _subpackage(name: str) -> Any:
    """``sk.windows``, ``faust.web``, ...: the public subpackages, imported on first use."""
    if name == "windows":
        import streamkit.windows

        return streamkit.windows
    if name == "tables":
        import streamkit.tables

        return streamkit.tables
    if name == "testing":
        import streamkit.testing

        return streamkit.testing
    if name == "web":
        import streamkit.web

        return streamkit.web
    if name == "spark":
        import streamkit.spark

        return streamkit.spark
    return None


def _attach_script(app: Any) -> Any:
    from streamkit.runtime.standalone import attach

    return attach(app)


def _command_line(app: Any, argv: Any) -> None:
    from streamkit.cli.main import main_for_app

    main_for_app(app, list(argv))


# The package root is the composition root: it gives declarations what they need of the
# runtime and the command line at run time (``topics/ports.py``) without importing either.
ports.install(script=_attach_script, command_line=_command_line)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    if name in __all__:
        globals().update(_exports())  # the next lookup is a plain attribute
        return globals()[name]
    if not name.startswith("_"):
        module = _subpackage(name)
        if module is not None:
            return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _version() -> str:
    """The installed distribution's version, declared once, in pyproject.toml (looked up on
    first use: importing importlib.metadata is not free)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("streamkit")
    except PackageNotFoundError:  # a source tree on sys.path, never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
