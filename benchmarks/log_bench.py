"""The commit log's storage engine beside the raw disk, in one run (issue 2, "Must show").

Every phase moves the same bytes: about ``--size-mb`` MiB of record batches (1,000 records of
``--record-bytes`` = 100-byte values each, no key, no compression), built once up front with
``build_batch`` (building is the producer's cost, not the log's, so it is never timed).

Per run, in a fresh directory under ``--dir`` (default: the system temp dir):

1. raw write: ``os.write`` of each batch buffer to one file opened ``O_APPEND`` (as the log
   opens its segments), fsynced by the same policy as the log (see ``--flush``);
2. log append: ``Partition.append`` of each prepared batch, through a ``LogManager`` with its
   background upkeep thread running (it is what applies ``flush.ms``); append checks each
   batch (magic, sizes, CRC-32C), stamps the base offset and writes it, rolling segments at
   the default ``segment.bytes`` of 128 MiB;
3. raw read: the raw file read back with ``os.read`` in ``--fetch-kib`` chunks (1 MiB, a
   consumer's fetch size);
4. log read: ``Partition.read`` from offset 0 to the high watermark in ``--fetch-kib`` fetches,
   as the broker serves consumers (the log checks every batch's CRC on read); the next
   offset comes from the last batch header of each fetch;
5. reopen after a clean close (indexes intact): ``LogManager.open`` + the first 1 MiB read;
   then, as extra information, reopen after an unclean shutdown (the clean-shutdown marker
   removed: the active segment is scanned and recovered) and reopen with every index file
   deleted (every segment scanned, CRC-checked and re-indexed: the worst case).

Both writes are timed twice: until the last write/append returned (what a producer waits
for) and until a final ``fsync``/``Partition.flush`` returned (every byte on disk). The second
pair is the like-for-like one whatever the policy: 1 GB fits under the kernel's dirty-page
limits, so an unfsynced raw write never reaches the disk inside its timing, while the log
fsyncs each segment it rolls (every 128 MiB) on the appending thread. The unclean reopen
scans only the active segment, whose size the run prints (at exactly 1024 MiB it holds one
batch; ``--size-mb 1000`` leaves ~109 MB in it).

``os.sync()`` runs (untimed) between phases so one phase's dirty pages are not written back on
the next one's time. Reads are warm (page cache) unless ``--cold`` drops the page cache
(``echo 3 > /proc/sys/vm/drop_caches``, needs root) before each read and reopen phase.

Flush policies (``--flush``, comma-separated, each measured for ``--runs`` runs):

``default``      the topic defaults: flush.messages=0, flush.ms=1000. The log's upkeep thread
                 (every 200 ms) fsyncs the active segment once 1 s has passed; the raw
                 writer's helper thread fsyncs its file every 1 s.
``none``         flush.messages=0, flush.ms=0: no fsync by policy (the log still fsyncs each
                 segment it rolls); the raw writer never fsyncs.
``messages:N``   flush.messages=N: fsync in the appending thread once N records are unflushed;
                 the raw writer does the same. ``messages:1000000`` is about every 1,000
                 batches (~110 MB).
``ms:N``         flush.ms=N, as ``default`` with another interval.
``per-append``   flush.messages=1: fsync after every batch, in both.

MB are 10^6 bytes of batches as they lie on disk (a 100-byte record takes 108 bytes there).
Medians of the runs are printed; the ratios are medians of each run's own ratio.

Goals (issue 2): append >= 80% of the raw write rate, read >= 50% of the raw read rate,
reopen of a 1 GB log with intact indexes < 1 s.

    .venv/bin/python benchmarks/log_bench.py                       # 1 GiB, default + messages:1000000
    .venv/bin/python benchmarks/log_bench.py --size-mb 64 --runs 1 --flush per-append
    .venv/bin/python benchmarks/log_bench.py --size-mb 256 --runs 1 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from streamkit.log.config import TopicConfig
from streamkit.log.manager import LogManager
from streamkit.log.partition import Partition
from streamkit.log.records import NewRecord, build_batch

MIB = 1024 * 1024
TOPIC = "bench"
_OFFSET_LENGTH = struct.Struct(">qi")  # BaseOffset, BatchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a batch


# -- flush policies --------------------------------------------------------------------------


@dataclass(frozen=True)
class FlushPolicy:
    name: str
    flush_messages: int
    flush_ms: int

    def topic_config(self) -> TopicConfig:
        return TopicConfig(flush_messages=self.flush_messages, flush_ms=self.flush_ms)


def parse_policy(text: str) -> FlushPolicy:
    defaults = TopicConfig()
    if text == "default":
        return FlushPolicy(
            f"default (flush.messages={defaults.flush_messages}, flush.ms={defaults.flush_ms})",
            defaults.flush_messages,
            defaults.flush_ms,
        )
    if text == "none":
        return FlushPolicy("none (flush.messages=0, flush.ms=0)", 0, 0)
    if text == "per-append":
        return FlushPolicy("per-append (flush.messages=1)", 1, 0)
    kind, _, value = text.partition(":")
    if kind in ("messages", "ms") and value.isdigit() and int(value) > 0:
        n = int(value)
        if kind == "messages":
            return FlushPolicy(f"flush.messages={n}", n, 0)
        return FlushPolicy(f"flush.ms={n}", 0, n)
    raise argparse.ArgumentTypeError(
        f"bad flush policy {text!r}: use default, none, per-append, messages:N or ms:N"
    )


# -- results ---------------------------------------------------------------------------------


@dataclass
class Timing:
    records: int
    nbytes: int
    seconds: float


@dataclass
class RunResult:
    timings: dict[str, Timing] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


PHASES = [
    ("raw_write", "raw write (os.write)"),
    ("append", "log append (Partition.append)"),
    ("raw_write_durable", "raw write + final fsync"),
    ("append_durable", "log append + final flush"),
    ("raw_read", "raw read (os.read)"),
    ("read", "log read (Partition.read)"),
    ("reopen", "reopen, clean (open + 1st read)"),
    ("reopen_unclean", "reopen, unclean (active seg recovered)"),
    ("reopen_noindex", "reopen, all indexes deleted (rebuild)"),
]


# -- the workload ----------------------------------------------------------------------------


def build_batches(total_bytes: int, record_bytes: int, per_batch: int) -> tuple[list[bytes], int]:
    """Distinct batches of ``per_batch`` records until ``total_bytes``; (batches, records)."""
    pad = b"x" * record_bytes
    now_ms = time.time_ns() // 1_000_000
    first = build_batch([NewRecord(None, pad, now_ms)] * per_batch)
    count = max(1, total_bytes // len(first))
    batches = []
    n = 0
    for j in range(count):
        values = [(b"%012d" % (n + i) + pad)[:record_bytes] for i in range(per_batch)]
        batches.append(build_batch([NewRecord(None, v, now_ms + j) for v in values]))
        n += per_batch
    return batches, n


def settle() -> None:
    os.sync()
    time.sleep(0.3)


def drop_caches(cold: bool) -> None:
    if not cold:
        return
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as exc:
        raise SystemExit(
            f"--cold: cannot drop the page cache ({exc}); run as root or drop --cold"
        ) from exc


class PeriodicFsync:
    """The raw writer's stand-in for the log's flush.ms upkeep: fsync every ``interval_ms``."""

    def __init__(self, fd: int, interval_ms: int) -> None:
        self.fd = fd
        self.interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            os.fsync(self.fd)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def raw_write(
    path: Path, batches: list[bytes], per_batch: int, policy: FlushPolicy
) -> tuple[Timing, Timing]:
    """(until the last write returned, until a final fsync returned)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    write, fsync = os.write, os.fsync
    every = policy.flush_messages
    unflushed = 0
    nbytes = 0
    ticker = PeriodicFsync(fd, policy.flush_ms) if policy.flush_ms else None
    try:
        started = time.perf_counter()
        if ticker is not None:
            ticker.start()
        for data in batches:
            written = write(fd, data)
            if written != len(data):
                raise SystemExit("short write")
            nbytes += written
            if every:
                unflushed += per_batch
                if unflushed >= every:
                    fsync(fd)
                    unflushed = 0
        seconds = time.perf_counter() - started
        if ticker is not None:
            ticker.stop()
            ticker = None
        fsync(fd)
        durable = time.perf_counter() - started
    finally:
        if ticker is not None:
            ticker.stop()
        os.close(fd)
    records = len(batches) * per_batch
    return Timing(records, nbytes, seconds), Timing(records, nbytes, durable)


