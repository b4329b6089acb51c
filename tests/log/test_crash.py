"""Crash tests: damage segment files the way crashes and disks do, reopen, check the invariants.

A log is built once per module with ``flush.messages=1`` (every append fsynced before it is
acknowledged) and every acknowledged batch is remembered. Each trial copies it, either as a
clean shutdown left it or as it was while still open (no ``.clean_shutdown`` marker: what a
crash leaves), damages the copy, and reopens it. Whatever the damage:

* opening never raises;
* everything acknowledged before the damage point reads back intact, and nothing else is
  served: every record read is an acknowledged record at its own offset, and every batch
  read passes ``check_batch``;
* a truncation is reported: how many bytes, from which offset;
* new appends continue at the high watermark, and survive a further reopen.

Damage inside a closed segment is not a crash artifact: it must be reported by the read that
meets it (``CorruptRecordError``), never served, and must not cost the batches around it.
The compaction tests crash the cleaner at each of its steps and check that no key loses its
latest value.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamkit._core.clock import ManualClock
from streamkit.log import compaction
from streamkit.log.errors import CorruptRecordError
from streamkit.log.manager import LogManager
from streamkit.log.partition import Partition
from streamkit.log.records import BatchHeader, NewRecord, check_batch, decode_records, iter_batches

T0 = 1_700_000_000_000
TOPIC = "crash"
Row = tuple[int, bytes | None, bytes | None, int]  # offset, key, value, timestamp
StrPath = str | os.PathLike[str]
SEEDS = {"crashed": 1, "clean": 2}  # fixed, so a failing trial replays the same way


@dataclass(frozen=True)
class Built:
    clean: Path  # closed cleanly
    crashed: Path  # copied while open
    rows: list[Row]  # every acknowledged record, in offset order
    hw: int


def build(directory: Path, rng: random.Random, n_batches: int, config: dict[str, str]) -> Built:
    clock = ManualClock(T0)
    clean = directory / "clean"
    log = LogManager(clean, background=False, clock=clock).open()
    log.create_topic(TOPIC, 1, {"flush.messages": "1", **config})
    part = log.partition(TOPIC, 0)
    rows: list[Row] = []
    for i in range(n_batches):
        records = [
            NewRecord(
                rng.choice([None, b"k%d" % rng.randrange(8)]),
                rng.randbytes(rng.randrange(0, 90)),
                T0 + 10 * i + j,
            )
            for j in range(rng.randint(1, 6))
        ]
        result = part.append_records(records, compression_codec=rng.choice([0, 0, 0, 1]))
        assert result.base_offset == len(rows)
        rows.extend((result.base_offset + j, r.key, r.value, r.timestamp) for j, r in enumerate(records))
    crashed = directory / "crashed"
    shutil.copytree(clean, crashed)
    hw = part.high_watermark
    log.close()
    return Built(clean, crashed, rows, hw)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    config = {"segment.bytes": "4000", "index.interval.bytes": "300"}
    return build(tmp_path_factory.mktemp("built"), random.Random(7), 200, config)


def partition_dir(data: Path) -> Path:
    return data / f"{TOPIC}-0"


def segment_logs(data: Path) -> list[Path]:
    return sorted(partition_dir(data).glob("*.log"))


def batches_of(path: Path) -> list[tuple[int, BatchHeader]]:
    return list(iter_batches(path.read_bytes()))


def read_rows(part: Partition, start: int | None = None) -> list[Row]:
    """Every record from ``start`` to the high watermark; every batch read must be valid."""
    rows: list[Row] = []
    position = part.log_start_offset if start is None else start
    while position < part.high_watermark:
        data = part.read(position, 2000)
        assert data, f"nothing served at {position} < {part.high_watermark}"
        end = 0
        view = memoryview(data)
        for pos, header in iter_batches(data):
            batch = view[pos : pos + header.size]
            check_batch(batch)  # nothing half-written or damaged is served
            rows.extend((r.offset, r.key, r.value, r.timestamp) for r in decode_records(header, batch))
            position = header.next_offset
            end = pos + header.size
        assert end == len(data), "a read returned a partial batch"
    return rows


def reopen(data: Path) -> LogManager:
    return LogManager(data, background=False, clock=ManualClock(T0 + 10**6)).open()


def check_continues(data: Path, log: LogManager, expected: list[Row]) -> None:
    """New appends go on at the high watermark and everything survives a clean reopen."""
    part = log.partition(TOPIC, 0)
    hw = part.high_watermark
    result = part.append_records([NewRecord(b"new", b"after the crash", T0 + 10**6)])
    assert result.base_offset == hw
    log.close()
    again = reopen(data)
    try:
        assert again.clean_shutdown
        # an index found wrong by a lookup is rebuilt on this open; nothing is cut
        assert all(r.truncated_bytes == 0 for r in again.recovery_reports)
        rows = read_rows(again.partition(TOPIC, 0))
        assert rows == [*expected, (hw, b"new", b"after the crash", T0 + 10**6)]
    finally:
        again.close()


def copy(source: Path, tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(source, target)
    return target


def trials(seed: int, n: int) -> Iterator[tuple[int, random.Random]]:
    rng = random.Random(seed)
    for i in range(n):
        yield i, random.Random(rng.random())


# -- the active segment: torn and damaged tails --------------------------------------------------


@pytest.mark.parametrize("source", ["crashed", "clean"])
def test_cut_the_active_segment_anywhere(built: Built, tmp_path: Path, source: str) -> None:
    for i, rng in trials(SEEDS[source], 60):
        data = copy(getattr(built, source), tmp_path, f"t{i}")
        active = segment_logs(data)[-1]
        batches = batches_of(active)
        size = active.stat().st_size
        cut = rng.choice([rng.randrange(0, size + 1), batches[-1][0] + rng.randrange(0, 61)])
        cut = min(cut, size)
        os.truncate(active, cut)
        whole = [(p, h) for p, h in batches if p + h.size <= cut]
        valid_end = whole[-1][0] + whole[-1][1].size if whole else 0
        expected_hw = whole[-1][1].next_offset if whole else int(active.stem)

        log = reopen(data)
        part = log.partition(TOPIC, 0)
        assert part.high_watermark == expected_hw
        expected = [r for r in built.rows if r[0] < expected_hw]
        assert read_rows(part) == expected
        reports = [r for r in log.recovery_reports if r.truncated_bytes]
        if cut > valid_end:
            assert [(r.path, r.truncated_bytes, r.from_offset) for r in reports] == [
                (str(active), cut - valid_end, expected_hw)
            ]
        else:
            assert reports == []
        check_continues(data, log, expected)
        shutil.rmtree(data)


def test_garbage_after_the_last_batch_is_cut_off(built: Built, tmp_path: Path) -> None:
    for i, rng in trials(11, 30):
        data = copy(built.crashed, tmp_path, f"t{i}")
        active = segment_logs(data)[-1]
        junk = rng.choice(
            [
                rng.randbytes(rng.randrange(1, 300)),
                b"\x00" * rng.randrange(1, 300),  # a file extended but never written
                active.read_bytes()[: rng.randrange(1, 200)],  # a batch's first bytes again
            ]
        )
        with open(active, "ab") as f:
            f.write(junk)
        log = reopen(data)
        assert log.partition(TOPIC, 0).high_watermark == built.hw
        assert read_rows(log.partition(TOPIC, 0)) == built.rows
        assert [(r.truncated_bytes, r.from_offset) for r in log.recovery_reports] == [
            (len(junk), built.hw)
        ]
        check_continues(data, log, built.rows)
        shutil.rmtree(data)


def corrupt_tail(active: Path, rng: random.Random, *, spare_base_offsets: bool) -> tuple[bytes, list[int]]:
    """Flip 1-4 random bytes after a random point; returns the damaged file and positions."""
    batches = batches_of(active)
    raw = bytearray(active.read_bytes())
    start = rng.randrange(0, len(raw))
    damaged = sorted({rng.randrange(start, len(raw)) for _ in range(rng.randint(1, 4))})
    if spare_base_offsets:
        damaged = [d for d in damaged if not any(p <= d < p + 8 for p, _h in batches)] or [len(raw) - 1]
    for pos in damaged:
        raw[pos] ^= rng.randrange(1, 256)
    active.write_bytes(bytes(raw))
    return bytes(raw), damaged


def first_damaged(batches: list[tuple[int, BatchHeader]], damaged: list[int]) -> tuple[int, BatchHeader] | None:
    """The first batch with a damaged byte anywhere but its partition leader epoch (bytes
    12-15, which no CRC covers and which hold no data): where what survives ends."""
    return next(
        (
            (p, h)
            for p, h in batches
            if any(p <= d < p + h.size and not 12 <= d - p < 16 for d in damaged)
        ),
        None,
    )


@pytest.mark.slow
def test_corrupt_bytes_in_the_tail_after_a_crash(built: Built, tmp_path: Path) -> None:
    for i, rng in trials(5, 80):
        data = copy(built.crashed, tmp_path, f"t{i}")
        active = segment_logs(data)[-1]
        batches = batches_of(active)
        raw, damaged = corrupt_tail(active, rng, spare_base_offsets=False)
        first_bad = first_damaged(batches, damaged)
        expected_hw = built.hw if first_bad is None else first_bad[1].base_offset
        log = reopen(data)
        part = log.partition(TOPIC, 0)
        expected = [r for r in built.rows if r[0] < expected_hw]
        assert part.high_watermark == expected_hw, damaged
        assert read_rows(part) == expected
        if first_bad is not None:
            assert [(r.truncated_bytes, r.from_offset) for r in log.recovery_reports] == [
                (len(raw) - first_bad[0], expected_hw)
            ]
        check_continues(data, log, expected)
        shutil.rmtree(data)


@pytest.mark.parametrize("delta", [1, 3, 2**33, -1])
def test_a_damaged_base_offset_in_the_tail_is_cut_off(built: Built, tmp_path: Path, delta: int) -> None:
    """The base offset is outside the CRC: recovery checks that batches follow each other."""
    data = copy(built.crashed, tmp_path, "t")
    active = segment_logs(data)[-1]
    batches = batches_of(active)
    pos, header = batches[len(batches) // 2]
    raw = bytearray(active.read_bytes())
    raw[pos : pos + 8] = (header.base_offset + delta).to_bytes(8, "big")
    active.write_bytes(bytes(raw))
    log = reopen(data)
    part = log.partition(TOPIC, 0)
    expected = [r for r in built.rows if r[0] < header.base_offset]
    assert part.high_watermark == header.base_offset
    assert read_rows(part) == expected
    assert [(r.truncated_bytes, r.from_offset) for r in log.recovery_reports] == [
        (len(raw) - pos, header.base_offset)
    ]
    check_continues(data, log, expected)


def read_until_damage(part: Partition) -> tuple[list[Row], int | None]:
    """What a consumer reading from the start gets, and the offset where a read raised."""
    rows: list[Row] = []
    position = part.log_start_offset
    while position < part.high_watermark:
        try:
            data = part.read(position, 2000)
        except CorruptRecordError:
            return rows, position
        view = memoryview(data)
        for pos, header in iter_batches(data):
            batch = view[pos : pos + header.size]
            check_batch(batch)
            rows.extend((r.offset, r.key, r.value, r.timestamp) for r in decode_records(header, batch))
            position = header.next_offset
    return rows, None


@pytest.mark.slow
def test_corrupt_bytes_in_the_tail_after_a_clean_close(built: Built, tmp_path: Path) -> None:
    """A clean open trusts what was fsynced at close; the reads meet the damage instead."""
    for i, rng in trials(6, 60):
        data = copy(built.clean, tmp_path, f"t{i}")
        active = segment_logs(data)[-1]
        batches = batches_of(active)
        _raw, damaged = corrupt_tail(active, rng, spare_base_offsets=True)
        first_bad = first_damaged(batches, damaged)
        intact_below = built.hw if first_bad is None else first_bad[1].base_offset
        log = reopen(data)
        part = log.partition(TOPIC, 0)
        rows, failed_at = read_until_damage(part)
        assert rows == built.rows[: len(rows)]  # only acknowledged records, at their offsets
        assert [r for r in built.rows if r[0] < intact_below] == rows[: intact_below]
        if failed_at is not None:
            assert failed_at >= intact_below
        elif first_bad is not None:
            # found at open (a broken length or magic), cut off and reported
            assert part.high_watermark == intact_below
            assert [r.from_offset for r in log.recovery_reports] == [intact_below]
        if failed_at is None:
            check_continues(data, log, rows)
        else:
            log.close()
        shutil.rmtree(data)


def test_losing_the_clean_shutdown_marker_only_costs_a_scan(built: Built, tmp_path: Path) -> None:
    data = copy(built.clean, tmp_path, "t")
    (data / ".clean_shutdown").unlink()
    log = reopen(data)
    assert not log.clean_shutdown
    assert log.recovery_reports == []
    assert read_rows(log.partition(TOPIC, 0)) == built.rows
    check_continues(data, log, built.rows)


# -- indexes ---------------------------------------------------------------------------------


def damage_index(path: Path, rng: random.Random) -> str:
    raw = path.read_bytes() if path.exists() else b""
    how = rng.choice(["delete", "truncate", "scribble", "garbage", "extend"])
    if how == "delete":
        path.unlink(missing_ok=True)
    elif how == "truncate":
        path.write_bytes(raw[: rng.randrange(0, len(raw) + 1)])
    elif how == "scribble" and raw:
        changed = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            changed[rng.randrange(len(changed))] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(changed))
    elif how == "extend":
        path.write_bytes(raw + rng.randbytes(rng.choice([8, 12, 24, 5])))
    else:
        path.write_bytes(rng.randbytes(rng.randrange(0, 100)))
    return how


@pytest.mark.slow
@pytest.mark.parametrize("source", ["crashed", "clean"])
def test_damaged_indexes_are_rebuilt_and_lose_nothing(built: Built, tmp_path: Path, source: str) -> None:
    timestamps = [r[3] for r in built.rows]
    for i, rng in trials(SEEDS[source] + 10, 60):
        data = copy(getattr(built, source), tmp_path, f"t{i}")
        files = sorted(partition_dir(data).glob("*index"))
        damage = [damage_index(path, rng) for path in rng.sample(files, rng.randint(1, 4))]
        log = reopen(data)
        part = log.partition(TOPIC, 0)
        assert part.high_watermark == built.hw, damage
        assert all(r.truncated_bytes == 0 for r in log.recovery_reports), damage
        for _ in range(10):
            offset = rng.randrange(0, built.hw)
            assert read_rows(part, offset)[0][0] <= offset
        assert read_rows(part) == built.rows
        for _ in range(5):
            target = rng.randrange(T0 - 5, timestamps[-1] + 5)
            expected = next(((r[0], r[3]) for r in built.rows if r[3] >= target), None)
            assert part.offset_for_timestamp(target) == expected, damage
        assert [s.max_timestamp for s in part.segments[:-1]] == [
            max(r[3] for r in built.rows if s.base_offset <= r[0] < n.base_offset)
            for s, n in zip(part.segments[:-1], part.segments[1:], strict=True)
        ], damage
        check_continues(data, log, built.rows)
        shutil.rmtree(data)


# -- closed segments: damage is reported by the read that meets it --------------------------------


@pytest.mark.parametrize("lose_index", [False, True])
def test_a_damaged_closed_segment_is_never_served(built: Built, tmp_path: Path, lose_index: bool) -> None:
    for i, rng in trials(31 + lose_index, 25):
        data = copy(rng.choice([built.clean, built.crashed]), tmp_path, f"t{i}")
        closed = segment_logs(data)[:-1]
        victim = rng.choice(closed)
        batches = batches_of(victim)
        pos, header = rng.choice(batches)
        raw = bytearray(victim.read_bytes())
        raw[pos + rng.randrange(21, header.size)] ^= rng.randrange(1, 256)  # CRC-covered bytes
        victim.write_bytes(bytes(raw))
        if lose_index:
            victim.with_suffix(".index").unlink()
        log = reopen(data)
        part = log.partition(TOPIC, 0)
        assert part.high_watermark == built.hw  # nothing after the damage is dropped
        with pytest.raises(CorruptRecordError):
            part.read(rng.randrange(header.base_offset, header.next_offset))
        before = [r for r in built.rows if r[0] < header.base_offset]
        after = [r for r in built.rows if r[0] >= header.next_offset]
        rows: list[Row] = []
        offset = 0
        while offset < header.base_offset:  # reads stop short of the damaged batch
            chunk = read_rows_until(part, offset, header.base_offset)
            rows.extend(chunk)
            offset = chunk[-1][0] + 1
        assert rows == before
        if after:
            assert read_rows(part, header.next_offset) == after
        log.close()
        shutil.rmtree(data)


def read_rows_until(part: Partition, offset: int, stop: int) -> list[Row]:
    data = part.read(offset, 1 << 20)
    rows: list[Row] = []
    view = memoryview(data)
    for pos, header in iter_batches(data):
        batch = view[pos : pos + header.size]
        check_batch(batch)
        rows.extend((r.offset, r.key, r.value, r.timestamp) for r in decode_records(header, batch))
    assert rows and rows[-1][0] < stop
    return rows


# -- compaction crashes ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def compactable(tmp_path_factory: pytest.TempPathFactory) -> Built:
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "1500",
        "index.interval.bytes": "200",
        "delete.retention.ms": str(10**9),
    }
    return build(tmp_path_factory.mktemp("compactable"), random.Random(13), 120, config)


def check_compacted(log: LogManager, built: Built) -> None:
    """Clean reads; only acknowledged records; every key's latest value still there."""
    part = log.partition(TOPIC, 0)
    assert part.high_watermark == built.hw
    rows = read_rows(part)
    acked = set(built.rows)
    assert all(row in acked for row in rows)
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets))
    latest = {r[1]: r for r in built.rows if r[1] is not None}
    for key, row in latest.items():
        assert row in rows, f"the latest value of {key!r} is lost"
    assert all(r in rows for r in built.rows if r[1] is None)  # keyless records stay


