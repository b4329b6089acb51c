"""Where the data source's records come from and go to: segment files or a broker.

Plain code, no Spark. ``open_source_log`` picks one of two ``SourceLog``s from the options:

* ``FileLog`` (``path``): reads a data directory's segment files through ``log.reader``,
  read-only and without its lock, so it works while a worker or broker owns the directory.
  Appends (the writer's driver-side commit) go through the directory's owner when one serves
  it (``DIR/.owner``), else through a ``LogManager`` this process opens, and locks, for the
  length of the commit;
* ``BrokerLog`` (``bootstrap``): the Kafka wire protocol to ``streamkit broker``, a worker's
  loopback port, or a Kafka cluster, through ``transport.kafka_tools``.

Offsets follow Kafka: ranges are ``[start, end)``, an end offset is the next offset to be
written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from streamkit._core.errors import ConfigError
from streamkit._core.runner import run_to_end
from streamkit.log.compression import CODEC_IDS
from streamkit.log.errors import CorruptRecordError, DataDirLockedError, OffsetOutOfRangeError
from streamkit.log.manager import LogManager, owner_address
from streamkit.log.reader import (
    offset_for_timestamp,
    partition_bounds,
    read_batches,
    topic_partition_count,
)
from streamkit.log.records import (
    BatchHeader,
    NewRecord,
    Record,
    check_batch,
    decode_records,
    iter_batches,
)
from streamkit.spark.options import client_security
from streamkit.transport.base import TransportError
from streamkit.transport.kafka_tools import FetchOutOfRangeError, KafkaTools, TopicNotFoundError
from streamkit.transport.security import PLAINTEXT, ClientSecurity

# A fetch asks for this much at a time over the wire.
_FETCH_BYTES = 4 * 1024 * 1024
# Records per appended batch: well under the default max.message.bytes for small records.
_APPEND_BATCH_BYTES = 512 * 1024


class SourceLog(Protocol):
    """What the data source needs from a log."""

    topic: str

    def partition_count(self) -> int: ...

    def bounds(self, partition: int) -> tuple[int, int]:
        """(log start offset, end offset) of ``partition`` now."""
        ...

    def offset_for_timestamp(self, partition: int, timestamp: int) -> int | None:
        """The first offset whose timestamp is >= ``timestamp``; None when there is none."""
        ...

    def batches(self, partition: int, start: int, end: int) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
        """The CRC-checked batches holding offsets in ``[start, end)``, control batches left
        out; one that straddles a bound is whole (``spark.columns`` decodes them). A batch's
        bytes are valid until the next batch is asked for: copy what you keep."""
        ...

    def append(self, partition: int, records: Sequence[NewRecord], compression: str) -> None: ...

    def close(self) -> None: ...


class FileLog:
    """A topic of a data directory, read from its segment files."""

    def __init__(self, data_dir: str, topic: str) -> None:
        self.data_dir = Path(data_dir)
        self.topic = topic

    def partition_count(self) -> int:
        return topic_partition_count(self.data_dir, self.topic)

    def bounds(self, partition: int) -> tuple[int, int]:
        return partition_bounds(self.data_dir, self.topic, partition)

    def offset_for_timestamp(self, partition: int, timestamp: int) -> int | None:
        return offset_for_timestamp(self.data_dir, self.topic, partition, timestamp)

    def batches(self, partition: int, start: int, end: int) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
        return read_batches(self.data_dir, self.topic, partition, start, end, views=True)  # no copy per batch

    def append(self, partition: int, records: Sequence[NewRecord], compression: str) -> None:
        codec = CODEC_IDS.get(compression)
        if codec is None:
            raise ConfigError(f"unknown compression {compression!r}")
        owner = owner_address(self.data_dir)
        if owner is not None:
            host, port = owner
            broker = BrokerLog(f"[{host}]:{port}" if ":" in host else f"{host}:{port}", self.topic)
            try:
                broker.append(partition, records, compression)
            finally:
                broker.close()
            return
        manager = LogManager(self.data_dir, background=False)
        try:
            manager.open()
        except DataDirLockedError as exc:
            raise DataDirLockedError(
                f"{exc}; the process that holds {self.data_dir} serves no wire port to write "
                "through: stop it, or write with option('bootstrap', ...)"
            ) from exc
        try:
            part = manager.partition(self.topic, partition)
            for chunk in _chunks(records):
                part.append_records(chunk, compression_codec=codec)
            part.flush()
        finally:
            manager.close()

    def close(self) -> None:
        return None


class BrokerLog:
    """A topic reached over the Kafka wire protocol. Its connections live on a private
    event loop from the first call to ``close``."""

    def __init__(self, bootstrap: str, topic: str, security: ClientSecurity = PLAINTEXT) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._tools = KafkaTools(bootstrap, security=security)
        self._runner: asyncio.Runner | None = None

    def _run(self, work: Any) -> Any:
        if self._runner is None:
            logger = logging.getLogger("aiokafka")
            if not logger.handlers:
                logger.addHandler(logging.NullHandler())
            self._runner = asyncio.Runner()
        return run_to_end(self._runner, work)

    def _describe(self) -> Any:
        try:
            return self._run(self._tools.describe_topic(self.topic))
        except TopicNotFoundError as exc:
            raise ConfigError(f"no topic {self.topic!r} at {self.bootstrap}") from exc

    def partition_count(self) -> int:
        return len(self._describe().partitions)

    def bounds(self, partition: int) -> tuple[int, int]:
        for p in self._describe().partitions:
            if p.partition == partition:
                return int(p.log_start_offset), int(p.high_watermark)
        raise ConfigError(f"topic {self.topic!r} has no partition {partition}")

    def offset_for_timestamp(self, partition: int, timestamp: int) -> int | None:
        # The wire tools have no ListOffsets-by-time: scan (correct, not fast).
        start, end = self.bounds(partition)
        for _lat, records in read_records(self, partition, start, end):
            for r in records:
                if r.timestamp >= timestamp:
                    return r.offset
        return None

    def batches(self, partition: int, start: int, end: int) -> Iterator[tuple[BatchHeader, bytes | memoryview]]:
        """Fetched as the broker keeps them (one Fetch request per ``_FETCH_BYTES``), each
        batch CRC-checked here, as ``log.reader`` checks a segment's."""
        offset = start
        while offset < end:
            try:
                got = self._run(self._tools.fetch_batches(self.topic, partition, offset, _FETCH_BYTES))
            except FetchOutOfRangeError as exc:
                raise OffsetOutOfRangeError(offset, exc.log_start_offset, exc.high_watermark) from exc
            view = memoryview(got.data)
            reached = offset
            for pos, header in iter_batches(view):
                if header.base_offset >= end:
                    return
                try:
                    check_batch(view[pos : pos + header.size])
                except CorruptRecordError as exc:
                    raise CorruptRecordError(
                        f"{self.topic}-{partition}: the batch at offset {header.base_offset} from "
                        f"{self.bootstrap}: {exc}"
                    ) from None
                reached = max(reached, header.next_offset)
                if not header.is_control and header.next_offset > offset:
                    yield header, view[pos : pos + header.size]  # into the fetched bytes: no copy
            if reached > offset:
                offset = reached
            elif view:  # Kafka sends the first batch whole, however small max_bytes is (KIP-74)
                raise TransportError(
                    f"{self.topic}-{partition}: {self.bootstrap} answered a fetch at offset {offset} "
                    f"with {len(view)} bytes holding no whole batch"
                )
            else:
                break  # nothing more below the high watermark

    def append(self, partition: int, records: Sequence[NewRecord], compression: str) -> None:
        for chunk in _chunks(records):
            self._run(self._tools.produce(self.topic, partition, chunk, compression=compression))

    def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is None:
            return
        try:
            runner.run(self._tools.aclose())
        finally:
            runner.close()


