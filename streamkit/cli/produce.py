"""``streamkit produce``: lines from stdin become records, written in batches.

Lines are read in chunks of up to ``--batch-size`` lines; a chunk ends early when no more
input is waiting (so typed lines go out as they are entered). Each chunk becomes at most one
batch per partition, split further only to stay under the topic's ``max.message.bytes``.

Partitioning, as Kafka's producer does it: ``--partition`` wins; a keyed record goes to
``toPositive(murmur2(key)) % partitions``; unkeyed records are spread round-robin from a
random first partition.
"""

from __future__ import annotations

import os
import random
import select
import sys
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import click

from streamkit._core.clock import SYSTEM_CLOCK
from streamkit._core.errors import ConfigError
from streamkit._core.partitioner import partition_for_key
from streamkit.cli.access import LogAccess, LogTarget, open_access
from streamkit.cli.common import InputError, count, info, log_target_options, parse_pairs, warn
from streamkit.log.compression import CODEC_IDS
from streamkit.log.records import BATCH_OVERHEAD, Header, NewRecord

_RECORD_OVERHEAD = 32  # a generous bound on one record's varints and attributes
_READ_SIZE = 64 * 1024


@click.command()
@click.argument("topic")
@click.option(
    "--key-separator",
    "-K",
    metavar="SEP",
    help="Split each line at the first SEP into key and value (a line without SEP is an error).",
)
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Write every record to this partition.")
@click.option(
    "--header",
    "-H",
    "headers",
    multiple=True,
    metavar="KEY=VALUE",
    help="A header added to every record (repeatable).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1, max=100_000),
    default=1000,
    show_default=True,
    help="Most lines per batch.",
)
@click.option(
    "--compression",
    type=click.Choice(sorted(CODEC_IDS, key=CODEC_IDS.__getitem__)),
    default="none",
    show_default=True,
    help="Compression codec of the batches.",
)
@log_target_options
def produce(
    topic: str,
    key_separator: str | None,
    partition: int | None,
    headers: tuple[str, ...],
    batch_size: int,
    compression: str,
    target: LogTarget,
) -> None:
    """Write each line of stdin as a record to TOPIC.

    \b
    Examples:
      printf 'alice:1\\nbob:2\\n' | streamkit produce orders --key-separator :
      seq 1000 | streamkit produce numbers --partition 0
    """
    if key_separator == "":
        raise click.BadParameter("must not be empty", param_hint="--key-separator")
    separator = key_separator.encode() if key_separator is not None else None
    record_headers: list[Header] = [(k, v.encode()) for k, v in parse_pairs(headers, "--header")]
    stdin = sys.stdin.buffer
    with open_access(target, warn=warn) as access:
        writer = _Writer(access, topic, partition, compression)
        try:
            _produce_lines(writer, read_line_chunks(stdin, batch_size), separator, record_headers)
        except KeyboardInterrupt:
            info(writer.summary())  # what was written before Ctrl-C stays written
            raise
    info(writer.summary())


def _produce_lines(
    writer: _Writer, chunks: Iterator[list[bytes]], separator: bytes | None, headers: list[Header]
) -> None:
    """Each chunk of lines becomes records written together; stops at a line without a key."""
    line_no = 0
    for chunk in chunks:
        now = SYSTEM_CLOCK.now_ms()
        records: list[NewRecord] = []
        for line in chunk:
            line_no += 1
            key: bytes | None = None
            if separator is not None:
                key, found, line = line.partition(separator)
                if not found:
                    writer.write(records)
                    raise InputError(
                        f"line {line_no} has no key separator "
                        f"{separator.decode(errors='backslashreplace')!r} "
                        f"({writer.records} records before it were written)"
                    )
            records.append(NewRecord(key, line, now, headers))
        writer.write(records)


