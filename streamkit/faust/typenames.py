"""Faust's top-level type names and helpers, spelled as Faust spells them.

Faust code annotates with ``StreamT``, ``TopicT``, ``AgentT``, ``EventT``, ``ChannelT`` and
``TableT``; here they name streamkit's own classes (no mirror interfaces), so annotations and
``isinstance`` checks keep working after ``import streamkit as faust``. All are subscriptable
at run time (``StreamT[Order]``), as Faust's.

    >>> import streamkit as sk
    >>> sk.StreamT is sk.Stream and sk.TopicT is sk.Topic, sk.StreamT[int]
    (True, streamkit.agents.stream.Stream[int])
    >>> len(sk.uuid())
    36

``ChannelT`` is ``Topic``; an in-memory channel (``app.channel()``) is a
``streamkit.agents.channel.Channel``. ``TableT`` is the dict-like protocol a table offers; tables are not offered
yet, so it serves annotations only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, TypeVar
from uuid import uuid4

from streamkit.agents.agent import Agent
from streamkit.agents.stream import Event, Stream
from streamkit.topics.topic import Topic

KT = TypeVar("KT")
VT = TypeVar("VT")

StreamT = Stream
TopicT = Topic
ChannelT = Topic
AgentT = Agent
EventT = Event


class TableT(Protocol[KT, VT]):
    """What a table offers: a mutable mapping of keys to values."""

    def __getitem__(self, key: KT) -> VT: ...
    def __setitem__(self, key: KT, value: VT) -> None: ...
    def __delitem__(self, key: KT) -> None: ...
    def __contains__(self, key: object) -> bool: ...
    def __iter__(self) -> Iterator[KT]: ...
    def __len__(self) -> int: ...


def uuid() -> str:
    """A random UUID as text (Faust's ``faust.uuid()``), e.g. for record ids."""
    return str(uuid4())
