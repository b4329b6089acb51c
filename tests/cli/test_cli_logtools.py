"""``streamkit log dump`` and ``streamkit log verify`` over segments with known contents."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import pytest

from streamkit.log.config import TopicConfig
from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord

SEGMENT = "00000000000000000000"


def _files(root: Path) -> dict[str, tuple[str, float]]:
    """Content hash and modification time of every file under ``root``."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime)
    return out


@pytest.fixture
def known(data_dir: Path) -> Path:
    """Topic ``t`` (2 partitions): partition 0 holds three batches with fixed timestamps."""
    small_index = TopicConfig(index_interval_bytes=1)  # an index entry for every batch
    with LogManager(data_dir, background=False, defaults=small_index) as log:
        log.create_topic("t", 2)
        p0 = log.partition("t", 0)
        p0.append_records([NewRecord(b"a", b"first", 1000), NewRecord(b"b", b"hello", 1001, [("h", b"v")])])
        p0.append_records([NewRecord(None, b"line\nbreak", 1005)], compression_codec=1)
        p0.append_records([NewRecord(b"c", None, 1003)])
        log.partition("t", 1).append_records([NewRecord(b"k", b"v", 2000)])
    return data_dir


def test_dump_prints_every_batch(run, known: Path) -> None:
    result = run("log", "dump", str(known / "t-0" / f"{SEGMENT}.log"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"Dumping {known / 't-0' / SEGMENT}.log"
    assert lines[1] == "Starting offset: 0"
    first = lines[2]
    assert first.startswith("baseOffset: 0 lastOffset: 1 count: 2 position: 0 size: ")
    assert "magic: 2 crc: 0x" in first
    assert (
        "crcValid: true compression: none timestampType: CreateTime baseTimestamp: 1000 "
        "maxTimestamp: 1001 producerId: -1 producerEpoch: -1 baseSequence: -1 lastSequence: -1 "
        "partitionLeaderEpoch: -1 isTransactional: false isControl: false"
    ) in first
    assert lines[3].startswith("baseOffset: 2 lastOffset: 2 count: 1 position: ")
    assert "compression: gzip" in lines[3]
    assert lines[4].startswith("baseOffset: 3 lastOffset: 3 count: 1 ")
    assert lines[5].startswith("3 batches, 4 records, ")
    assert len(lines) == 6


def test_dump_records(run, known: Path) -> None:
    result = run("log", "dump", "--records", str(known / "t-0" / f"{SEGMENT}.log"))
    records = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert records == [
        "| offset: 0 timestamp: 1000 keySize: 1 valueSize: 5 key: a value: first headers: []",
        "| offset: 1 timestamp: 1001 keySize: 1 valueSize: 5 key: b value: hello headers: [h=v]",
        "| offset: 2 timestamp: 1005 keySize: -1 valueSize: 10 key: null value: line\\nbreak headers: []",
        "| offset: 3 timestamp: 1003 keySize: 1 valueSize: -1 key: c value: null headers: []",
    ]


def test_dump_indexes(run, known: Path) -> None:
    index = run("log", "dump", str(known / "t-0" / f"{SEGMENT}.index")).stdout.splitlines()
    assert index[1] == "offset: 1 position: 0"
    assert [line.split()[1] for line in index[1:]] == ["1", "2", "3"]
    times = run("log", "dump", str(known / "t-0" / f"{SEGMENT}.timeindex")).stdout.splitlines()
    assert times[1:] == ["timestamp: 1001 offset: 1", "timestamp: 1005 offset: 2"]


def test_dump_shows_damage(run, known: Path) -> None:
    log_file = known / "t-0" / f"{SEGMENT}.log"
    data = bytearray(log_file.read_bytes())
    data[70] ^= 0x01  # inside the first batch's records
    log_file.write_bytes(bytes(data) + b"\x00" * 20)
    result = run("log", "dump", "--records", str(log_file))
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "crcValid: false" in lines[2]
    assert "crcValid: true" in lines[-4]  # the last batch, before its record
    assert lines[-2] == f"error at position {len(data)}: 20 bytes are too few for a batch header (20 bytes left)"


def test_dump_errors(run, tmp_path: Path, one_line_error) -> None:
    missing = run("log", "dump", str(tmp_path / "nope.log"))
    assert missing.exit_code == 2
    one_line_error(missing.stderr, "does not exist")
    empty = tmp_path / "x.log"
    empty.write_bytes(b"")
    result = run("log", "dump", str(empty))
    assert result.exit_code == 0
    assert "Starting offset: unknown" in result.stdout and "0 batches, 0 records" in result.stdout


def test_verify_clean_directory(run, known: Path) -> None:
    before = _files(known)
    result = run("log", "verify", str(known))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "t-0: 1 segment, offsets 0..4, 3 batches, 4 records, " in result.stdout
    assert lines[-1].startswith("verified ") and lines[-1].endswith("no damage found")
    assert "2 topics, 3 partitions" in lines[-1]  # t-0, t-1 and __consumer_offsets-0
    assert _files(known) == before


def test_verify_finds_a_flipped_byte(run, known: Path) -> None:
    log_file = known / "t-0" / f"{SEGMENT}.log"
    data = bytearray(log_file.read_bytes())
    first_size = struct.unpack(">i", data[8:12])[0] + 12
    data[first_size + 65] ^= 0x40  # inside the second batch
    log_file.write_bytes(bytes(data))
    before = _files(known)
    result = run("log", "verify", str(known))
    assert result.exit_code == 1
    problems = [line for line in result.stdout.splitlines() if line.startswith("problem:")]
    assert len(problems) == 1
    assert problems[0].startswith(f"problem: {log_file} position {first_size}: CRC mismatch: stored 0x")
    assert next(line for line in result.stdout.splitlines() if line.startswith("t-0:")).endswith(": 1 problem")
    assert result.stdout.splitlines()[-1].endswith("1 problem found")
    assert _files(known) == before  # verify never writes


def test_verify_and_dump_do_not_count_records_a_damaged_header_claims(run, known: Path) -> None:
    log_file = known / "t-0" / f"{SEGMENT}.log"
    data = bytearray(log_file.read_bytes())
    first_size = struct.unpack(">i", data[8:12])[0] + 12
    data[57:61] = (16778205).to_bytes(4, "big")  # the first batch's record count (CRC-covered)
    log_file.write_bytes(bytes(data))
    verify = run("log", "verify", str(known))
    assert verify.exit_code == 1
    assert f"problem: {log_file} position 0: CRC mismatch" in verify.stdout
    assert "16778205" not in verify.stdout
    # Batches 2 and 3 (2 records) are counted; the damaged one is reported, not added up.
    assert "t-0: 1 segment, offsets 0..4, 3 batches, 2 records (+ 1 damaged batch, records not counted), " in (
        verify.stdout
    )
    assert "3 records (+ 1 damaged batch, records not counted)" in verify.stdout.splitlines()[-1]
    dump = run("log", "dump", str(log_file))
    last = dump.stdout.splitlines()[-1]
    assert last.startswith("3 batches, 2 records, ") and "1 batch failing the CRC check" in last
    assert first_size > 61


def test_verify_finds_truncated_and_wrong_indexes(run, known: Path) -> None:
    index = known / "t-0" / f"{SEGMENT}.index"
    raw = index.read_bytes()
    index.write_bytes(raw[:-3])  # a partial last entry
    result = run("log", "verify", str(known))
    assert result.exit_code == 1
    assert f"problem: {index} position 16: index ends in a partial entry of 5 bytes" in result.stdout

    index.write_bytes(b"")  # emptied while the log is not
    result = run("log", "verify", str(known))
    assert result.exit_code == 1
    assert f"problem: {index}: offset index is empty but the log is not" in result.stdout

    rel, pos = struct.unpack(">ii", raw[8:16])
    index.write_bytes(raw[:8] + struct.pack(">ii", rel, pos + 1) + raw[16:])
    result = run("log", "verify", str(known))
    assert result.exit_code == 1
    assert f"entry 1 points at position {pos + 1}, not at the start of a batch" in result.stdout

    index.write_bytes(raw[:8] + struct.pack(">ii", rel + 1, pos) + raw[16:])
    result = run("log", "verify", str(known))
    assert f"entry 1 says offset {rel + 1} for position {pos}, but that batch ends at offset {rel}" in result.stdout

    index.write_bytes(raw)
    timeindex = known / "t-0" / f"{SEGMENT}.timeindex"
    entries = timeindex.read_bytes()
    timeindex.write_bytes(entries[12:] + entries[:12])  # out of order
    result = run("log", "verify", str(known))
    assert result.exit_code == 1
    assert f"problem: {timeindex} position 12: entry 1 (1001 -> 1) does not increase" in result.stdout

    timeindex.write_bytes(entries)
    assert run("log", "verify", str(known)).exit_code == 0


def test_verify_finds_a_torn_tail_and_missing_partition(run, known: Path) -> None:
    log_file = known / "t-1" / f"{SEGMENT}.log"
    size = log_file.stat().st_size
    with open(log_file, "ab") as f:
        f.write(struct.pack(">qi", 1, 500) + b"\x00" * 60)
    result = run("log", "verify", str(known))
    assert result.exit_code == 1
    assert f"problem: {log_file} position {size}: batch of 512 bytes runs past the end of the file (72 bytes left)" in result.stdout

    os.truncate(log_file, size)
    for path in (known / "t-1").iterdir():
        path.unlink()
    (known / "t-1").rmdir()
    result = run("log", "verify", str(known))
    assert result.exit_code == 1
    assert f"problem: {known / 't-1'}: partition directory is missing" in result.stdout


def test_verify_backwards_offsets_across_segments(run, data_dir: Path) -> None:
    with LogManager(data_dir, background=False, defaults=TopicConfig(segment_bytes=100)) as log:
        log.create_topic("s", 1)
        for i in range(3):
            log.partition("s", 0).append_records([NewRecord(b"k", b"v" * 40, i)])
    segments = sorted((data_dir / "s-0").glob("*.log"))
    assert len(segments) == 3
    assert run("log", "verify", str(data_dir)).exit_code == 0
    second = segments[1].read_bytes()
    segments[2].write_bytes(second)  # the third segment now repeats offset 1
    result = run("log", "verify", str(data_dir))
    assert result.exit_code == 1
    assert f"problem: {segments[2]} position 0: batch base offset 1 goes back (expected 2 or later)" in result.stdout


def test_verify_notes_but_accepts_a_locked_directory(run, known: Path) -> None:
    with LogManager(known, background=False):
        result = run("log", "verify", str(known))
    assert result.exit_code == 0
    assert "note: the data directory is in use by another process" in result.stdout


def test_verify_errors(run, tmp_path: Path, one_line_error) -> None:
    result = run("log", "verify", str(tmp_path / "nope"))
    assert result.exit_code == 2
    one_line_error(result.stderr, "does not exist")


def test_verify_accepts_compacted_retained_and_transactional_logs(run, data_dir: Path) -> None:
    from streamkit.log.records import build_batch, control_batch

    config = {"segment.bytes": "400", "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"}
    with LogManager(data_dir, background=False) as log:
        log.create_topic("compacted", 1, config)
        # retention.ms=-1: the records are stamped in 1970, which a time retention expires whole
        log.create_topic("retained", 1, {"segment.bytes": "300", "retention.bytes": "600", "retention.ms": "-1"})
        log.create_topic("txn", 1, {"retention.ms": "-1"})
        for i in range(60):
            log.partition("compacted", 0).append_records([NewRecord(b"k%d" % (i % 3), b"v%d" % i, 1000 + i)])
            log.partition("retained", 0).append_records([NewRecord(None, b"x" * 30, 1000 + i)])
        txn = log.partition("txn", 0)
        txn.append(build_batch([NewRecord(b"a", b"1", 5)], producer_id=7, producer_epoch=0, base_sequence=0, transactional=True))
        txn.append(control_batch(commit=True, producer_id=7, producer_epoch=0, timestamp=6))
        report = log.run_upkeep(force_compaction=True)
        assert report.segments_compacted > 0 and report.segments_deleted > 0
        assert log.partition("retained", 0).log_start_offset > 0
    result = run("log", "verify", str(data_dir))
    assert result.exit_code == 0, result.stdout
    assert "retained-0: " in result.stdout and "offsets 0.." not in result.stdout.split("retained-0: ")[1].split("\n")[0]

    dump = run("log", "dump", "--records", str(data_dir / "txn-0" / f"{SEGMENT}.log")).stdout
    assert "producerId: 7 producerEpoch: 0 baseSequence: 0 lastSequence: 0" in dump
    assert "isTransactional: true isControl: true" in dump
    assert "| offset: 1 timestamp: 6 endTxnMarker: COMMIT coordinatorEpoch: 0" in dump