class _Writer:
    """Routes records to partitions and appends them in size-capped batches."""

    def __init__(self, access: LogAccess, topic: str, partition: int | None, compression: str) -> None:
        state = access.describe_topic(topic)
        if state.internal:
            raise ConfigError(f"topic {topic!r} is internal; streamkit writes it itself")
        self.partitions = len(state.partitions)
        if partition is not None and partition >= self.partitions:
            raise click.BadParameter(
                f"topic {topic!r} has partitions 0 to {self.partitions - 1}", param_hint="--partition"
            )
        self.access = access
        self.topic = topic
        self.fixed_partition = partition
        self.compression = compression
        self.max_batch_bytes = int(state.config.get("max.message.bytes", str(1024 * 1024)))
        self.next_unkeyed = random.randrange(self.partitions)
        self.records = 0
        self.batches = 0
        self.per_partition: dict[int, int] = {}

    def route(self, record: NewRecord) -> int:
        if self.fixed_partition is not None:
            return self.fixed_partition
        if record.key is not None:
            return partition_for_key(record.key, self.partitions)
        p = self.next_unkeyed
        self.next_unkeyed = (p + 1) % self.partitions
        return p

    def write(self, records: Sequence[NewRecord]) -> None:
        by_partition: dict[int, list[NewRecord]] = {}
        for record in records:
            by_partition.setdefault(self.route(record), []).append(record)
        for p in sorted(by_partition):
            for batch in self._split(by_partition[p]):
                self.access.produce(self.topic, p, batch, compression=self.compression)
                self.batches += 1
                self.records += len(batch)
                self.per_partition[p] = self.per_partition.get(p, 0) + len(batch)

    def _split(self, records: list[NewRecord]) -> Iterator[list[NewRecord]]:
        budget = self.max_batch_bytes - BATCH_OVERHEAD
        batch: list[NewRecord] = []
        size = 0
        for record in records:
            n = _estimate(record)
            if batch and size + n > budget:
                yield batch
                batch, size = [], 0
            batch.append(record)
            size += n
        if batch:
            yield batch

    def summary(self) -> str:
        spread = ", ".join(f"{p}: {n}" for p, n in sorted(self.per_partition.items()))
        where = f" (partition {spread})" if len(self.per_partition) == 1 else f" (partitions {spread})"
        return (
            f"produced {count(self.records, 'record')} in {count(self.batches, 'batch', 'batches')} "
            f"to {self.topic}{where if spread else ''}"
        )


def _estimate(record: NewRecord) -> int:
    size = _RECORD_OVERHEAD + len(record.key or b"") + len(record.value or b"")
    for key, value in record.headers:
        size += 10 + len(key.encode()) + len(value or b"")
    return size


def read_line_chunks(stream: BinaryIO, max_lines: int) -> Iterator[list[bytes]]:
    """Lines of ``stream`` without their line ends, in lists of at most ``max_lines``.

    A list is handed out as soon as no more input is waiting, so interactive input is not
    held back. Like Kafka's console producer, ``\\n``, ``\\r\\n`` and a last line without an
    end all count as lines.
    """
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        fd = -1
    chunks = _fd_chunks(fd) if fd >= 0 else iter([(stream.read(), True)])
    pending = b""
    lines: list[bytes] = []
    for data, more_waiting in chunks:
        parts = (pending + data).split(b"\n")
        pending = parts.pop()
        for line in parts:
            lines.append(line[:-1] if line.endswith(b"\r") else line)
            if len(lines) >= max_lines:
                yield lines
                lines = []
        if lines and not more_waiting:
            yield lines
            lines = []
    if pending:
        lines.append(pending[:-1] if pending.endswith(b"\r") else pending)
    if lines:
        yield lines


def _fd_chunks(fd: int) -> Iterator[tuple[bytes, bool]]:
    """Raw reads of ``fd``, each with whether more input is waiting right now."""
    while True:
        data = os.read(fd, _READ_SIZE)
        if not data:
            return
        waiting, _, _ = select.select([fd], [], [], 0)
        yield data, bool(waiting)
