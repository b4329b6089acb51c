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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamkit._core.errors import ConfigError, StreamkitError
    from streamkit._core.record import Record
    from streamkit._core.serde import Serde, SerdeError
    from streamkit._core.types import TopicPartition
    from streamkit.agents import Agent
    from streamkit.app import App
    from streamkit.conf import Settings
    from streamkit.services import Service
    from streamkit.streams import Event, Stream
    from streamkit.topics import Topic
    from streamkit.typenames import AgentT, ChannelT, EventT, StreamT, TableT, TopicT, uuid

__all__ = [
    "Agent",
    "AgentT",
    "App",
    "ChannelT",
    "ConfigError",
    "Event",
    "EventT",
    "Record",
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

# Where each public name is defined; imported on first use (PEP 562).
_EXPORTS = {
    "ConfigError": "streamkit._core.errors",
    "StreamkitError": "streamkit._core.errors",
    "Record": "streamkit._core.record",
    "Serde": "streamkit._core.serde",
    "SerdeError": "streamkit._core.serde",
    "TopicPartition": "streamkit._core.types",
    "Agent": "streamkit.agents",
    "App": "streamkit.app",
    "Settings": "streamkit.conf",
    "Service": "streamkit.services",
    "Event": "streamkit.streams",
    "Stream": "streamkit.streams",
    "Topic": "streamkit.topics",
    "AgentT": "streamkit.typenames",
    "ChannelT": "streamkit.typenames",
    "EventT": "streamkit.typenames",
    "StreamT": "streamkit.typenames",
    "TableT": "streamkit.typenames",
    "TopicT": "streamkit.typenames",
    "uuid": "streamkit.typenames",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"{__name__}.{name}")  # sk.windows, sk.testing, ...
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, "__version__"})


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
