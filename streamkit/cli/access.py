"""How the CLI's commands reach a log: one small interface, one implementation per way in.

Commands code only against ``LogAccess``; ``open_access`` picks the implementation:

* ``BrokerAccess`` (``--bootstrap HOST:PORT``): the Kafka wire protocol to a running
  ``streamkit broker``, a worker, or a Kafka cluster, through ``transport.kafka_tools``.
  Segment sizes and counts do not travel over the wire: they are None there. An unreachable
  broker is a ``TransportError`` like every other wire failure, so the command ends with one
  line and exit code 2 (the log named cannot be used, as with a locked data directory).
* ``DataDirAccess`` (``--data-dir DIR``, the default): ``EmbeddedAccess`` opens the
  directory itself through ``LogManager`` and holds its lock while it works: read-only (a
  shared lock; nothing in the directory changes, damage is reported, never repaired) until
  the first call that writes (create, delete, alter, produce, commit), which reopens it for
  writing; only then may recovery repair, and a cut it makes is reported as data loss. When another
  process holds the lock and has recorded where it serves the wire protocol in
  ``DIR/.owner`` (see ``log.manager``: a broker or a worker writes it), the command goes
  through that owner instead (DESIGN.md: one data directory, one owner, many users). A
  missing or malformed ``.owner``, or nothing answering at its address, leaves the usual
  "in use by another process" error.

Offsets follow Kafka: a committed offset and ``Fetched.next_offset`` are the offset of the
next record to read.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from streamkit._core.errors import ConfigError
from streamkit._core.types import TopicPartition
from streamkit.log.compression import CODEC_IDS
from streamkit.log.errors import DataDirLockedError, OffsetOutOfRangeError
from streamkit.log.manager import LogManager, owner_address
from streamkit.log.offsets import OFFSETS_TOPIC
from streamkit.log.partition import Partition
from streamkit.log.producers import (
    PartitionProducerState,
    committed_records,
    last_stable_offset,
    scan_state,
)
from streamkit.log.records import NewRecord, Record, decode_batches

if TYPE_CHECKING:
    import asyncio

    from streamkit.transport.kafka_tools import KafkaTools
    from streamkit.transport.security import ClientSecurity

DEFAULT_DATA_DIR = ".streamkit"

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class LogTarget:
    """Where a command's log lives (the common options of every command).

    ``bootstrap`` (HOST:PORT[,HOST:PORT...]), when set, wins: the log is reached over the
    wire and ``data_dir`` is not used; it is reached with the TLS and SASL settings of the
    environment and ``command_config`` (``transport/security.py``).
    """

    data_dir: Path
    bootstrap: str | None = None
    command_config: Path | None = None  # Kafka's client settings for the broker (TLS, SASL)


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    log_start_offset: int
    high_watermark: int
    size_bytes: int | None  # None when unknown (over the wire)
    segments: int | None


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

    def add_partitions(self, name: str, total: int) -> TopicState:
        """Grow topic ``name`` to ``total`` partitions (never fewer)."""
        ...

    def describe_topic(self, name: str) -> TopicState: ...

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Move the partition's log start offset up to ``offset`` (-1: the high watermark),
        Kafka's DeleteRecords; return the log start offset it has then."""
        ...

    def produce(
        self, topic: str, partition: int, records: Sequence[NewRecord], *, compression: str = "none"
    ) -> int:
        """Append ``records`` as one batch; return the offset of the first.

        ``compression`` is a Kafka codec name: none, gzip, snappy, lz4 or zstd.
        """
        ...

    def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, read_committed: bool = False
    ) -> Fetched:
        """Records from ``offset`` on; raises ``OffsetOutOfRangeError`` outside the log.

        ``read_committed``: only below the last stable offset (reported as the high
        watermark), without the records of aborted transactions."""
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


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while the directory is opened or closed (or a follower writes
    records and records its position), and deliver them after.

    A ``consume --follow`` opens and closes the directory on every poll; an interrupt that
    landed between taking the lock and recording the manager left a lock held by a manager
    nobody closed, so the command's own last commit found the directory locked (exit 2), and
    one inside ``close`` left it not cleanly shut down. Only Python-level handlers are held;
    an ignored or default disposition stays as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        if callable(signal.getsignal(signum)):
            previous[signum] = signal.signal(signum, lambda received, _frame: held.append(received))
    try:
        yield
    finally:
        for held_signal, handler in previous.items():
            signal.signal(held_signal, handler)
        for received in held:
            signal.raise_signal(received)