def _chunks(records: Sequence[NewRecord]) -> Iterator[Sequence[NewRecord]]:
    """``records`` cut into runs of about ``_APPEND_BATCH_BYTES``, one batch each."""
    begin = 0
    size = 0
    for i, r in enumerate(records):
        size += 32 + len(r.key or b"") + len(r.value or b"") + sum(
            len(k) + len(v or b"") + 8 for k, v in r.headers
        )
        if size >= _APPEND_BATCH_BYTES and i + 1 > begin:
            yield records[begin : i + 1]
            begin, size = i + 1, 0
    if begin < len(records):
        yield records[begin:]


def read_records(log: SourceLog, partition: int, start: int, end: int) -> Iterator[tuple[bool, list[Record]]]:
    """The records of ``log.batches``, one chunk per batch: (log append time?, the records in
    ``[start, end)``), for the callers that want ``Record`` objects rather than columns."""
    for header, data in log.batches(partition, start, end):
        # A copy: no view into a segment's mapping may outlive this step, not even in an
        # error's traceback. The CRC was checked by batches().
        records = decode_records(header, bytes(data))
        if header.base_offset < start or header.last_offset >= end:
            records = [r for r in records if start <= r.offset < end]
        yield header.log_append_time, records


def open_source_log(
    path: str | None, bootstrap: str | None, topic: str,
    security: tuple[tuple[str, str], ...] | ClientSecurity = (),
) -> SourceLog:
    """The log the options name: ``bootstrap`` wins over ``path``; ``security`` (the ``kafka.*``
    options by Kafka's names, ``options.security_options``, or a backfill's ``ClientSecurity``)
    is how the broker is reached."""
    if bootstrap:
        if not isinstance(security, ClientSecurity):
            security = client_security(security) if security else PLAINTEXT
        return BrokerLog(bootstrap, topic, security)
    if path:
        return FileLog(path, topic)
    raise ConfigError("the streamkit data source needs option('path', DATA_DIR) or option('bootstrap', 'host:port')")
