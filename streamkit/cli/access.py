"""How the CLI's commands reach a log: one small interface, one implementation per way in.

Commands code only against ``LogAccess``. Today the one implementation is
``EmbeddedAccess``: it opens the data directory itself through ``LogManager`` and so holds
the directory's lock while it works. A ``--bootstrap HOST:PORT`` implementation over the
Kafka wire protocol (a running broker or worker) slots in behind ``open_access`` without
touching the commands.

Offsets follow Kafka: a committed offset and ``Fetched.next_offset`` are the offset of the
next record to read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from streamkit._core.errors import ConfigError
from streamkit._core.types import TopicPartition
from streamkit.log.compression import CODEC_IDS
from streamkit.log.errors import DataDirLockedError
from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord, Record, decode_batches

DEFAULT_DATA_DIR = ".streamkit"


@dataclass(frozen=True, slots=True)
class LogTarget:
    """Where a command's log lives (the common options of every command)."""

    data_dir: Path


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    log_start_offset: int
    high_watermark: int
    size_bytes: int
    segments: int


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    partitions: tuple[PartitionState, ...]
    config: Mapping[str, str]  # every topic config, by its Kafka name
    internal: bool


@dataclass(frozen=True, slots=True)
class Fetched:
    records: list[Record]  # control records left out
    next_offset: int  # where the next fetch starts (past control batches and compacted gaps)
    high_watermark: int


class LogAccess(Protocol):
    """What the commands need from a log."""

    def list_topics(self, *, include_internal: bool = False) -> list[str]: ...

    def create_topic(
        self, name: str, partitions: int | None, config: Mapping[str, str]
    ) -> TopicState: ...

    def delete_topic(self, name: str) -> None: ...

    def describe_topic(self, name: str) -> TopicState: ...

    def produce(
        self, topic: str, partition: int, records: Sequence[NewRecord], *, compression: str = "none"
    ) -> int:
        """Append ``records`` as one batch; return the offset of the first.

        ``compression`` is a Kafka codec name: none, gzip, snappy, lz4 or zstd.
        """
        ...

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> Fetched:
        """Records from ``offset`` on; raises ``OffsetOutOfRangeError`` outside the log."""
        ...

    def committed(self, group: str, topic: str) -> dict[int, int]:
        """The group's committed offset of each partition of ``topic`` that has one."""
        ...

    def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None: ...

    def idle(self) -> None:
        """The caller is about to wait: let other processes use the log meanwhile."""
        ...

    def close(self) -> None: ...


Warn = Callable[[str], None]


def _ignore(_message: str) -> None:
    return None


class EmbeddedAccess:
    """``LogAccess`` over a data directory this process opens (and locks) itself.

    The directory is opened on first use and closed by ``idle`` and ``close``; a use after
    ``idle`` opens it again. Opening waits up to ``lock_wait_s`` for another streamkit
    command that holds the lock briefly (a ``consume --follow`` between two polls).
    """

    def __init__(
        self, data_dir: Path, *, create: bool = False, lock_wait_s: float = 0.5, warn: Warn = _ignore
    ) -> None:
        self.data_dir = data_dir
        self._create = create
        self._lock_wait_s = lock_wait_s
        self._warn = warn
        self._manager: LogManager | None = None

    def _log(self) -> LogManager:
        if self._manager is not None:
            return self._manager
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise ConfigError(f"data directory {self.data_dir} is not a directory")
        if not self._create and not self.data_dir.is_dir():
            raise ConfigError(
                f"no data directory at {self.data_dir} (create a topic first, or pass --data-dir)"
            )
        deadline = time.monotonic() + self._lock_wait_s
        while True:
            manager = LogManager(self.data_dir, background=False)
            try:
                manager.open()
                break
            except DataDirLockedError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)
        for report in manager.recovery_reports:
            self._warn(f"recovered {report}")
        self._manager = manager
        return manager

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._log().list_topics(include_internal=include_internal)

    def create_topic(self, name: str, partitions: int | None, config: Mapping[str, str]) -> TopicState:
        self._log().create_topic(name, partitions, config)
        return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self._log().delete_topic(name)

    def describe_topic(self, name: str) -> TopicState:
        log = self._log()
        desc = log.describe_topic(name)
        partitions = tuple(
            PartitionState(i.partition, i.log_start_offset, i.high_watermark, i.size_bytes, i.segments)
            for i in log.partition_infos(name)
        )
        return TopicState(desc.name, partitions, desc.config.to_kafka(), desc.internal)

    def produce(
        self, topic: str, partition: int, records: Sequence[NewRecord], *, compression: str = "none"
    ) -> int:
        codec = CODEC_IDS.get(compression)
        if codec is None:
            raise ConfigError(f"unknown compression {compression!r}")
        part = self._log().partition(topic, partition)
        result = part.append_records(records, compression_codec=codec)
        part.maybe_flush()  # honour flush.ms; close() flushes the rest
        return result.base_offset

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> Fetched:
        part = self._log().partition(topic, partition)
        data = part.read(offset, max_bytes)
        high_watermark = part.high_watermark
        records: list[Record] = []
        next_offset = offset
        # Partition.read has checked every batch's CRC.
        for header, batch in decode_batches(data, verify_crc=False, skip_control=False):
            next_offset = header.next_offset
            if not header.is_control:
                records.extend(r for r in batch if r.offset >= offset)
        if not data:
            # Nothing from offset on in any segment: the rest up to the end is a gap.
            next_offset = max(offset, high_watermark)
        return Fetched(records, next_offset, high_watermark)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        offsets = self._log().offsets.fetch(group)
        return {tp.partition: offset for tp, (offset, _meta) in offsets.items() if tp.topic == topic}

    def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        self._log().offsets.commit(
            group, {TopicPartition(topic, p): (offset, "") for p, offset in offsets.items()}
        )

    def idle(self) -> None:
        self.close()

    def close(self) -> None:
        if self._manager is not None:
            manager, self._manager = self._manager, None
            manager.close()


@contextmanager
def open_access(target: LogTarget, *, create: bool = False, warn: Warn = _ignore) -> Iterator[LogAccess]:
    """The log ``target`` names, closed on exit. ``create`` makes a missing data directory."""
    access = EmbeddedAccess(target.data_dir, create=create, warn=warn)
    try:
        yield access
    finally:
        access.close()
