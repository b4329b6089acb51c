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
   that read the segment files (CRC-checked), decode the batches column-wise
   (``spark/columns.py``) and pass Arrow batches. Before the runs, the CPU per record of
   that decoding in this one process (no Spark) is printed beside the record path's.

The figures are records per second of wall time and records per CPU second of the JVM and
its Python workers (the figure least moved by other load on a shared machine), the medians
of ``--runs`` runs of each side (interleaved), and the data source's rate as a percentage of
the Parquet rate (the goal: >= 50%). A short
warm-up read of each side comes first (JIT, Python worker start). Reads are warm: both
inputs sit in the page cache.

The second part (``--backfill-records``, default 3,000,000; 0 skips it; ``--skip-read``
skips the first) is the backfill of a keyed count beside replaying the same topic through a
streamkit worker. The app is ``app`` below: orders (a JSON value with a user, 1,000 users)
counted per user through a ``group_by`` (so a repartition topic), the DSL's keyed count.

1. setup (untimed): the orders topic is written to a data directory (4 partitions) and
   copied;
2. replay: a ``Worker`` (``streamkit.runtime``, what ``streamkit worker`` runs, in this
   process, on the embedded log) starts on the copy and runs until both stages committed
   every record and the table is settled; timed from its start;
3. backfill: ``streamkit.spark.backfill.backfill`` in a ``local[--cores]`` session (started
   beforehand, like the worker's interpreter): the read, the count, the changelog write and
   the group commit;
4. both tables are checked against the expected counts.

The figures are records per second of wall time and per CPU second (the worker: this process;
the backfill: the JVM, its Python workers and this process, the driver).

    .venv/bin/python benchmarks/spark_bench.py                       # 10M records, 3 runs
    .venv/bin/python benchmarks/spark_bench.py --records 2000000 --runs 3 --backfill-records 0
    .venv/bin/python benchmarks/spark_bench.py --skip-read                 # the backfill: 3M records, 3 runs
    .venv/bin/python benchmarks/spark_bench.py --skip-read --backfill-records 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import streamkit as sk
from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord
from streamkit.spark.arrow import record_batches
from streamkit.spark.columns import column_batches
from streamkit.spark.logs import FileLog, read_records

TS0 = 1_700_000_000_000
BATCH = 1_000
USERS = 1_000
ORDER_PARTITIONS = 4

# The backfill's app (imported by the Spark workers as spark_bench:app).
app = sk.App("spark-bench", broker=os.environ.get("SPARK_BENCH_BROKER", "file://.streamkit"))
orders = app.topic("orders", key_type=str, value_type=dict, partitions=ORDER_PARTITIONS)
per_user = app.stream(orders).group_by(lambda o: o["user"], name="user").count("orders_per_user")


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
        for batch in record_batches("bench", p, read_records(source, p, 0, per_partition), include_headers=True):
            if writer is None:
                writer = pq.ParquetWriter(parquet_dir / f"part-{p}.parquet", batch.schema, compression="none")
            writer.write_table(pa.Table.from_batches([batch]), row_group_size=128 * 1024)
        if writer is not None:
            writer.close()


def build_orders(data_dir: Path, records: int) -> dict[str, int]:
    """The orders topic; the expected count per user."""
    with LogManager(data_dir, background=False) as log:
        log.create_topic("orders", ORDER_PARTITIONS)
        for p in range(ORDER_PARTITIONS):
            part = log.partition("orders", p)
            for base in range(p, records, ORDER_PARTITIONS * BATCH):
                part.append_records(
                    [
                        NewRecord(
                            b"o%d" % i,
                            json.dumps({"user": f"u{i % USERS}", "amount": i % 97, "item": f"sku-{i % 5003}"}).encode(),
                            TS0 + i,
                        )
                        for i in range(base, min(records, base + ORDER_PARTITIONS * BATCH), ORDER_PARTITIONS)
                    ]
                )
            part.flush()
    expected: dict[str, int] = {}
    for i in range(records):
        expected[f"u{i % USERS}"] = expected.get(f"u{i % USERS}", 0) + 1
    return expected


async def replay(data_dir: Path, state_dir: Path, records: int) -> tuple[float, float, dict[str, int]]:
    """(wall s, CPU s, the table) of a worker that processes the whole topic."""
    import gc

    from streamkit.runtime import Worker

    app.broker = f"file://{data_dir}"
    gc_default = gc.get_threshold()
    gc.set_threshold(700, 10, 100)  # as `streamkit worker` sets it (cli/apps.py)
    cpu = time.process_time()
    started = time.perf_counter()
    worker = Worker(app, state_dir=str(state_dir))
    try:
        await worker.start()
        while True:
            done = sum(
                position
                for task in worker.tasks.values()
                for inbox in task.inboxes.values()
                if (position := inbox.commit_position()) is not None
            )
            if done >= 2 * records:  # both stages: the orders, then the repartition topic
                break
            if time.perf_counter() - started > 1800:
                raise TimeoutError(f"the worker processed {done} of {2 * records} after 30 minutes")
            await asyncio.sleep(0.05)
        while not await worker.settle():
            await asyncio.sleep(0.05)
        await worker.commit()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        return wall, cpu, dict(per_user.items())
    finally:
        await worker.stop()
        gc.set_threshold(*gc_default)


def bench_backfill(spark: Any, root: Path, records: int, runs: int, jvm_pid: int) -> None:
    from streamkit.spark.backfill import backfill

    history, copy = root / "orders", root / "orders-replay"
    t = time.perf_counter()
    expected = build_orders(history, records)
    shutil.copytree(history, copy)
    print(f"backfill setup: {records:,} orders, {USERS:,} users ({time.perf_counter() - t:.0f} s)")

    wall, cpu, table = asyncio.run(replay(copy, root / "replay-state", records))
    assert table == expected, "the worker's counts are wrong"
    print(f"replay through a worker: {records / wall:,.0f} rec/s ({wall:.1f} s, {records / cpu:,.0f} rec/CPU-s)")
    shutil.rmtree(copy, ignore_errors=True)

    os.environ["SPARK_BENCH_BROKER"] = f"file://{history}"
    app.broker = f"file://{history}"
    sys.modules.setdefault("spark_bench", sys.modules[__name__])  # the workers import spark_bench:app

    def run() -> None:
        (report,) = backfill(spark, "spark_bench:app", "orders_per_user")
        assert report.records_read == records and report.keys_written == USERS, report

    results = []
    for attempt in range(runs):
        own = time.process_time()
        bw, bc = timed(run, jvm_pid)
        bc += time.process_time() - own
        results.append((bw, bc))
        what = "cold: the session's first Python workers start" if attempt == 0 else "warm"
        print(f"backfill on Spark, run {attempt + 1} ({what}): {records / bw:,.0f} rec/s ({bw:.1f} s, "
              f"{records / bc:,.0f} rec/CPU-s); {wall / bw:.1f}x the replay's wall time, {cpu / bc:.1f}x its CPU")
    changelog = per_user.table.changelog_topic.name
    rows = spark.read.format("streamkit").option("path", str(history)).option("topic", changelog).load().collect()
    latest = {json.loads(bytes(r.key)): json.loads(bytes(r.value)) for r in rows}  # compacted: the last wins
    assert latest == expected, "the backfill's counts are wrong"


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
    parser.add_argument("--skip-read", action="store_true", help="only the backfill part")
    # A backfill has ~0.5 s of fixed cost (scheduling its job, the driver's log work): at 1M
    # records that is a quarter of its CPU; histories worth a backfill are larger.
    parser.add_argument("--backfill-records", type=int, default=3_000_000, help="0: no backfill part")
    parser.add_argument("--backfill-runs", type=int, default=3, help="backfills of the same history, one after another")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from streamkit.spark import register

    root = Path(tempfile.mkdtemp(prefix="spark-bench-", dir=args.dir))
    try:
        spark = (
            SparkSession.builder.master(f"local[{args.cores}]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", str(args.cores))
            .config("spark.driver.memory", "2g")
            .config("spark.pyspark.python", sys.executable)
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        jvm_pid = spark.sparkContext._gateway.proc.pid
        if not args.skip_read:
            bench_read(spark, root, args, jvm_pid)
        if args.backfill_records:
            bench_backfill(spark, root, args.backfill_records, args.backfill_runs, jvm_pid)
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def decode_cost(data_dir: Path, records: int) -> None:
    """CPU per record of turning partition 0's segment files into Arrow batches in this one
    process (no Spark): the record path (``decode_records`` + ``arrow.py``, what the data
    source did before ``columns.py``) and the column path (files and broker reads alike)."""
    log = FileLog(str(data_dir), "bench")

    def records_path() -> int:
        return sum(b.num_rows for b in record_batches("bench", 0, read_records(log, 0, 0, records), include_headers=True))

    def columns_path() -> int:
        return sum(
            b.num_rows
            for b in column_batches("bench", 0, log.batches(0, 0, records), 0, records, include_headers=True)
        )

    costs = {}
    for name, read in (("record path", records_path), ("column path", columns_path)):
        best = float("inf")
        for _ in range(3):
            cpu = time.process_time()
            assert read() == records
            best = min(best, time.process_time() - cpu)
        costs[name] = best / records * 1e6
    print(
        "one process, partition 0 to Arrow (best of 3): "
        + ", ".join(f"{name} {us:.2f} us CPU/record" for name, us in costs.items())
        + f" ({costs['record path'] / costs['column path']:.1f}x)"
    )


def bench_read(spark: Any, root: Path, args: argparse.Namespace, jvm_pid: int) -> None:
    data_dir, parquet_dir = root / "data", root / "parquet"
    t = time.perf_counter()
    build(data_dir, parquet_dir, args.records, args.partitions, args.value_bytes)
    t = time.perf_counter() - t
    records = args.records // args.partitions * args.partitions
    log_mb = sum(f.stat().st_size for f in data_dir.rglob("*.log")) / 1e6
    pq_mb = sum(f.stat().st_size for f in parquet_dir.glob("*.parquet")) / 1e6
    print(f"setup: {records:,} records, log {log_mb:,.0f} MB, parquet {pq_mb:,.0f} MB ({t:.0f} s)")
    decode_cost(data_dir, args.records // args.partitions)
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
    for what, pick in (("rec/s", 0), ("rec/CPU-s", 1)):
        src = records / statistics.median(x[pick] for x in source_s)
        par = records / statistics.median(x[pick] for x in parquet_s)
        print(
            f"median of {args.runs}: streamkit {src:,.0f} {what}, parquet {par:,.0f} {what}: "
            f"{100 * src / par:.0f}% of the Parquet read"
        )
    shutil.rmtree(data_dir, ignore_errors=True)
    shutil.rmtree(parquet_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
