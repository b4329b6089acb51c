"""Read-only commands never change a data directory, even a damaged one; a writer that must
cut damage off says it is data loss and which offsets went.

Every command runs as its own process through the installed ``streamkit`` entry point.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from streamkit.log.inspect import BatchEntry, read_segment
from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord

SEGMENT = "00000000000000000000"
RECORDS = 1000
DAMAGED_BATCH = 10  # one record a batch: batch 10 holds offset 10

RunProcess = Callable[..., subprocess.CompletedProcess[bytes]]


def _files(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its bytes, ``.lock`` aside: the lock file is
    how processes take turns, not data (a reader takes it shared and writes nothing to it)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture
def damaged(data_dir: Path) -> Path:
    """1,000 one-record batches in one segment; four bytes of batch 10 (its record count,
    which the CRC covers) overwritten; the offset index deleted."""
    with LogManager(data_dir, background=False) as log:
        log.create_topic("t", 1)
        part = log.partition("t", 0)
        for i in range(RECORDS):
            part.append_records([NewRecord(b"k", b"value %d" % i, 1000 + i)])
    log_file = data_dir / "t-0" / f"{SEGMENT}.log"
    batches = [b for b in read_segment(log_file) if isinstance(b, BatchEntry)]
    pos = batches[DAMAGED_BATCH].position
    data = bytearray(log_file.read_bytes())
    data[pos + 57 : pos + 61] = (16778205).to_bytes(4, "big")  # records count
    log_file.write_bytes(bytes(data))
    (data_dir / "t-0" / f"{SEGMENT}.index").unlink()
    return data_dir


def test_read_only_commands_leave_a_damaged_directory_byte_identical_and_report_it(
    damaged: Path, run_process: RunProcess
) -> None:
    before = _files(damaged)
    log_file = damaged / "t-0" / f"{SEGMENT}.log"

    describe = run_process("topics", "describe", "t", data_dir=damaged)
    assert describe.returncode == 0, describe.stderr
    assert _files(damaged) == before
    err = describe.stderr.decode()
    assert "damaged" in err and "t-0" in err and "left as it is" in err, err
    assert "truncated" not in err and "DATA LOSS" not in err
    # Nothing hidden: the partition still ends where its last batch does.
    row = [line.split() for line in describe.stdout.decode().splitlines() if line.startswith("0 ")]
    assert row and row[0][:3] == ["0", "0", str(RECORDS)], describe.stdout

    listed = run_process("topics", "list", data_dir=damaged)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.decode().split() == ["t"]
    assert _files(damaged) == before

    consume = run_process("consume", "t", "--from-beginning", data_dir=damaged)
    assert _files(damaged) == before
    assert consume.returncode == 1, (consume.stdout, consume.stderr)
    assert consume.stdout.decode().splitlines() == [f"value {i}" for i in range(DAMAGED_BATCH)]
    assert "CRC mismatch" in consume.stderr.decode(), consume.stderr

    dump = run_process("log", "dump", str(log_file))
    assert dump.returncode == 0, dump.stderr
    assert _files(damaged) == before
    out = dump.stdout.decode()
    assert out.count("crcValid: false") == 1
    assert "16778205" in out  # the damaged batch's header is shown as it is...
    last = out.splitlines()[-1]  # ...but never added up as a count of records
    assert last.startswith(f"{RECORDS} batches, {RECORDS - 1} records, "), last
    assert "1 batch failing the CRC check" in last

    verify = run_process("log", "verify", str(damaged))
    assert _files(damaged) == before
    assert verify.returncode == 1
    out = verify.stdout.decode()
    assert "CRC mismatch" in out and "offset index is missing" in out
    assert "16778205" not in out
    assert f"{RECORDS - 1} records (+ 1 damaged batch, records not counted)" in out, out


def test_a_writer_that_cuts_damage_off_reports_data_loss_with_the_offsets(
    damaged: Path, run_process: RunProcess
) -> None:
    produce = run_process("produce", "t", data_dir=damaged, input=b"after\n")
    assert produce.returncode == 0, produce.stderr
    err = produce.stderr.decode()
    assert "DATA LOSS" in err and f"offsets {DAMAGED_BATCH}..{RECORDS - 1} lost" in err, err
    consume = run_process("consume", "t", "--from-beginning", data_dir=damaged)
    assert consume.returncode == 0, consume.stderr
    assert consume.stdout.decode().splitlines() == [f"value {i}" for i in range(DAMAGED_BATCH)] + ["after"]