class EmbeddedAccess:
    """``LogAccess`` over a data directory this process opens (and locks) itself.

    The directory is opened on first use and closed by ``idle`` and ``close``; a use after
    ``idle`` opens it again. Reads open it read-only; the first write reopens it writable. Opening waits up to ``lock_wait_s`` for another streamkit
    command that holds the lock briefly (a ``consume --follow`` between two polls).
    """

    def __init__(
        self, data_dir: Path, *, create: bool = False, lock_wait_s: float = 0.5, warn: Warn = _ignore
    ) -> None:
        self.data_dir = data_dir
        self._create = create
        self._lock_wait_s = lock_wait_s
        self._warn = warn
        self._warned: set[str] = set()
        self._manager: LogManager | None = None
        self._txn_states: dict[TopicPartition, tuple[int, PartitionProducerState]] = {}

    def open(self, *, lock_wait_s: float | None = None, write: bool = False) -> None:
        """Open the directory now (a no-op when open); ``lock_wait_s`` overrides the wait."""
        self._open(self._lock_wait_s if lock_wait_s is None else lock_wait_s, write)

    def _log(self, *, write: bool = False) -> LogManager:
        return self._open(self._lock_wait_s, write)

    def _open(self, lock_wait_s: float, write: bool) -> LogManager:
        if self._manager is not None:
            if not write or not self._manager.read_only:
                return self._manager
            self.close()  # reopen for writing
        if self.data_dir.exists() and not self.data_dir.is_dir():
            raise ConfigError(f"data directory {self.data_dir} is not a directory")
        if not self.data_dir.is_dir():
            if not self._create:
                raise ConfigError(
                    f"no data directory at {self.data_dir} (create a topic first, or pass --data-dir)"
                )
            write = True  # making the directory is a write
        deadline = time.monotonic() + lock_wait_s
        with signals_held():
            while True:
                manager = LogManager(self.data_dir, background=False, read_only=not write, warn=self._warn_once)
                try:
                    manager.open()
                    break
                except DataDirLockedError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.02)
            self._manager = manager
        return manager

    def _warn_once(self, message: str) -> None:
        # A directory reopened (``idle``, a first write) reports the same damage again.
        if message not in self._warned:
            self._warned.add(message)
            self._warn(message)

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._log().list_topics(include_internal=include_internal)

    def create_topic(self, name: str, partitions: int | None, config: Mapping[str, str]) -> TopicState:
        self._log(write=True).create_topic(name, partitions, config)
        return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self._log(write=True).delete_topic(name)

    def add_partitions(self, name: str, total: int) -> TopicState:
        self._log(write=True).add_partitions(name, total)
        return self.describe_topic(name)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return self._log(write=True).delete_records(topic, partition, offset)

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
        part = self._log(write=True).partition(topic, partition)
        result = part.append_records(records, compression_codec=codec)
        part.maybe_flush()  # honour flush.ms; close() flushes the rest
        return result.base_offset

    def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, read_committed: bool = False
    ) -> Fetched:
        part = self._log().partition(topic, partition)
        if read_committed:
            return self._fetch_committed(part, offset, max_bytes)
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

    def _fetch_committed(self, part: Partition, offset: int, max_bytes: int) -> Fetched:
        """Read committed: the transactions' state comes from a scan of the partition's batch
        headers, redone only when the partition grew."""
        high_watermark = part.high_watermark
        cached = self._txn_states.get(part.tp)
        if cached is None or cached[0] != high_watermark:
            cached = self._txn_states[part.tp] = (high_watermark, scan_state(part))
        state = cached[1]
        stable = last_stable_offset(state, high_watermark, part.log_start_offset)
        if offset >= stable:
            part.read(offset, 1)  # raises OffsetOutOfRangeError past the end, like a read
            return Fetched([], offset, stable)
        data = part.read(offset, max_bytes)
        records, next_offset = committed_records(data, offset, stable, list(state.aborted), 1 << 30)
        if not data:
            next_offset = stable
        return Fetched(records, next_offset, stable)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        log = self._log()
        if not log.has_topic(OFFSETS_TOPIC):
            return {}  # nothing was ever committed here
        offsets = log.offsets.fetch(group)
        return {tp.partition: offset for tp, (offset, _meta) in offsets.items() if tp.topic == topic}

    def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        self._log(write=True).offsets.commit(
            group, {TopicPartition(topic, p): (offset, "") for p, offset in offsets.items()}
        )

    def idle(self) -> None:
        self.close()

    def close(self) -> None:
        if self._manager is not None:
            with signals_held():
                manager, self._manager = self._manager, None
                manager.close()


