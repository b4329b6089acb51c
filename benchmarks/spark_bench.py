"""The Spark data source beside Spark's own Parquet reader, in one run (Spark issue, "Must show").

Both sides hold the same rows: ``--records`` records (default 10,000,000) over
``--partitions`` partitions (default 4), each with a 16-byte key, a ``--value-bytes`` value
(default 100) and a timestamp, no headers.

1. setup (untimed): the topic (values: random bytes at a moving start, not one repeated value) is written to a fresh data directory with ``append_records`` in
   batches of 1,000 records (uncompressed, as a producer's default); the same rows, with
   every column the data source gives (key, value, topic, partition, offset, timestamp,
   timestampType, headers), are written with pyarrow to one Parquet file per partition
   (uncompressed, row groups of 128 Ki rows), so both sides hand Spark the same data in as
   many files and Spark partitions;
2. per run, each side: ``spark.read...load()`` and ``write.format("noop")``, which makes
   Spark produce every column of every row (no column pruning, no output cost). The Parquet
   read goes through Spark's vectorized JVM reader; the data source through Python workers
   that read the segment files (CRC-checked), decode the records and pass Arrow batches.

The figures are records per second of wall time and records per CPU second of the JVM and
its Python workers (the figure least moved by other load on a shared machine), the medians
of ``--runs`` runs of each side (interleaved), and the data source's rate as a percentage of
the Parquet rate (the goal: >= 50%). A short
warm-up read of each side comes first (JIT, Python worker start). Reads are warm: both
inputs sit in the page cache.

    .venv/bin/python benchmarks/spark_bench.py                       # 10M records, 3 runs
    .venv/bin/python benchmarks/spark_bench.py --records 2000000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord
from streamkit.spark.arrow import record_batches
from streamkit.spark.logs import FileLog

TS0 = 1_700_000_000_000
BATCH = 1_000


def build(data_dir: Path, parquet_dir: Path, records: int, partitions: int, value_bytes: int) -> None:
    per_partition = records // partitions
    # Values differ (random bytes at a moving start), so neither side gets to dictionary-encode
    # a single repeated value.
    pool = os.urandom(1 << 20)
    with LogManager(data_dir, background=False) as log:
        log.create_topic("bench", partitions)
        for p in range(partitions):
            part = log.partition("bench", p)
            for base in range(0, per_partition, BATCH):
                n = min(BATCH, per_partition - base)
                part.append_records(
                    [
                        NewRecord(
                            b"key-%012d" % (base + i),
                            pool[(base + i) * 7 % 1_000_000 :][:value_bytes],
                            TS0 + base + i,
                        )
                        for i in range(n)
                    ]
                )
            part.flush()
    # The Parquet side: the very rows the data source yields, through the same conversion.
    parquet_dir.mkdir()
    for p in range(partitions):
        source = FileLog(str(data_dir), "bench")
        writer: pq.ParquetWriter | None = None
        for batch in record_batches("bench", p, source.read(p, 0, per_partition), include_headers=True):
            if writer is None:
                writer = pq.ParquetWriter(parquet_dir / f"part-{p}.parquet", batch.schema, compression="none")
            writer.write_table(pa.Table.from_batches([batch]), row_group_size=128 * 1024)
        if writer is not None:
            writer.close()


def tree_cpu_s(root_pid: int) -> float:
    """CPU seconds used so far by ``root_pid`` and every process under it (Linux ``/proc``):
    the JVM, its Python workers, and (through ``cutime``/``cstime``) the exited planner
    processes it waited for."""
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, cpu seconds)
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, ..., utime (index 11), stime, cutime, cstime.
        stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    total, todo = 0.0, [root_pid]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, (0, 0.0))[1]
        todo.extend(child for child, (parent, _cpu) in stats.items() if parent == pid)
    return total


def timed(action: object, jvm_pid: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the JVM and its Python workers) of one action."""
    cpu = tree_cpu_s(jvm_pid)
    start = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - start, tree_cpu_s(jvm_pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2, help="Spark's local[N]")
    parser.add_argument("--dir", default=None, help="where the data goes (default: the temp dir)")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from streamkit.spark import register

    root = Path(tempfile.mkdtemp(prefix="spark-bench-", dir=args.dir))
    try:
        data_dir, parquet_dir = root / "data", root / "parquet"
        t = time.perf_counter()
        build(data_dir, parquet_dir, args.records, args.partitions, args.value_bytes)
        t = time.perf_counter() - t
        records = args.records // args.partitions * args.partitions
        log_mb = sum(f.stat().st_size for f in data_dir.rglob("*.log")) / 1e6
        pq_mb = sum(f.stat().st_size for f in parquet_dir.glob("*.parquet")) / 1e6
        print(f"setup: {records:,} records, log {log_mb:,.0f} MB, parquet {pq_mb:,.0f} MB ({t:.0f} s)")

        spark = (
            SparkSession.builder.master(f"local[{args.cores}]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(args.cores))
            .config("spark.driver.memory", "2g")
            .config("spark.pyspark.python", sys.executable)
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        jvm_pid = spark.sparkContext._gateway.proc.pid
        # One Spark partition per log partition, as Parquet gets one per file.
        per_partition = str(args.records // args.partitions)

        def read_source() -> None:
            (
                spark.read.format("streamkit").option("path", str(data_dir)).option("topic", "bench")
                .option("maxRecordsPerPartition", per_partition).load()
                .write.format("noop").mode("overwrite").save()
            )

        def read_parquet() -> None:
            spark.read.parquet(str(parquet_dir)).write.format("noop").mode("overwrite").save()

        count = spark.read.parquet(str(parquet_dir)).count()
        assert count == records, (count, records)
        counted = spark.read.format("streamkit").option("path", str(data_dir)).option("topic", "bench").load().count()
        assert counted == records, (counted, records)
        source_s: list[tuple[float, float]] = []
        parquet_s: list[tuple[float, float]] = []
        for run in range(args.runs):
            parquet_s.append(timed(read_parquet, jvm_pid))
            source_s.append(timed(read_source, jvm_pid))
            (pw, pc), (sw, sc) = parquet_s[-1], source_s[-1]
            print(
                f"run {run + 1}: parquet {records / pw:,.0f} rec/s ({pw:.1f} s, {records / pc:,.0f} rec/CPU-s), "
                f"streamkit {records / sw:,.0f} rec/s ({sw:.1f} s, {records / sc:,.0f} rec/CPU-s)"
            )
        spark.stop()
        for what, pick in (("rec/s", 0), ("rec/CPU-s", 1)):
            src = records / statistics.median(x[pick] for x in source_s)
            par = records / statistics.median(x[pick] for x in parquet_s)
            print(
                f"median of {args.runs}: streamkit {src:,.0f} {what}, parquet {par:,.0f} {what}: "
                f"{100 * src / par:.0f}% of the Parquet read"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
