"""Where the coordinator keeps committed offsets: the ``GroupOffsetStore`` port.

The coordinator validates OffsetCommit requests against group membership; storing them is
the store's job. The log's durable implementation lives in ``streamkit/log/offsets.py``;
``MemoryOffsetStore`` here is the in-memory one for tests and throwaway brokers.

Contract of every store:

* ``commit`` is durable when it returns, and atomic per call (all partitions or none);
* ``fetch`` returns the latest committed ``(offset, metadata)`` per partition, leaving out
  partitions that have none; ``partitions=None`` means all of the group's partitions;
* ``groups`` lists every group that has committed offsets.

The coordinator calls the store from a worker thread (``asyncio.to_thread``) and never
runs two calls at once, so a store needs no locking of its own for the coordinator's sake.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from streamkit._core.types import TopicPartition


class GroupOffsetStore(Protocol):
    def commit(self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str]]) -> None:
        """Store the offsets durably."""
        ...

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[int, str]]:
        """The committed (offset, metadata) of the given partitions (None: all of them)."""
        ...

    def groups(self) -> list[str]:
        """Every group with committed offsets."""
        ...

    def delete_group(self, group_id: str) -> None:
        """Forget every committed offset of the group, durably."""
        ...


class MemoryOffsetStore:
    """A ``GroupOffsetStore`` in a dict; nothing survives the process.

    >>> store = MemoryOffsetStore()
    >>> store.commit("g", {TopicPartition("t", 0): (42, "")})
    >>> store.fetch("g", None)
    {TopicPartition(topic='t', partition=0): (42, '')}
    """

    def __init__(self) -> None:
        self._offsets: dict[str, dict[TopicPartition, tuple[int, str]]] = {}

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str]]) -> None:
        if offsets:
            self._offsets.setdefault(group_id, {}).update(offsets)

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[int, str]]:
        committed = self._offsets.get(group_id, {})
        if partitions is None:
            return dict(committed)
        return {tp: committed[tp] for tp in partitions if tp in committed}

    def groups(self) -> list[str]:
        return list(self._offsets)

    def delete_group(self, group_id: str) -> None:
        self._offsets.pop(group_id, None)