def raw_read(path: Path, fetch_bytes: int, records: int) -> Timing:
    fd = os.open(path, os.O_RDONLY)
    read = os.read
    nbytes = 0
    try:
        started = time.perf_counter()
        while chunk := read(fd, fetch_bytes):
            nbytes += len(chunk)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
    return Timing(records, nbytes, seconds)


def open_log(directory: Path, policy: FlushPolicy) -> LogManager:
    return LogManager(directory, defaults=policy.topic_config()).open()


def log_append(partition: Partition, batches: list[bytes], per_batch: int) -> tuple[Timing, Timing]:
    """(until the last append returned, until a final ``Partition.flush`` returned)."""
    append = partition.append
    started = time.perf_counter()
    for data in batches:
        append(data)
    seconds = time.perf_counter() - started
    partition.flush()
    durable = time.perf_counter() - started
    records, nbytes = len(batches) * per_batch, sum(map(len, batches))
    return Timing(records, nbytes, seconds), Timing(records, nbytes, durable)


def next_offset_and_count(data: bytes) -> tuple[int, int]:
    """What a consumer learns from a fetch: its next offset, and the records it got."""
    pos, end = 0, len(data)
    base = last_delta = -1
    records = 0
    while pos < end:
        base, length = _OFFSET_LENGTH.unpack_from(data, pos)
        (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(data, pos + 23)
        records += last_delta + 1
        pos += length + 12
    return base + last_delta + 1, records


def log_read(partition: Partition, fetch_bytes: int) -> Timing:
    read = partition.read
    offset, end = partition.log_start_offset, partition.high_watermark
    nbytes = records = 0
    started = time.perf_counter()
    while offset < end:
        data = read(offset, fetch_bytes)
        if not data:
            raise SystemExit(f"log read returned nothing at offset {offset} < {end}")
        nbytes += len(data)
        offset, got = next_offset_and_count(data)
        records += got
    seconds = time.perf_counter() - started
    return Timing(records, nbytes, seconds)


def reopen(directory: Path, policy: FlushPolicy, fetch_bytes: int) -> tuple[Timing, LogManager]:
    started = time.perf_counter()
    log = LogManager(directory, defaults=policy.topic_config()).open()
    data = log.partition(TOPIC, 0).read(0, fetch_bytes)
    seconds = time.perf_counter() - started
    if not data:
        raise SystemExit("the first read after reopening returned nothing")
    return Timing(0, 0, seconds), log


def one_run(
    root: Path,
    batches: list[bytes],
    per_batch: int,
    policy: FlushPolicy,
    args: argparse.Namespace,
    profiles: dict[str, cProfile.Profile] | None = None,
) -> RunResult:
    result = RunResult()
    fetch = args.fetch_kib * 1024
    total_records = len(batches) * per_batch
    raw_path = root / "raw.bin"
    data_dir = root / "log"

    settle()
    timings = result.timings
    timings["raw_write"], timings["raw_write_durable"] = raw_write(
        raw_path, batches, per_batch, policy
    )

    settle()
    log = open_log(data_dir, policy)
    log.create_topic(TOPIC, 1)
    partition = log.partition(TOPIC, 0)
    if profiles is not None:
        profiles["append"].enable()
    timings["append"], timings["append_durable"] = log_append(partition, batches, per_batch)
    if profiles is not None:
        profiles["append"].disable()
    result.notes["segments"] = str(len(partition.segments))
    result.notes["active segment bytes"] = f"{partition.segments[-1].size:,}"

    settle()
    drop_caches(args.cold)
    result.timings["raw_read"] = raw_read(raw_path, fetch, total_records)
    raw_path.unlink()

    drop_caches(args.cold)
    if profiles is not None:
        profiles["read"].enable()
    got = log_read(partition, fetch)
    if profiles is not None:
        profiles["read"].disable()
    if got.records != total_records or got.nbytes != partition.size_bytes:
        raise SystemExit(
            f"log read got {got.records} records / {got.nbytes} bytes, "
            f"expected {total_records} / {partition.size_bytes}"
        )
    result.timings["read"] = got
    log.close()

    if args.no_reopen:
        return result
    drop_caches(args.cold)
    timing, log = reopen(data_dir, policy, fetch)
    result.timings["reopen"] = timing
    if log.recovery_reports:
        result.notes["clean reopen reports"] = "; ".join(map(str, log.recovery_reports))
    log.close()

    (data_dir / ".clean_shutdown").unlink()
    drop_caches(args.cold)
    timing, log = reopen(data_dir, policy, fetch)
    result.timings["reopen_unclean"] = timing
    log.close()

    partition_dir = data_dir / f"{TOPIC}-0"
    for entry in partition_dir.iterdir():
        if entry.suffix in (".index", ".timeindex"):
            entry.unlink()
    drop_caches(args.cold)
    timing, log = reopen(data_dir, policy, fetch)
    result.timings["reopen_noindex"] = timing
    result.notes["rebuild reports"] = str(len(log.recovery_reports))
    log.close()
    return result


# -- reporting -------------------------------------------------------------------------------


def median_of(runs: list[RunResult], key: str, value: Callable[[Timing], float]) -> float:
    return statistics.median(value(r.timings[key]) for r in runs)


def report(policy: FlushPolicy, runs: list[RunResult], args: argparse.Namespace) -> None:
    print(f"{'phase':<42}{'records/s':>14}{'MB/s':>10}{'seconds':>10}   per run (s)")
    for key, label in PHASES:
        if key not in runs[0].timings:
            continue
        secs = median_of(runs, key, lambda t: t.seconds)
        each = " ".join(f"{r.timings[key].seconds:.3f}" for r in runs)
        t0 = runs[0].timings[key]
        if t0.nbytes:
            rps = median_of(runs, key, lambda t: t.records / t.seconds)
            mbps = median_of(runs, key, lambda t: t.nbytes / t.seconds / 1e6)
            print(f"{label:<42}{rps:>14,.0f}{mbps:>10,.1f}{secs:>10.3f}   {each}")
        else:
            print(f"{label:<42}{'':>14}{'':>10}{secs:>10.3f}   {each}")

    def ratio(a: str, b: str) -> float:
        return statistics.median(r.timings[b].seconds / r.timings[a].seconds for r in runs)

    append_ratio = ratio("append", "raw_write")
    durable_ratio = ratio("append_durable", "raw_write_durable")
    read_ratio = ratio("read", "raw_read")
    print(
        f"append / raw write:                 {append_ratio:6.1%}   goal >= 80%  {_verdict(append_ratio >= 0.8)}"
    )
    print(
        f"  the same, both to a final fsync:  {durable_ratio:6.1%}   goal >= 80%  {_verdict(durable_ratio >= 0.8)}"
    )
    print(
        f"read / raw read:                    {read_ratio:6.1%}   goal >= 50%  {_verdict(read_ratio >= 0.5)}"
    )
    if "reopen" in runs[0].timings:
        secs = median_of(runs, "reopen", lambda t: t.seconds)
        print(
            f"clean reopen:                       {secs:6.3f} s  goal < 1 s    {_verdict(secs < 1.0)}"
        )
    for name in runs[0].notes:
        print(f"  {name}: {', '.join(r.notes.get(name, '-') for r in runs)}")


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def print_profile(name: str, profile: cProfile.Profile, top: int) -> None:
    print(f"\n== cProfile of {name} (top {top} by own time)")
    stats = pstats.Stats(profile, stream=sys.stdout)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size-mb", type=float, default=1024.0, help="MiB of batches to append (default 1024)"
    )
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--batch-records", type=int, default=1000)
    parser.add_argument(
        "--fetch-kib", type=int, default=1024, help="read size of both readers (default 1024)"
    )
    parser.add_argument(
        "--flush",
        default="default,messages:1000000",
        help="comma-separated policies: default, none, per-append, messages:N, ms:N "
        "(default: default,messages:1000000)",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per policy; medians are reported")
    parser.add_argument(
        "--cold", action="store_true", help="drop the page cache before reads (root)"
    )
    parser.add_argument("--no-reopen", action="store_true", help="skip the reopen measurements")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the run directories")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile append and read (one run each)"
    )
    parser.add_argument("--profile-top", type=int, default=20)
    args = parser.parse_args()
    # Reopening with the indexes deleted logs a recovery report per segment: expected here,
    # and counted in the results instead.
    logging.getLogger("streamkit.log").setLevel(logging.ERROR)
    try:
        policies = [parse_policy(p.strip()) for p in args.flush.split(",") if p.strip()]
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if args.runs < 1 or args.size_mb <= 0:
        parser.error("--runs and --size-mb must be positive")

    parent = args.dir or Path(tempfile.gettempdir())
    free = shutil.disk_usage(parent).free
    need = 2.2 * args.size_mb * MIB
    if free < need:
        raise SystemExit(
            f"{parent} has {free / 1e9:.1f} GB free; this run needs {need / 1e9:.1f} GB"
        )

    started = time.perf_counter()
    batches, records = build_batches(int(args.size_mb * MIB), args.record_bytes, args.batch_records)
    total = sum(map(len, batches))
    print(
        f"built {len(batches):,} batches of {args.batch_records:,} x {args.record_bytes}-byte records "
        f"({records:,} records, {total / 1e6:,.1f} MB, {len(batches[0]):,} bytes a batch) "
        f"in {time.perf_counter() - started:.1f} s (not timed below)"
    )
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, data under {parent}, "
        f"fetch {args.fetch_kib} KiB"
    )

    cache = "cold (page cache dropped before reads and reopens)" if args.cold else "warm page cache"
    for policy in policies:
        print(f"\n== flush policy: {policy.name}; {args.runs} run(s); reads: {cache}", flush=True)
        if args.profile:
            # An extra run, not counted: cProfile slows every Python call down.
            profiles = {"append": cProfile.Profile(), "read": cProfile.Profile()}
            root = Path(tempfile.mkdtemp(prefix="log_bench-", dir=parent))
            try:
                one_run(root, batches, args.batch_records, policy, args, profiles)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            for name, profile in profiles.items():
                print_profile(f"{name} [{policy.name}]", profile, args.profile_top)
        runs: list[RunResult] = []
        for i in range(args.runs):
            root = Path(tempfile.mkdtemp(prefix="log_bench-", dir=parent))
            try:
                runs.append(one_run(root, batches, args.batch_records, policy, args))
            finally:
                shutil.rmtree(root, ignore_errors=True)
            r = runs[-1].timings
            print(
                f"  run {i + 1}: raw write {r['raw_write'].seconds:.2f} s, append {r['append'].seconds:.2f} s, "
                f"raw read {r['raw_read'].seconds:.2f} s, read {r['read'].seconds:.2f} s",
                flush=True,
            )
        report(policy, runs, args)


if __name__ == "__main__":
    main()
