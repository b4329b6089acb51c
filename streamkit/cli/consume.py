"""``streamkit consume``: print a topic's records, one value per line.

Where each partition starts, first match wins: ``--offset`` (with ``--partition``); the
group's committed offset (``--group``); the log start (``--from-beginning``); else the end,
like ``kafka-console-consumer``. A committed offset that retention has passed starts at the
log start.

By default the command stops once it has read every partition to its high watermark (kcat's
``-e``): on the embedded log, where nothing else writes while this command holds the data
directory, starting at the end prints nothing. ``--follow`` keeps polling for new records
until Ctrl-C (once positioned it says so on stderr, ``following TOPIC ...``, so scripts can
wait for it); between polls it lets go of the data directory, so ``streamkit produce`` in
another terminal can write, and while another process holds the directory it just waits.

``--isolation-level read_committed`` prints only what committed transactions wrote (an
exactly-once app's outputs) and stops at the last stable offset, as a Kafka consumer with
``isolation.level=read_committed`` does; the default reads everything, as Kafka's.

With ``--group`` the offset after the last printed record of each partition is committed
after every poll and on exit (Ctrl-C included), so the next run with the same group resumes
there. Like Kafka, a group with no commit for a partition also commits where it started
there, so a group that began at the end stays past the records it never read.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import BinaryIO

import click

from streamkit.cli.access import (
    Fetched,
    LogAccess,
    LogTarget,
    PartitionState,
    open_access,
    signals_held,
)
from streamkit.cli.common import count, info, log_target_options, warn
from streamkit.log.errors import DataDirLockedError, OffsetOutOfRangeError
from streamkit.log.records import Record

_FETCH_BYTES = 1024 * 1024


@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the log start, not at the end.")
@click.option("--partition", "-p", type=click.IntRange(min=0), help="Read only this partition.")
@click.option(
    "--offset",
    "-o",
    metavar="OFFSET|earliest|latest",
    help="Start the --partition here (overrides the group's committed offset).",
)
@click.option("--max", "-n", "max_records", type=click.IntRange(min=1), help="Stop after N records.")
@click.option("--follow", "-f", is_flag=True, help="Keep polling for new records until Ctrl-C.")
@click.option("--print-offsets", is_flag=True, help="Prefix each line with PARTITION:OFFSET and a tab.")
@click.option("--print-keys", is_flag=True, help="Prefix each value with its key and a tab.")
@click.option("--group", "-g", help="Resume from and commit to this consumer group's offsets.")
@click.option(
    "--poll-interval-ms",
    type=click.IntRange(min=10),
    default=500,
    show_default=True,
    help="Wait between polls with --follow.",
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="read_committed: only records of committed transactions, up to the last stable offset "
    "(an exactly-once app's outputs); read_uncommitted: everything, as Kafka's default.",
)
@log_target_options
def consume(
    topic: str,
    from_beginning: bool,
    partition: int | None,
    offset: str | None,
    max_records: int | None,
    follow: bool,
    print_offsets: bool,
    print_keys: bool,
    group: str | None,
    poll_interval_ms: int,
    isolation_level: str,
    target: LogTarget,
) -> None:
    """Print the records of TOPIC to stdout, one value per line.

    Starts at the end of each partition unless --from-beginning, --offset or a --group's
    committed offsets say otherwise, and exits when it has read everything (unless --follow).
    Values are decoded as UTF-8 (bytes that are not are shown as \\xNN); a null value
    prints as "null".

    \b
    Examples:
      streamkit consume orders --from-beginning --print-offsets --print-keys
      streamkit consume orders --group billing --max 100
      streamkit consume orders --partition 2 --offset 40 --follow
      streamkit consume results --from-beginning --isolation-level read_committed
    """
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if offset is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning exclude each other")
    if group == "":
        raise click.BadParameter("must not be empty", param_hint="--group")
    out = sys.stdout.buffer
    with open_access(target, warn=warn) as access:
        state = access.describe_topic(topic)
        chosen: Sequence[PartitionState] = state.partitions
        if partition is not None:
            if partition >= len(state.partitions):
                raise click.BadParameter(
                    f"topic {topic!r} has partitions 0 to {len(state.partitions) - 1}",
                    param_hint="--partition",
                )
            chosen = [state.partitions[partition]]
        committed = access.committed(group, topic) if group else {}
        positions = {
            p.partition: _start(p, offset, committed.get(p.partition), from_beginning) for p in chosen
        }
        consumer = _Consumer(access, topic, positions, group, committed, out, print_offsets, print_keys)
        consumer.max_records = max_records
        consumer.read_committed = isolation_level == "read_committed"
        if follow:
            # The readiness line: from here on Ctrl-C and SIGTERM end the command cleanly.
            info(f"following {topic} (partitions {', '.join(map(str, positions))}); Ctrl-C to stop")
        try:
            consumer.run(follow, poll_interval_ms / 1000)
        except KeyboardInterrupt:
            consumer.commit()
            info(consumer.summary())
            raise
        consumer.commit()
    info(consumer.summary())


def _start(p: PartitionState, offset: str | None, committed: int | None, from_beginning: bool) -> int:
    if offset is not None:
        if offset == "earliest":
            return p.log_start_offset
        if offset == "latest":
            return p.high_watermark
        try:
            value = int(offset)
        except ValueError:
            raise click.BadParameter(
                f"{offset!r} is not an offset, 'earliest' or 'latest'", param_hint="--offset"
            ) from None
        if not p.log_start_offset <= value <= p.high_watermark:
            raise click.BadParameter(
                f"offset {value} is out of range [{p.log_start_offset}, {p.high_watermark}] "
                f"of partition {p.partition}",
                param_hint="--offset",
            )
        return value
    if committed is not None:
        return min(max(committed, p.log_start_offset), p.high_watermark)
    return p.log_start_offset if from_beginning else p.high_watermark


class _Consumer:
    def __init__(
        self,
        access: LogAccess,
        topic: str,
        positions: dict[int, int],
        group: str | None,
        committed: dict[int, int],
        out: BinaryIO,
        print_offsets: bool,
        print_keys: bool,
    ) -> None:
        self.access = access
        self.topic = topic
        self.positions = positions
        self.group = group
        self.out = out
        self.print_offsets = print_offsets
        self.print_keys = print_keys
        self.max_records: int | None = None
        self.read_committed = False
        self.count = 0
        # Like Kafka, a group also commits where it started when it had no commit there.
        self._committed = {p: o for p, o in committed.items() if p in positions}

    @property
    def done(self) -> bool:
        return self.max_records is not None and self.count >= self.max_records

    def run(self, follow: bool, poll_interval_s: float) -> None:
        while True:
            try:
                caught_up = self.poll()
            except DataDirLockedError:
                if not follow:
                    raise
                time.sleep(poll_interval_s)  # another process is writing: look again later
                continue
            if self.done or (caught_up and not follow):
                return
            if caught_up:
                self.access.idle()  # poll() has committed; let producers in while we wait
                time.sleep(poll_interval_s)

    def poll(self) -> bool:
        """One fetch from each partition; True when every partition was at its end."""
        caught_up = True
        for p, position in self.positions.items():
            try:
                fetched = self.access.fetch(self.topic, p, position, _FETCH_BYTES, read_committed=self.read_committed)
            except OffsetOutOfRangeError as exc:
                # Retention or a re-created topic moved the log under us: reset like Kafka.
                below = position < exc.log_start_offset
                self.positions[p] = exc.log_start_offset if below else exc.high_watermark
                caught_up = False
                continue
            self._emit(p, fetched)
            if self.done:
                return False
            if self.positions[p] < fetched.high_watermark:
                caught_up = False
        if self.group:
            self.commit()
        return caught_up

    def _emit(self, partition: int, fetched: Fetched) -> None:
        lines: list[bytes] = []
        position = fetched.next_offset
        room = None if self.max_records is None else self.max_records - self.count
        for record in fetched.records:
            if room is not None and len(lines) >= room:
                position = record.offset
                break
            lines.append(self._format(partition, record))
        # Held from the write to the position: a Ctrl-C landing right after the records were
        # printed must not leave them printed (and counted) but not committed.
        with signals_held():
            if lines:
                self.out.write(b"".join(lines))
                self.out.flush()
            self.count += len(lines)
            self.positions[partition] = position

    def _format(self, partition: int, record: Record) -> bytes:
        parts = []
        if self.print_offsets:
            parts.append(f"{partition}:{record.offset}")
        if self.print_keys:
            parts.append(_text(record.key))
        parts.append(_text(record.value))
        return ("\t".join(parts) + "\n").encode()

    def commit(self) -> None:
        if not self.group:
            return
        changed = {p: o for p, o in self.positions.items() if self._committed.get(p) != o}
        if changed:
            self.access.commit(self.group, self.topic, changed)
            self._committed.update(changed)

    def summary(self) -> str:
        text = f"consumed {count(self.count, 'record')} from {self.topic}"
        if self.group:
            at = ", ".join(f"{p}:{o}" for p, o in sorted(self.positions.items()))
            text += f"; group {self.group} is at {at}"
        return text


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")
