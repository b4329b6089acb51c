"""A data directory: its topics and partitions, their configs, the directory lock, upkeep.

Layout::

    <data>/.lock                       held (flock) by the one process that writes here
    <data>/.owner                      {"host", "port", "pid"}: where that process serves the
                                       log over the wire, so others use it instead of failing
    <data>/.clean_shutdown             present only while no process has the directory open
    <data>/.meta/topics/<topic>.json   partition count and config of each topic
    <data>/<topic>-<partition>/        a partition's segments, recovery-point and log-start-offset
                                       (see partition.py, segment.py)
    <data>/__consumer_offsets-0/       committed group offsets (see offsets.py)

Only one process opens a data directory for writing; a second gets ``DataDirLockedError``.
A read-only manager (``read_only=True``: what ``topics list/describe``, ``consume`` use) takes
the lock shared, so readers exclude a writer but not each other, and changes nothing in the
directory: no recovery truncates, no index or marker is written, damage is only reported.

A new topic's partition directories are made before its metadata file names them, and the
metadata is removed before they are: a crash never leaves a visible topic without its
partitions, and a creation that fails part-way removes what it made (all or nothing).
A topic whose metadata file cannot be read is skipped with a warning naming the file; the
other topics stay usable. A read-only manager opens a partition on first use, so listing
topics does not open every segment. Background upkeep
(a daemon thread) flushes per ``flush.ms``, applies retention and compacts; it only ever
takes a partition's lock for short, bounded steps, so appends are not stalled.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import msgspec

from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.types import TopicPartition
from streamkit.log import compaction
from streamkit.log.config import TopicConfig
from streamkit.log.errors import (
    DataDirLockedError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogClosedError,
    LogError,
    PolicyViolationError,
    TopicExistsError,
    UnknownTopicError,
)
from streamkit.log.offsets import OFFSETS_TOPIC, GroupOffsets
from streamkit.log.partition import AppendListener, Partition, fsync_dir
from streamkit.log.segment import RecoveryReport

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PARTITIONS = 10_000
# The longest file name made from a topic name: "<name>-9999" (a partition directory) and
# "<name>.json"; with Kafka's 249 characters that is 254, within the usual 255-byte limit.
_CLEAN_SHUTDOWN = ".clean_shutdown"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})
logger = logging.getLogger(__name__)


class _TopicMeta(msgspec.Struct):
    name: str
    partitions: int
    config: dict[str, str]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: int
    config: TopicConfig
    internal: bool


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    log_start_offset: int
    high_watermark: int
    size_bytes: int
    segments: int


OWNER_FILE = ".owner"


class _Owner(msgspec.Struct):
    host: str
    port: int
    pid: int


def write_owner(data_dir: str | os.PathLike[str], host: str, port: int) -> None:
    """Record where this process (the directory's owner) serves the log over the wire."""
    path = Path(data_dir) / OWNER_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(msgspec.json.encode(_Owner(host, port, os.getpid())))
    os.replace(tmp, path)


def remove_owner(data_dir: str | os.PathLike[str]) -> None:
    (Path(data_dir) / OWNER_FILE).unlink(missing_ok=True)


@dataclass(frozen=True, slots=True)
class DirectoryOwner:
    """The process that holds a data directory's lock, and where it serves the log (None
    when it serves nothing: a command that opened the directory itself)."""

    pid: int | None
    address: tuple[str, int] | None


def directory_owner(data_dir: str | os.PathLike[str]) -> DirectoryOwner | None:
    """Who holds ``data_dir``'s lock for writing; None when nobody does (the directory is free,
    or only read-only readers hold it: ``LogManager.open`` tells those apart)."""
    directory = Path(data_dir)
    lock = directory / ".lock"
    try:
        fd = os.open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
    finally:
        os.close(fd)
    pid = int(text) if text.isdigit() else None
    try:
        owner = msgspec.json.decode((directory / OWNER_FILE).read_bytes(), type=_Owner)
    except (FileNotFoundError, msgspec.DecodeError):
        return DirectoryOwner(pid, None)
    if pid is not None and owner.pid != pid:
        return DirectoryOwner(pid, None)  # a file its previous owner left, not the holder's
    return DirectoryOwner(owner.pid, (owner.host, owner.port))


def owner_address(data_dir: str | os.PathLike[str]) -> tuple[str, int] | None:
    """(host, port) of the process serving ``data_dir``, when another process holds its lock
    and serves it; None when the directory is free (or its owner serves nothing)."""
    owner = directory_owner(data_dir)
    return None if owner is None else owner.address


def validate_topic_name(name: str) -> None:
    if not _LEGAL_TOPIC.match(name) or name in (".", ".."):
        raise InvalidTopicError(
            f"invalid topic name {name!r}: use 1-249 characters of a-z, A-Z, 0-9, '.', '_', '-'"
        )


@dataclass(frozen=True, slots=True)
class UpkeepReport:
    flushed: int
    segments_deleted: int
    segments_compacted: int
    errors: int = 0  # partitions whose upkeep failed (logged); the others were still done


class LogManager:
    """Opens a data directory and owns every partition in it.

    >>> import tempfile
    >>> from streamkit.log.records import NewRecord
    >>> with LogManager(tempfile.mkdtemp(), background=False) as log:
    ...     _ = log.create_topic("greetings", partitions=2)
    ...     log.partition("greetings", 0).append_records([NewRecord(b"k", b"hello", 0)]).base_offset
    0
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        defaults: TopicConfig | None = None,
        default_partitions: int = 1,
        clock: Clock = SYSTEM_CLOCK,
        background: bool = True,
        upkeep_interval_ms: int = 200,
        retention_check_interval_ms: int = 300_000,  # Kafka's log.retention.check.interval.ms
        compaction_interval_ms: int = 15_000,
        read_only: bool = False,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.read_only = read_only
        self._warn = warn
        self.defaults = defaults or TopicConfig()
        self.default_partitions = default_partitions
        self.clock = clock
        self._background = background
        self._upkeep_interval_ms = upkeep_interval_ms
        self._retention_interval_ms = retention_check_interval_ms
        self._compaction_interval_ms = compaction_interval_ms
        self._topics: dict[str, _TopicMeta] = {}
        self._configs: dict[str, TopicConfig] = {}
        self._partitions: dict[TopicPartition, Partition] = {}
        self._lock = threading.RLock()
        self._listeners: list[AppendListener] = []
        self._lock_fd = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._offsets: GroupOffsets | None = None
        self.recovery_reports: list[RecoveryReport] = []
        self.meta_problems: list[str] = []  # unreadable topic metadata, one line per file
        self._unreadable_topics: set[str] = set()
        self._lazy = False
        self._loading = False
        self.clean_shutdown = False
        self._open = False

    # -- lifecycle -------------------------------------------------------------------------

    def open(self) -> LogManager:
        if self._open:
            return self
        if self.read_only:
            if not self.data_dir.is_dir():
                raise FileNotFoundError(f"no data directory at {self.data_dir}")
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        # A manager may be opened again after close: start from what is on disk.
        self._stop.clear()
        self._topics.clear()
        self._configs.clear()
        self._partitions.clear()
        self.recovery_reports = []
        self.meta_problems = []
        self._unreadable_topics = set()
        self._offsets = None
        self._loading = True
        try:
            marker = self.data_dir / _CLEAN_SHUTDOWN
            self.clean_shutdown = marker.exists()
            # A writer opens (and if need be recovers) every partition now: the clean marker
            # it writes on close vouches for all of them. A reader opens what it reads.
            self._lazy = self.read_only
            if not self.read_only:
                for entry in self.data_dir.iterdir():
                    if entry.name.endswith("-delete") and entry.is_dir():
                        shutil.rmtree(entry, ignore_errors=True)
            meta_dir = self.data_dir / ".meta" / "topics"
            if not self.read_only:
                meta_dir.mkdir(parents=True, exist_ok=True)
            for path in sorted(meta_dir.glob("*.json")) if meta_dir.is_dir() else []:
                self._load_topic_file(path)
            if OFFSETS_TOPIC not in self._topics and not self.read_only:
                self._create(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact", "flush.ms": "0"})
            if OFFSETS_TOPIC in self._topics:
                self._offsets = GroupOffsets(self.partition(OFFSETS_TOPIC, 0), self.clock)
            if not self.read_only:
                # From here on the directory is in use: a crash must be seen as unclean.
                marker.unlink(missing_ok=True)
                fsync_dir(self.data_dir)
        except BaseException:
            for partition in self._partitions.values():
                partition.close()
            self._partitions.clear()
            self._release_lock()
            raise
        finally:
            self._loading = False
        self._open = True
        if self._background and not self.read_only:
            self._thread = threading.Thread(target=self._upkeep_loop, name="streamkit-log-upkeep", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Flush and close every partition, mark the shutdown clean and release the lock."""
        if not self._open:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            for partition in self._partitions.values():
                partition.close()
            if not self.read_only:
                (self.data_dir / _CLEAN_SHUTDOWN).write_bytes(b"")
                fsync_dir(self.data_dir)
            self._open = False
        self._release_lock()

    def __enter__(self) -> LogManager:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _acquire_lock(self) -> None:
        path = self.data_dir / ".lock"
        if self.read_only:
            # Shared: readers exclude a writer, not each other; the writer's pid stays.
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                self._lock_fd = -1  # never opened for writing: nobody to exclude
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise DataDirLockedError(
                    f"data directory {self.data_dir} is in use by another process (pid {owner})"
                ) from None
            self._lock_fd = fd
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            readers_only = _only_shared_holders(fd)
            os.close(fd)
            if readers_only:
                raise DataDirLockedError(
                    f"data directory {self.data_dir} is being read by another streamkit command"
                ) from None
            if owner == str(os.getpid()):
                raise DataDirLockedError(
                    f"data directory {self.data_dir} is already open in this process "
                    f"(pid {owner}); close the other LogManager first"
                ) from None
            raise DataDirLockedError(
                f"data directory {self.data_dir} is in use by another process (pid {owner})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _check_open(self) -> None:
        if not self._open:
            raise LogClosedError(f"the log in {self.data_dir} is not open")

    # -- topics ----------------------------------------------------------------------------

    def _load_topic_file(self, path: Path) -> None:
        """Load one topic's metadata; an unreadable file is reported and skipped."""
        try:
            meta = msgspec.json.decode(path.read_bytes(), type=_TopicMeta)
            if meta.name != path.stem:
                raise InvalidTopicError(f"it names topic {meta.name!r}")
            if not 1 <= meta.partitions <= MAX_PARTITIONS:
                raise InvalidTopicError(f"{meta.partitions} partitions")
            config = TopicConfig.from_kafka(meta.config, base=self.defaults)
        except (OSError, msgspec.DecodeError, LogError) as exc:
            problem = f"{path}: unreadable topic metadata ({exc}); topic {path.stem!r} skipped"
            self.meta_problems.append(problem)
            self._unreadable_topics.add(path.stem)
            self._report(problem, logging.ERROR)
            return
        self._topics[meta.name] = meta
        self._configs[meta.name] = config
        if not self._lazy:
            for p in range(meta.partitions):
                self._open_partition(meta.name, p, config)

    def _report(self, message: str, level: int) -> None:
        """Log ``message``, or hand it to the ``warn`` callback when one was given (the CLI
        prints it as its one warning line; logging it too would print it twice)."""
        if self._warn is None:
            logger.log(level, "%s", message)
        else:
            logger.debug("%s", message)
            self._warn(message)

    def _open_partition(self, topic: str, p: int, config: TopicConfig) -> Partition:
        tp = TopicPartition(topic, p)
        partition = Partition(
            self.data_dir / f"{topic}-{p}", tp, config, self.clock, read_only=self.read_only
        )
        reports = partition.open(clean_shutdown=self.clean_shutdown)
        for report in reports:
            # A reader repairs nothing: the report says what it found and left as it is.
            what = f"{tp}" if self.read_only else f"recovered {tp}"
            self._report(f"{what}: {report}", logging.ERROR if report.damaged else logging.WARNING)
        self.recovery_reports.extend(reports)
        partition.listeners.extend(self._listeners)
        self._partitions[tp] = partition
        return partition

    def create_topic(
        self, name: str, partitions: int | None = None, config: Mapping[str, str] | None = None
    ) -> TopicDescription:
        """Create a topic; ``config`` holds Kafka topic configs (``{"retention.ms": "1000"}``)."""
        self._check_open()
        self._check_writable()
        validate_topic_name(name)
        if name.startswith("__"):
            raise InvalidTopicError(f"topic names starting with '__' are reserved: {name!r}")
        return self._create(name, self.default_partitions if partitions is None else partitions, config or {})

    def _create(self, name: str, partitions: int, config: Mapping[str, str]) -> TopicDescription:
        if partitions < 1 or partitions > MAX_PARTITIONS:
            raise InvalidTopicError(f"a topic needs 1 to {MAX_PARTITIONS} partitions, not {partitions}")
        parsed = TopicConfig.from_kafka(config, base=self.defaults)
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"topic {name!r} already exists")
            if name in self._unreadable_topics:
                raise TopicExistsError(
                    f"topic {name!r} has a metadata file that cannot be read: repair or remove "
                    f"{self.data_dir / '.meta' / 'topics' / (name + '.json')} first"
                )
            meta = _TopicMeta(name, partitions, dict(config))
            made: list[Partition] = []
            try:
                for p in range(partitions):
                    # Directories a deleted topic left behind (a delete cut short by a crash,
                    # after its metadata went) must not come back as this topic's data.
                    self._remove_dir(self.data_dir / f"{name}-{p}")
                    made.append(self._open_partition(name, p, parsed))
                fsync_dir(self.data_dir)
                self._write_meta(meta)
            except BaseException:
                # All or nothing: no metadata names these directories, so they go.
                for partition in made:
                    self._partitions.pop(partition.tp, None)
                    with contextlib.suppress(OSError):
                        partition.close()
                for p in range(len(made) + 1 if len(made) < partitions else partitions):
                    try:
                        self._remove_dir(self.data_dir / f"{name}-{p}")
                    except OSError:
                        logger.exception("could not remove %s", self.data_dir / f"{name}-{p}")
                raise
            self._topics[name] = meta
            self._configs[name] = parsed
        return self.describe_topic(name)

    def _write_meta(self, meta: _TopicMeta) -> None:
        path = self.data_dir / ".meta" / "topics" / f"{meta.name}.json"
        # ".<name>.tmp": no longer than "<name>.json" once the name is 249 characters.
        tmp = path.with_name(f".{meta.name}.tmp")
        with open(tmp, "wb") as f:
            f.write(msgspec.json.encode(meta))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)

    def delete_topic(self, name: str) -> None:
        self._check_open()
        self._check_writable()
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"internal topic {name!r} cannot be deleted")
        with self._lock:
            meta = self._topics.pop(name, None)
            if meta is None:
                raise UnknownTopicError(f"unknown topic {name!r}")
            self._configs.pop(name, None)
            (self.data_dir / ".meta" / "topics" / f"{name}.json").unlink()
            fsync_dir(self.data_dir / ".meta" / "topics")
            for p in range(meta.partitions):
                partition = self._partitions.pop(TopicPartition(name, p), None)
                if partition is not None:
                    partition.close()
                self._remove_dir(self.data_dir / f"{name}-{p}")
        self.offsets.forget_topic(name)

    def _remove_dir(self, directory: Path) -> None:
        """Rename ``directory`` aside (one atomic step) and delete it; a crash in between
        leaves a ``-delete`` directory that the next open removes."""
        if not directory.exists():
            return
        # Not named after the topic: a 249-character name plus a suffix would pass 255 bytes.
        doomed = directory.with_name(f"{uuid.uuid4().hex}-delete")
        os.replace(directory, doomed)
        fsync_dir(self.data_dir)
        shutil.rmtree(doomed, ignore_errors=True)

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords on one partition: move its log start offset up to ``offset``
        (-1: the high watermark; see ``Partition.delete_records``) and return the log start
        offset it has then (Kafka's low watermark).

        >>> import tempfile
        >>> from streamkit.log.records import NewRecord
        >>> with tempfile.TemporaryDirectory() as d, LogManager(d) as log:
        ...     _ = log.create_topic("events", partitions=1)
        ...     _ = log.partition("events", 0).append_records([NewRecord(b"k", b"v", 0)] * 5)
        ...     log.delete_records("events", 0, 3)
        3

        Raises ``UnknownTopicError``, ``InvalidTopicError`` for an internal topic,
        ``PolicyViolationError`` when the topic's ``cleanup.policy`` lacks ``delete`` (as Kafka),
        ``OffsetOutOfRangeError`` for an offset past the high watermark or below -1.
        """
        self._check_open()
        self._check_writable()
        if topic in INTERNAL_TOPICS:
            raise InvalidTopicError(f"cannot delete records of internal topic {topic!r}")
        part = self.partition(topic, partition)
        if "delete" not in part.config.cleanup_policy:
            raise PolicyViolationError(
                f"records of {topic}-{partition} cannot be deleted: its cleanup.policy is {part.config.cleanup_policy}"
            )
        return part.delete_records(offset)

    def alter_topic_config(
        self, name: str, changes: Mapping[str, str], *, replace: bool = False
    ) -> TopicDescription:
        """Set topic configs (Kafka names); other settings keep their values, or, with
        ``replace`` (Kafka's AlterConfigs), go back to their defaults."""
        self._check_open()
        self._check_writable()
        with self._lock:
            meta = self._topics.get(name)
            if meta is None:
                raise UnknownTopicError(f"unknown topic {name!r}")
            merged = dict(changes) if replace else {**meta.config, **changes}
            config = TopicConfig.from_kafka(merged, base=self.defaults)
            meta = _TopicMeta(name, meta.partitions, merged)
            self._write_meta(meta)
            self._topics[name] = meta
            self._configs[name] = config
            for p in range(meta.partitions):
                opened = self._partitions.get(TopicPartition(name, p))
                if opened is not None:
                    opened.update_config(config)
        return self.describe_topic(name)

    def add_partitions(self, name: str, total: int) -> TopicDescription:
        """Grow ``name`` to ``total`` partitions (Kafka's CreatePartitions: never fewer).

        The new partitions' directories are made first, then the topic's metadata names them:
        a crash in between leaves directories the next open ignores and the next growth (or a
        re-creation) clears.
        """
        self._check_open()
        self._check_writable()
        if name in INTERNAL_TOPICS:
            raise InvalidTopicError(f"internal topic {name!r} cannot change its partitions")
        with self._lock:
            meta = self._topics.get(name)
            if meta is None:
                raise UnknownTopicError(f"unknown topic {name!r}")
            if total <= meta.partitions or total > MAX_PARTITIONS:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {meta.partitions} partitions: it can grow to at most {MAX_PARTITIONS}, "
                    f"not to {total}"
                )
            config = self._configs[name]
            for p in range(meta.partitions, total):
                self._remove_dir(self.data_dir / f"{name}-{p}")
                self._open_partition(name, p, config)
            fsync_dir(self.data_dir)
            meta = _TopicMeta(name, total, meta.config)
            self._write_meta(meta)
            self._topics[name] = meta
        return self.describe_topic(name)

    def has_topic(self, name: str) -> bool:
        return name in self._topics

    def list_topics(self, *, include_internal: bool = False) -> list[str]:
        return sorted(t for t in self._topics if include_internal or t not in INTERNAL_TOPICS)

    def describe_topic(self, name: str) -> TopicDescription:
        meta = self._topics.get(name)
        if meta is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return TopicDescription(name, meta.partitions, self._configs[name], name in INTERNAL_TOPICS)

    def partition_infos(self, name: str) -> list[PartitionInfo]:
        desc = self.describe_topic(name)
        out = []
        for p in range(desc.partitions):
            part = self.partition(name, p)
            out.append(
                PartitionInfo(p, part.log_start_offset, part.high_watermark, part.size_bytes, len(part.segments))
            )
        return out

    def partition(self, topic: str, partition: int) -> Partition:
        found = self._partitions.get(TopicPartition(topic, partition))
        if found is not None:
            return found
        with self._lock:
            found = self._partitions.get(TopicPartition(topic, partition))
            if found is not None:
                return found
            meta = self._topics.get(topic)
            if meta is None:
                raise UnknownTopicError(f"unknown topic {topic!r}")
            if not 0 <= partition < meta.partitions:
                raise UnknownTopicError(f"topic {topic!r} has no partition {partition}")
            if not (self._open or self._loading):
                raise LogClosedError(f"the log in {self.data_dir} is not open")
            return self._open_partition(topic, partition, self._configs[topic])

    def partitions(self, topic: str) -> list[Partition]:
        desc = self.describe_topic(topic)
        return [self.partition(topic, p) for p in range(desc.partitions)]

    def _all_partitions(self) -> list[Partition]:
        """Every partition of every topic, opening those not opened yet."""
        out: list[Partition] = []
        for name in list(self._topics):
            try:
                out.extend(self.partitions(name))
            except UnknownTopicError:
                continue  # deleted meanwhile
        return out

    def _check_writable(self) -> None:
        if self.read_only:
            raise LogClosedError(f"the log in {self.data_dir} is open read-only")

    @property
    def offsets(self) -> GroupOffsets:
        if self._offsets is None:
            if self._open:
                raise UnknownTopicError(f"the log in {self.data_dir} has no {OFFSETS_TOPIC} topic yet")
            raise LogClosedError(f"the log in {self.data_dir} is not open")
        return self._offsets

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call ``listener(tp, high_watermark)`` after every append (from the appending thread)."""
        with self._lock:
            self._listeners.append(listener)
            for partition in self._partitions.values():  # the others get it when opened
                partition.listeners.append(listener)

    # -- upkeep ----------------------------------------------------------------------------

    def run_upkeep(
        self, *, flush: bool = True, retention: bool = True, compact: bool = True, force_compaction: bool = False
    ) -> UpkeepReport:
        """One round of upkeep now (the background thread calls this on its schedule)."""
        now = self.clock.now_ms()
        flushed = deleted = compacted = errors = 0
        if self.read_only:
            return UpkeepReport(0, 0, 0)
        for partition in self._all_partitions():
            # One damaged partition (a corrupt segment the cleaner refuses, a full disk) must
            # not stop flushes and retention of all the others, round after round.
            try:
                if flush and partition.maybe_flush():
                    flushed += 1
                if retention:
                    deleted += partition.apply_retention(now)
                if compact and partition.config.compact:
                    report = compaction.compact(partition, now, force=force_compaction)
                    if report is not None:
                        compacted += report.segments_cleaned
            except (LogError, OSError):
                errors += 1
                logger.exception("upkeep of %s failed", partition.tp)
        return UpkeepReport(flushed, deleted, compacted, errors)

    def _upkeep_loop(self) -> None:
        last_retention = last_compaction = self.clock.monotonic_ms()
        while not self._stop.wait(self._upkeep_interval_ms / 1000):
            now = self.clock.monotonic_ms()
            do_retention = now - last_retention >= self._retention_interval_ms
            do_compaction = now - last_compaction >= self._compaction_interval_ms
            if do_retention:
                last_retention = now
            if do_compaction:
                last_compaction = now
            try:
                self.run_upkeep(retention=do_retention, compact=do_compaction)
            except Exception:
                # Upkeep must outlive one bad partition; the next round tries again.
                logger.exception("log upkeep failed in %s", self.data_dir)


def _only_shared_holders(fd: int) -> bool:
    """Whether the lock on ``fd``'s file is held shared only (read-only managers)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True
