"""``streamkit log``: look at segment files directly (``dump``) and check a data directory
(``verify``). Both only read; neither takes the data directory's lock."""

from __future__ import annotations

import struct
from pathlib import Path

import click

from streamkit.cli.access import DEFAULT_DATA_DIR
from streamkit.cli.common import count, human_bytes
from streamkit.log.compression import CODEC_NAMES
from streamkit.log.errors import InvalidRecordError
from streamkit.log.inspect import (
    BatchEntry,
    BrokenTail,
    PartitionSummary,
    VerifyReport,
    read_offset_index,
    read_segment,
    read_time_index,
    segment_base_offset,
    verify_data_dir,
)
from streamkit.log.records import Record


@click.group("log")
def log_() -> None:
    """Inspect segment files and check a data directory (read-only)."""


@log_.command("dump")
@click.argument("segment", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--records", "-r", "show_records", is_flag=True, help="Also print every record of each batch.")
def dump(segment: Path, show_records: bool) -> None:
    """Print the batches of SEGMENT (a .log file), like kafka-dump-log.

    For each batch: offsets, record count, file position and size, whether its CRC is
    valid, compression, timestamps, producer id/epoch/sequence and the transactional and
    control flags; with --records each record's offset, timestamp, key, value and headers.
    A .index or .timeindex file prints its entries. Use `streamkit log verify` to check a
    whole data directory.
    """
    base = segment_base_offset(segment)
    click.echo(f"Dumping {segment}")
    if segment.suffix in (".index", ".timeindex"):
        _dump_index(segment, base or 0)
        return
    click.echo(f"Starting offset: {base if base is not None else 'unknown (not a segment name)'}")
    batches = records = size = damaged = 0
    for item in read_segment(segment):
        if isinstance(item, BrokenTail):
            click.echo(f"error at position {item.position}: {item.reason} ({item.length} bytes left)")
            break
        batches += 1
        if item.crc_valid:
            records += item.header.records_count
        else:
            damaged += 1  # its record count is as damaged as the rest: not added up
        size += item.header.size
        click.echo(_format_batch(item))
        if show_records:
            for line in _format_records(item):
                click.echo(line)
    click.echo(
        f"{count(batches, 'batch', 'batches')}, {count(records, 'record')}, "
        f"{count(size, 'byte')} of whole batches"
        + (f"; {count(damaged, 'batch', 'batches')} failing the CRC check, records not counted" if damaged else "")
    )


def _format_batch(entry: BatchEntry) -> str:
    h = entry.header
    fields = [
        f"baseOffset: {h.base_offset}",
        f"lastOffset: {h.last_offset}",
        f"count: {h.records_count}",
        f"position: {entry.position}",
        f"size: {h.size}",
        f"magic: {h.magic}",
        f"crc: {h.crc:#010x}",
        f"crcValid: {_bool(entry.crc_valid)}",
        f"compression: {CODEC_NAMES.get(h.compression, f'unknown({h.compression})')}",
        f"timestampType: {'LogAppendTime' if h.log_append_time else 'CreateTime'}",
        f"baseTimestamp: {h.base_timestamp}",
        f"maxTimestamp: {h.max_timestamp}",
        f"producerId: {h.producer_id}",
        f"producerEpoch: {h.producer_epoch}",
        f"baseSequence: {h.base_sequence}",
        f"lastSequence: {h.last_sequence}",
        f"partitionLeaderEpoch: {h.partition_leader_epoch}",
        f"isTransactional: {_bool(h.is_transactional)}",
        f"isControl: {_bool(h.is_control)}",
    ]
    problem = entry.structure_problem()
    if problem is not None:
        fields.append(f"problem: {problem}")
    return " ".join(fields)


def _format_records(entry: BatchEntry) -> list[str]:
    try:
        records = entry.records()
    except InvalidRecordError as exc:
        return [f"| cannot decode records: {exc}"]
    return [_format_record(entry, r) for r in records]


def _format_record(entry: BatchEntry, record: Record) -> str:
    head = f"| offset: {record.offset} timestamp: {record.timestamp}"
    if entry.header.is_control:
        return f"{head} {_control(record)}"
    headers = ", ".join(f"{_show(k.encode())}={_show(v)}" for k, v in record.headers)
    return (
        f"{head} keySize: {_size(record.key)} valueSize: {_size(record.value)} "
        f"key: {_show(record.key)} value: {_show(record.value)} headers: [{headers}]"
    )


def _control(record: Record) -> str:
    try:
        _version, kind = struct.unpack(">hh", record.key or b"")
    except struct.error:
        return f"controlType: unknown key: {_show(record.key)}"
    name = {0: "ABORT", 1: "COMMIT"}.get(kind, f"unknown({kind})")
    epoch = ""
    if record.value is not None and len(record.value) >= 6:
        epoch = f" coordinatorEpoch: {struct.unpack('>hi', record.value[:6])[1]}"
    return f"endTxnMarker: {name}{epoch}"


def _dump_index(path: Path, base: int) -> None:
    if path.suffix == ".index":
        entries, extra = read_offset_index(path, base)
        for e in entries:
            click.echo(f"offset: {e.offset} position: {e.position}")
    else:
        time_entries, extra = read_time_index(path, base)
        for t in time_entries:
            click.echo(f"timestamp: {t.timestamp} offset: {t.offset}")
    if extra:
        click.echo(f"error: {extra} bytes after the last whole entry")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _show(data: bytes | None) -> str:
    """Bytes as text on one line: UTF-8, with undecodable bytes and control characters escaped."""
    if data is None:
        return "null"
    text = data.decode("utf-8", errors="backslashreplace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@log_.command("verify")
@click.argument(
    "data_dir",
    required=False,
    default=DEFAULT_DATA_DIR,
    envvar="STREAMKIT_DATA_DIR",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.pass_context
def verify(ctx: click.Context, data_dir: Path) -> None:
    """Check every segment of DATA_DIR [default: .streamkit]; exit 1 when damage is found.

    Checks batch lengths, magic, CRCs and record counts; offsets increasing within and
    across segments; offset index entries pointing at batch starts with the batch's last
    offset; time index entries increasing and matching their batches; a directory for
    every partition a topic names. Prints a line per partition, then each problem with its
    file and byte position. Reads only: run it while no process holds the directory, or
    expect writes in progress to show up at the end of active segments.
    """
    report = verify_data_dir(data_dir)
    for summary in report.partitions:
        click.echo(_format_partition(summary))
    for note in report.notes:
        click.echo(f"note: {note}")
    for problem in report.problems:
        click.echo(f"problem: {problem}")
    click.echo(_format_summary(report))
    if not report.clean:
        ctx.exit(1)


def _format_partition(s: PartitionSummary) -> str:
    offsets = "" if s.first_offset is None else f"offsets {s.first_offset}..{s.next_offset}, "
    status = "ok" if not s.problems else count(s.problems, "problem")
    return (
        f"{s.name}: {count(s.segments, 'segment')}, {offsets}"
        f"{count(s.batches, 'batch', 'batches')}, {count(s.records, 'record')}{_damaged(s.damaged_batches)}, "
        f"{human_bytes(s.size_bytes)}: {status}"
    )


def _damaged(batches: int) -> str:
    return f" (+ {count(batches, 'damaged batch', 'damaged batches')}, records not counted)" if batches else ""


def _format_summary(report: VerifyReport) -> str:
    n = len(report.problems)
    verdict = "no damage found" if not n else f"{count(n, 'problem')} found"
    return (
        f"verified {report.data_dir}: {count(report.topics, 'topic')}, "
        f"{count(len(report.partitions), 'partition')}, {count(report.segments, 'segment')}, "
        f"{count(report.batches, 'batch', 'batches')}, {count(report.records, 'record')}"
        f"{_damaged(report.damaged_batches)}, {human_bytes(report.size_bytes)}: {verdict}"
    )

