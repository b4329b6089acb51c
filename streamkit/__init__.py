"""streamkit: Kafka's stream-processing model for Python.

    >>> import streamkit as sk
    >>> app = sk.App("hello")
    >>> sorted(n for n in sk.__all__ if n[0].isupper())[:4]
    ['Agent', 'App', 'ConfigError', 'Event']

Importing this package stays cheap: it loads no RocksDB, Spark or Kafka client.
"""

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



def __getattr__(name: str) -> str:
    """``__version__``: the installed distribution's version, declared once, in pyproject.toml
    (looked up on first use: importing importlib.metadata is not free)."""
    if name != "__version__":
        raise AttributeError(f"module 'streamkit' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("streamkit")
    except PackageNotFoundError:  # a source tree on sys.path, never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