class BrokerAccess:
    """``LogAccess`` over the Kafka wire protocol to the broker at ``bootstrap``.

    Its connections live on one private event loop from the first call to ``close``, so a
    ``consume --follow`` keeps its fetch consumer (and what it prefetched) between polls.
    """

    def __init__(self, bootstrap: str, security: ClientSecurity | None = None) -> None:
        # The Kafka client and asyncio are imported only on this path: a command on a data
        # directory that nobody else owns loads neither (see cli/main.py on start-up).
        from streamkit.transport.kafka_tools import KafkaTools
        from streamkit.transport.security import PLAINTEXT

        self.bootstrap = bootstrap
        self.security = security or PLAINTEXT
        self._tools = KafkaTools(bootstrap, security=self.security)
        self._committed_tools: KafkaTools | None = None  # a read_committed fetch consumer
        self._runner: asyncio.Runner | None = None

    def _run(self, work: Coroutine[Any, Any, _T]) -> _T:
        import asyncio

        from streamkit._core.runner import run_to_end
        from streamkit.transport.kafka_tools import FetchOutOfRangeError  # loaded by __init__

        if self._runner is None:
            _quiet_aiokafka()
            self._runner = asyncio.Runner()
        try:
            return run_to_end(self._runner, work)
        except FetchOutOfRangeError as exc:
            raise OffsetOutOfRangeError(exc.offset, exc.log_start_offset, exc.high_watermark) from exc

    def connect(self) -> None:
        """Connect now (else the first call does); raises ``TransportError`` when unreachable."""
        self._run(self._tools.start())

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._run(self._tools.list_topics(include_internal=include_internal))

    def create_topic(self, name: str, partitions: int | None, config: Mapping[str, str]) -> TopicState:
        self._run(self._tools.create_topic(name, partitions or 1, config))
        return self.describe_topic(name)

    def delete_topic(self, name: str) -> None:
        self._run(self._tools.delete_topic(name))

    def add_partitions(self, name: str, total: int) -> TopicState:
        self._run(self._tools.add_partitions(name, total))
        return self.describe_topic(name)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return self._run(self._tools.delete_records(topic, partition, offset))

    def describe_topic(self, name: str) -> TopicState:
        desc = self._run(self._tools.describe_topic(name))
        partitions = tuple(
            PartitionState(p.partition, p.log_start_offset, p.high_watermark, None, None)
            for p in desc.partitions
        )
        return TopicState(desc.name, partitions, desc.config, desc.internal)

    def produce(
        self, topic: str, partition: int, records: Sequence[NewRecord], *, compression: str = "none"
    ) -> int:
        return self._run(self._tools.produce(topic, partition, records, compression=compression))

    def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, read_committed: bool = False
    ) -> Fetched:
        tools = self._tools
        if read_committed:
            if self._committed_tools is None:
                from streamkit.transport.kafka_tools import KafkaTools

                self._committed_tools = KafkaTools(self.bootstrap, isolation_level="read_committed", security=self.security)
            tools = self._committed_tools
        got = self._run(tools.fetch(topic, partition, offset, max_bytes))
        records = [Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got.records]
        return Fetched(records, got.next_offset, got.high_watermark)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        return self._run(self._tools.committed(group, topic))

    def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        self._run(self._tools.commit(group, topic, offsets))

    def idle(self) -> None:
        return None  # nothing is held that another process waits for

    def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            runner.run(self._tools.aclose())
            if self._committed_tools is not None:
                runner.run(self._committed_tools.aclose())
        finally:
            runner.close()