class Crash(Exception):
    pass


def crashing_replace(at_call: int, real: Callable[[StrPath, StrPath], None]) -> Callable[[StrPath, StrPath], None]:
    """An ``os.replace`` that "crashes the process" (raises) at its ``at_call``-th call."""
    calls = 0

    def replace(src: StrPath, dst: StrPath) -> None:
        nonlocal calls
        calls += 1
        if calls == at_call:
            raise Crash(f"crash at os.replace #{at_call}: {src} -> {dst}")
        real(src, dst)

    return replace


@pytest.mark.slow
def test_a_crash_at_any_step_of_compaction(compactable: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_replace = os.replace
    step = 0
    while True:
        step += 1
        data = copy(compactable.clean, tmp_path, f"live{step}")
        log = reopen(data)
        monkeypatch.setattr(os, "replace", crashing_replace(step, real_replace))
        try:
            log.run_upkeep(force_compaction=True)
            finished = True
        except Crash:
            finished = False
        finally:
            monkeypatch.setattr(os, "replace", real_replace)
        crashed = copy(data, tmp_path, f"crashed{step}")  # the files as the crash left them
        log._release_lock()
        assert not (crashed / ".clean_shutdown").exists()
        after = reopen(crashed)
        try:
            check_compacted(after, compactable)
            after.run_upkeep(force_compaction=True)  # the next run finishes the job
            check_compacted(after, compactable)
        finally:
            after.close()
        shutil.rmtree(data)
        shutil.rmtree(crashed)
        if finished:
            break
    assert step > 5  # several segments, each swapped in several steps


@pytest.mark.parametrize("clean_marker", [True, False])
@pytest.mark.parametrize(
    "state", ["partial-cleaned", "whole-cleaned", "indexes-removed", "log-replaced", "timeindex-missing"]
)
def test_compaction_crash_states_by_hand(
    compactable: Built, tmp_path: Path, state: str, clean_marker: bool
) -> None:
    """The files a crash can leave between the cleaner's steps, for one segment."""
    reference = copy(compactable.clean, tmp_path, "reference")
    log = reopen(reference)
    log.run_upkeep(force_compaction=True)
    log.close()
    data = copy(compactable.clean, tmp_path, "data")
    victim = segment_logs(data)[1]
    cleaned = (partition_dir(reference) / victim.name).read_bytes()
    assert cleaned != victim.read_bytes()
    index, timeindex = victim.with_suffix(".index"), victim.with_suffix(".timeindex")
    leftover = victim.with_name(victim.name + ".cleaned")
    if state == "partial-cleaned":
        leftover.write_bytes(cleaned[: len(cleaned) // 2])
    elif state == "whole-cleaned":
        leftover.write_bytes(cleaned)
    elif state == "indexes-removed":
        leftover.write_bytes(cleaned)
        index.unlink()
        timeindex.unlink()
    elif state == "log-replaced":
        victim.write_bytes(cleaned)
        index.unlink()
        timeindex.unlink()
    else:
        victim.write_bytes(cleaned)
        index.write_bytes((partition_dir(reference) / index.name).read_bytes())
        timeindex.unlink()
    if not clean_marker:
        (data / ".clean_shutdown").unlink()
    after = reopen(data)
    try:
        assert not leftover.exists()
        check_compacted(after, compactable)
        assert all(r.truncated_bytes == 0 for r in after.recovery_reports)
    finally:
        after.close()


def test_compaction_refuses_a_damaged_segment_and_keeps_it(compactable: Built, tmp_path: Path) -> None:
    data = copy(compactable.clean, tmp_path, "data")
    victim = segment_logs(data)[0]
    pos, header = batches_of(victim)[-1]
    raw = bytearray(victim.read_bytes())
    raw[pos + header.size - 2] ^= 0x55
    victim.write_bytes(bytes(raw))
    log = reopen(data)
    try:
        with pytest.raises(CorruptRecordError):
            compaction.compact(log.partition(TOPIC, 0), T0 + 10**6, force=True)
        assert victim.read_bytes() == bytes(raw)  # not rewritten with a fresh CRC
        # upkeep reports the partition it could not compact and goes on with the others
        log.create_topic("other", 1, {"retention.ms": "1000", "segment.bytes": "100"})
        for _ in range(3):
            log.partition("other", 0).append_records([NewRecord(None, b"x" * 60, T0)])
        report = log.run_upkeep(force_compaction=True)
        assert report.errors == 1
        assert report.segments_deleted == 3  # all three expired, the active one too (as Kafka)
        assert victim.read_bytes() == bytes(raw)
    finally:
        log.close()