def _quiet_aiokafka() -> None:
    """Keep aiokafka's log lines (connection retries) off a command's stderr.

    Without a handler of its own, Python prints a library's warnings to stderr; the command
    reports a failure itself, in one line. A logging setup of the caller still sees them.
    """
    logger = logging.getLogger("aiokafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


class DataDirAccess:
    """``LogAccess`` over a data directory: opened here, or reached through its owner.

    Every call first opens the directory (``EmbeddedAccess``); when another process holds
    its lock and a live owner is recorded in ``.owner``, this and every later call go over
    the wire to that owner instead. ``idle`` lets go of the directory, as ``EmbeddedAccess``
    does.
    """

    def __init__(self, data_dir: Path, *, create: bool = False, warn: Warn = _ignore) -> None:
        self.data_dir = data_dir
        self._embedded = EmbeddedAccess(data_dir, create=create, warn=warn)
        self._owner: BrokerAccess | None = None

    def _access(self, *, write: bool = False) -> LogAccess:
        if self._owner is not None:
            return self._owner
        try:
            self._embedded.open(lock_wait_s=0, write=write)
        except DataDirLockedError:
            self._owner = connect_to_owner(self.data_dir)
            if self._owner is not None:
                return self._owner
            # A brief holder (another command) may let go: wait as usual.
            self._embedded.open(write=write)
        return self._embedded

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return self._access().list_topics(include_internal=include_internal)

    def create_topic(self, name: str, partitions: int | None, config: Mapping[str, str]) -> TopicState:
        return self._access(write=True).create_topic(name, partitions, config)

    def delete_topic(self, name: str) -> None:
        self._access(write=True).delete_topic(name)

    def add_partitions(self, name: str, total: int) -> TopicState:
        return self._access(write=True).add_partitions(name, total)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return self._access(write=True).delete_records(topic, partition, offset)

    def describe_topic(self, name: str) -> TopicState:
        return self._access().describe_topic(name)

    def produce(
        self, topic: str, partition: int, records: Sequence[NewRecord], *, compression: str = "none"
    ) -> int:
        return self._access(write=True).produce(topic, partition, records, compression=compression)

    def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, *, read_committed: bool = False
    ) -> Fetched:
        return self._access().fetch(topic, partition, offset, max_bytes, read_committed=read_committed)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        return self._access().committed(group, topic)

    def commit(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        self._access(write=True).commit(group, topic, offsets)

    def idle(self) -> None:
        if self._owner is None:
            self._embedded.idle()

    def close(self) -> None:
        try:
            self._embedded.close()
        finally:
            if self._owner is not None:
                self._owner.close()


def connect_to_owner(data_dir: Path) -> BrokerAccess | None:
    """A connected ``BrokerAccess`` to the process that holds ``data_dir`` and serves it.

    None when nobody holds the directory, its ``.owner`` is missing or malformed
    (``log.manager.owner_address``), or nothing answers at the recorded address.
    """
    owner = owner_address(data_dir)
    if owner is None:
        return None
    from streamkit.transport.base import TransportError  # loaded by BrokerAccess

    host, port = owner
    access = BrokerAccess(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    try:
        access.connect()
    except TransportError:
        access.close()
        return None
    return access


@contextmanager
def open_access(target: LogTarget, *, create: bool = False, warn: Warn = _ignore) -> Iterator[LogAccess]:
    """The log ``target`` names, closed on exit. ``create`` makes a missing data directory."""
    access: LogAccess
    if target.bootstrap is not None:
        from streamkit.transport.security import command_line_security

        access = BrokerAccess(target.bootstrap, command_line_security(target.command_config))
    else:
        access = DataDirAccess(target.data_dir, create=create, warn=warn)
    try:
        yield access
    finally:
        access.close()
