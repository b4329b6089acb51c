"""Tables: keyed counting into a RocksDB table with its changelog, four ways, and its recovery.

Counting. Every variant reads the same ``--records`` records from a pre-loaded 4-partition
input topic: keyed by a word (``--words`` distinct pseudo-words, 100,000 by default, each
record's word picked by a fixed stride so every word comes up equally often), the value the
word again, as ``apps/wordcount.py``'s ``words`` topic holds them. Each adds one to the word's
count in a table with ``default=int``:

1. ``embedded``: a streamkit ``Worker`` on the embedded log (``file://`` in a temp dir), agent
   ``async for word in stream: counts[word] += 1`` over a topic with ``key_type=str,
   value_type=str`` and ``app.Table("counts", default=int, key_type=str, value_type=int)``:
   a RocksDB store per partition under the worker's ``state_dir``, and at each commit (1 s)
   the changed keys sent to the compacted changelog ``<app>-counts-changelog`` and written to
   RocksDB with the changelog offset;
2. ``broker``: the same app on ``kafka://`` against a ``streamkit broker`` subprocess;
3. ``faust``: the same app in faust-streaming (``faust_table.py``, ``store="rocksdb://"``
   with its rocksdict driver: faust 0.15 has no ``rocksdict://`` URL) against the same broker,
   from the venv ``engine_bench.py`` builds (``requirements-faust.txt``);
4. ``raw``: no framework: an aiokafka consumer against the same broker, each record's key and
   value decoded (UTF-8, as the ``str`` serde does), then ``get`` + ``put`` of the count in a
   rocksdict ``Rdict`` (raw mode, streamkit's store options), offsets committed every second.
   No changelog, no cache: the per-record work a table cannot avoid;
5. ``kstreams``, ``kstreams-eos`` (not in the default ``--only``): the Kafka Streams 4.4 peer
   (``interop/kafka-streams``' ``WordCount --emit none``, ``kstreams_peer.py``):
   ``groupByKey().count()`` into a RocksDB store with its changelog, nothing downstream, one
   stream thread, commit every second, at-least-once or ``exactly_once_v2``; a JVM subprocess
   whose CPU-seconds are the whole process's (start-up included; the part until it was RUNNING
   is reported too). Checked from its changelog.

``--broker streamkit,kafka`` runs every variant that needs a broker against ``streamkit broker``
and then against a one-node Apache Kafka (``tests/support/kafka.py``), each loaded with the same
input; the Kafka runs are labelled ``variant@kafka``.

Loading is not timed. A run's clock starts when the worker (or the subprocess) is started and
stops when every record is processed and committed: for streamkit when the agents' commit
positions reach the end, ``settle()`` is true and a final ``commit()`` returned (so the
changelog and the stores hold every count); for faust when its group's committed offsets reach
the end (polled every 0.2 s; faust commits every second, as streamkit does); for the raw loop at
its last commit. Every run is checked afterwards: the table (streamkit), the store (raw) or
the changelog's latest values (faust, and streamkit on the broker) must hold exactly the
expected count of every word; a run that does not gets a note.

Recovery (``recover-embedded``, ``recover-broker``). A changelog of ``--keys`` distinct keys
(1,000,000 by default) is pre-loaded, untimed. Then, per repeat: the state dir is deleted and a
worker started (*replay*: every partition restores the whole changelog), stopped cleanly, and
started again on the state dir it left (*restart*: the stores' changelog offsets are at the
end, so ~nothing is replayed). Timed: from the worker's start until every partition of the
table is restored (``worker.state_manager.restores``, polled every 2 ms); group join included.
``restore`` is the sum of the partitions' own restore times (``RestoreProgress.seconds``).

    python benchmarks/table_bench.py                                   # 1M records, 1M keys, 3 runs
    python benchmarks/table_bench.py --records 200000 --keys 200000 --repeat 1 --faust-records 50000
    python benchmarks/table_bench.py --only embedded,broker --profile  # cProfile streamkit
    python benchmarks/table_bench.py --only broker,raw,kstreams,kstreams-eos --broker streamkit,kafka

Goals: streamkit through the broker >= 10x faust-streaming's events/s and >= 50% of
the raw loop's; a clean restart recovers >= 20x faster than a full replay; a full replay of
1M keys takes under 10 s.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import rocksdict
from aiokafka import AIOKafkaConsumer, TopicPartition
from engine_bench import (
    PARTITIONS,
    POLL_S,
    RUN_TIMEOUT_S,
    Children,
    CommittedOffsets,
    Medians,
    Progress,
    Run,
    create_topics,
    delete_topic,
    faust_python,
    load_broker,
    load_embedded,
    machine_note,
    poll_until_done,
    proc_cpu_s,
    profiled,
)
from kstreams_peer import (
    AnyBroker,
    close_broker,
    delete_app_topics,
    open_broker,
    parse_brokers,
    report_start,
    run_peer,
)

import streamkit as sk
from streamkit.runtime import Worker
from streamkit.tables import Table

HERE = Path(__file__).resolve().parent
FAUST_APP = HERE / "faust_table.py"
TABLE = "counts"
STRIDE = 7919  # a prime: coprime with any word count that is not a multiple of it
FAUST_POLL_S = 0.2
RESTORE_POLL_S = 0.002
RECOVERY_APP = "bench-recovery"
RECOVERY_IN = "recovery-in"
KSTREAMS = ("kstreams", "kstreams-eos")
COUNTING = ("embedded", "broker", "faust", "raw", *KSTREAMS)
RECOVERY = ("recover-embedded", "recover-broker")
VARIANTS = COUNTING + RECOVERY
BROKERLESS = ("embedded", "recover-embedded")


# -- the input ---------------------------------------------------------------------------------


class Words:
    """``size`` distinct pseudo-words (3-10 letters, fixed seed); record i's word is
    ``words[i * STRIDE % size]``, so each word comes up every ``size`` records."""

    def __init__(self, size: int) -> None:
        if size % STRIDE == 0:
            raise ValueError(f"--words must not be a multiple of {STRIDE}")
        rng = random.Random(2026)
        letters = "abcdefghijklmnopqrstuvwxyz"
        seen: set[bytes] = set()
        self.words: list[bytes] = []
        while len(self.words) < size:
            word = "".join(rng.choices(letters, k=rng.randint(3, 10))).encode()
            if word not in seen:
                seen.add(word)
                self.words.append(word)

    def of(self, i: int) -> bytes:
        return self.words[i * STRIDE % len(self.words)]

    def expected(self, n: int) -> dict[bytes, int]:
        """The count of each word in records 0..n-1."""
        return dict(collections.Counter(self.of(i) for i in range(n)))


def recovery_key(i: int) -> bytes:
    return b"key-%07d" % i


def recovery_value(i: int) -> bytes:
    return b"%d" % (i % 1000 + 1)  # what the table's int serde writes


def compare(found: dict[bytes, int], expected: dict[bytes, int], what: str) -> str:
    """'' when ``found`` is ``expected``, else a note saying how it differs."""
    if found == expected:
        return ""
    missing = len(expected.keys() - found.keys())
    extra = len(found.keys() - expected.keys())
    wrong = sum(1 for k, v in expected.items() if k in found and found[k] != v)
    return (f"{what}: {len(found)} keys for {len(expected)} expected ({missing} missing, {extra} extra, "
            f"{wrong} wrong counts; total {sum(found.values())} for {sum(expected.values())})")


# -- reading back --------------------------------------------------------------------------------


def json_key(raw: bytes) -> bytes:
    """A faust table's ``str`` key as the changelog holds it (JSON) -> its UTF-8 bytes."""
    key: str = json.loads(raw)
    return key.encode()


async def changelog_latest(
    bootstrap: str, topic: str, key_of: Callable[[bytes], bytes] = bytes, value_of: Callable[[bytes], int] = int
) -> dict[bytes, int]:
    """The latest value of each key of ``topic`` (by default ints as text, which is their JSON)."""
    # read_committed: an exactly-once app's aborted writes are not its output
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=4 * 1024 * 1024, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        latest: dict[bytes, int] = {}
        deadline = time.perf_counter() + RUN_TIMEOUT_S
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            fetched = await consumer.getmany(timeout_ms=500, max_records=50_000)
            for records in fetched.values():
                for r in records:
                    if r.key is None:
                        continue
                    key = key_of(r.key)
                    if r.value is None:
                        latest.pop(key, None)
                    else:
                        latest[key] = value_of(r.value)
            if time.perf_counter() > deadline:
                raise TimeoutError(f"could not read {topic} to its end")
        return latest
    finally:
        await consumer.stop()


# -- the counting variants -------------------------------------------------------------------------


def streamkit_app(app_id: str, url: str, in_topic: str) -> tuple[sk.App, Table]:
    app = sk.App(app_id, broker=url)
    words = app.topic(in_topic, key_type=str, value_type=str, partitions=PARTITIONS)
    counts = app.Table(TABLE, default=int, key_type=str, value_type=int)

    @app.agent(words)
    async def count(stream: sk.Stream) -> None:
        async for word in stream:
            counts[word] += 1

    return app, counts


def processed(worker: Worker) -> int:
    """Records processed so far: the agents' commit positions (the input starts at offset 0)."""
    total = 0
    for task in worker.tasks.values():
        for inbox in task.inboxes.values():
            position = inbox.commit_position()
            if position is not None:
                total += position
    return total


async def run_streamkit(
    variant: str, url: str, in_topic: str, n: int, tag: str, broker: AnyBroker | None, state_dir: Path,
    expected: dict[bytes, int],
) -> Run:
    run = Run(variant, n)
    app, counts = streamkit_app(f"bench-{tag}", url, in_topic)
    # The GC setting `streamkit worker` applies (cli/apps.py), as engine_bench does.
    gc_default = gc.get_threshold()
    gc.set_threshold(700, 10, 100)
    broker_cpu = broker.cpu_s() if broker else 0.0
    cpu = time.process_time()
    progress = Progress(n)
    worker = Worker(app, state_dir=str(state_dir))
    notes: list[str] = []
    try:
        await worker.start()

        async def count() -> int:
            return processed(worker)

        await poll_until_done(progress, count, broker.check_alive if broker else lambda: None)
        while not await worker.settle():
            await asyncio.sleep(POLL_S)
        committed = await worker.commit()
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = time.process_time() - cpu
        if broker is not None:
            run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
        positions = {**worker.committed, **committed}
        done = sum(positions.get(sk.TopicPartition(in_topic, p), 0) for p in range(PARTITIONS))
        if done != n:
            notes.append(f"committed {done} of {n} input offsets")
        table = {k.encode(): v for k, v in counts.items()}
        notes.append(compare(table, expected, "table"))
    finally:
        await worker.stop()
        gc.set_threshold(*gc_default)
    if broker is not None:
        changelog = await changelog_latest(broker.bootstrap, counts.changelog_topic.name)
        notes.append(compare(changelog, expected, "changelog"))
        await delete_topic(broker.bootstrap, counts.changelog_topic.name)
    run.note = "; ".join(note for note in notes if note)
    return run


async def run_raw(broker: AnyBroker, in_topic: str, n: int, tag: str, db_dir: Path, expected: dict[bytes, int]) -> Run:
    """The ceiling: aiokafka consumer, decode, rocksdict get + put per record."""
    run = Run("raw", n)
    broker_cpu = broker.cpu_s()
    cpu = time.process_time()
    progress = Progress(n)
    db = rocksdict.Rdict(str(db_dir), rocksdict.Options(raw_mode=True))
    consumer = AIOKafkaConsumer(
        in_topic, bootstrap_servers=broker.bootstrap, group_id=f"bench-{tag}", enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    await consumer.start()
    try:
        get, put = db.get, db.put
        positions: dict[TopicPartition, int] = {}
        done = 0
        last_commit = time.perf_counter()
        deadline = last_commit + RUN_TIMEOUT_S
        while done < n:
            fetched = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for tp, records in fetched.items():
                for r in records:
                    key = r.key
                    key.decode()  # what the str serde does to the key and the value
                    r.value.decode()
                    old = get(key)
                    put(key, b"%d" % ((int(old) if old is not None else 0) + 1))
                positions[tp] = records[-1].offset + 1
                done += len(records)
            progress.observe(done, time.perf_counter())
            if time.perf_counter() - last_commit >= 1.0:
                await consumer.commit(positions)
                last_commit = time.perf_counter()
            if broker.check_alive() or time.perf_counter() > deadline:
                raise RuntimeError(broker.check_alive() or f"only {done} of {n} records after {RUN_TIMEOUT_S:.0f} s")
        await consumer.commit(positions)
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = time.process_time() - cpu
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
        found = {bytes(k): int(v) for k, v in db.items()}
        run.note = compare(found, expected, "store")
    finally:
        await consumer.stop()
        db.close()
        shutil.rmtree(db_dir, ignore_errors=True)
    return run


async def run_faust(
    children: Children, broker: AnyBroker, python: Path, in_topic: str, n: int, tag: str, work_dir: Path,
    expected: dict[bytes, int],
) -> Run:
    run = Run("faust", n)
    app_id = f"bench-{tag}"
    log_path = work_dir / f"faust-{tag}.log"
    env = {
        **os.environ,
        "BENCH_BROKER": broker.url, "BENCH_APP_ID": app_id, "BENCH_IN": in_topic,
        "BENCH_DATADIR": str(work_dir / f"faust-{tag}"), "BENCH_PARTITIONS": str(PARTITIONS),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PYTHONPATH", None)
    broker_cpu = broker.cpu_s()
    progress = Progress(n)
    with open(log_path, "w") as log:
        proc = children.start(
            [str(python), str(FAUST_APP), "worker", "--without-web", "-l", "info"],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work_dir),
        )

    def failed() -> str | None:
        if proc.poll() is not None:
            return f"the faust worker exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}"
        return broker.check_alive()

    notes: list[str] = []
    try:
        async with CommittedOffsets(broker.bootstrap, app_id, in_topic) as committed:
            await poll_until_done(progress, committed.count, failed, FAUST_POLL_S)
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = proc_cpu_s(proc.pid)
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
    finally:
        Children.stop(proc, timeout=30.0)
    if not list((work_dir / f"faust-{tag}").rglob("CURRENT")):
        notes.append("no RocksDB store in faust's data dir")
    changelog_topic = f"{app_id}-{TABLE}-changelog"
    latest = await changelog_latest(broker.bootstrap, changelog_topic, json_key)
    notes.append(compare(latest, expected, "changelog"))
    errors = [line for line in log_path.read_text().splitlines()
              if any(word in line for word in ("WARN", "ERROR", "CRIT", "Traceback"))]
    if errors:
        notes.append(f"{len(errors)} warning/error lines from faust, first: {errors[0][:300]}")
    run.note = "; ".join(note for note in notes if note)
    for topic in (changelog_topic, f"{app_id}-__assignor-__leader"):
        await delete_topic(broker.bootstrap, topic)
    return run


async def run_kstreams(
    variant: str, children: Children, broker: AnyBroker, in_topic: str, n: int, tag: str, work_dir: Path,
    expected: dict[bytes, int],
) -> Run:
    """The Kafka Streams peer ``WordCount --emit none``: ``groupByKey().count()`` into a RocksDB
    store and its changelog, nothing downstream (as the streamkit agent). The changelog's latest
    count of each word (an 8-byte big-endian long) must be the expected one."""
    out_topic = f"out-{tag}"  # the peer requires one; --emit none writes nothing to it
    await create_topics(broker.bootstrap, [out_topic])
    args = {"output": out_topic, "emit": "none"}
    run = await run_peer(variant, "WordCount", children, broker, args, [in_topic], n, work_dir, tag)
    changelog = f"bench-{tag}-word-counts-changelog"
    latest = await changelog_latest(broker.bootstrap, changelog, value_of=lambda raw: int.from_bytes(raw, "big"))
    run.note = "; ".join(x for x in (run.note, compare(latest, expected, "changelog")) if x)
    await delete_topic(broker.bootstrap, out_topic)
    await delete_app_topics(broker.bootstrap, f"bench-{tag}")
    shutil.rmtree(work_dir / "state" / tag, ignore_errors=True)
    return run


# -- recovery ------------------------------------------------------------------------------------


@dataclass
class Recovery:
    variant: str
    case: str  # "replay" (state dir deleted) or "restart" (state dir kept)
    keys: int
    seconds: float = 0.0  # worker start -> every partition restored
    restore_s: float = 0.0  # the partitions' own restore times, summed
    replayed: int = 0  # changelog records applied
    cpu_s: float = 0.0
    note: str = ""

    def line(self) -> str:
        extra = f"  [{self.note}]" if self.note else ""
        return (f"  {self.variant:<16} {self.case:<7} {self.seconds:7.3f} s start -> restored  "
                f"(restore {self.restore_s:6.3f} s, {self.replayed:>9,} records replayed, "
                f"{per_second(self.replayed, self.seconds)} records/s)  CPU {self.cpu_s:6.1f} s{extra}")


def per_second(count: float, seconds: float) -> str:
    return f"{count / seconds:>10,.0f}" if count and seconds > 0 else f"{'-':>10}"


async def run_recovery(
    variant: str, url: str, m: int, case: str, state_dir: Path, broker: AnyBroker | None, check: bool
) -> Recovery:
    result = Recovery(variant, case, m)
    app, counts = streamkit_app(RECOVERY_APP, url, RECOVERY_IN)
    if case == "replay":
        shutil.rmtree(state_dir, ignore_errors=True)
    gc.collect()
    cpu = time.process_time()
    started = time.perf_counter()
    worker = Worker(app, state_dir=str(state_dir))
    notes: list[str] = []
    try:
        await worker.start()
        restores = worker.state_manager.restores
        while len(restores) < PARTITIONS or not all(r.done for r in restores.values()):
            reason = broker.check_alive() if broker else None
            if reason:
                raise RuntimeError(reason)
            if time.perf_counter() - started > RUN_TIMEOUT_S:
                raise TimeoutError(f"{variant}: not restored after {RUN_TIMEOUT_S:.0f} s")
            await asyncio.sleep(RESTORE_POLL_S)
        result.seconds = time.perf_counter() - started
        result.cpu_s = time.process_time() - cpu
        result.restore_s = sum(r.seconds for r in restores.values())
        result.replayed = sum(r.records for r in restores.values())
        wiped = {r.wiped for r in restores.values() if r.wiped}
        if wiped:
            notes.append(f"wiped: {sorted(wiped)}")
        if case == "replay" and result.replayed != m:
            notes.append(f"replayed {result.replayed} records of {m}")
        if check:  # not timed; the first run of each case only (it reads every key)
            total = keys = 0
            for _key, value in counts.items():
                total += value
                keys += 1
            want = sum(int(recovery_value(i)) for i in range(m))
            if (keys, total) != (m, want):
                notes.append(f"restored {keys} keys summing to {total}; expected {m} keys summing to {want}")
    finally:
        await worker.stop()
    result.note = "; ".join(notes)
    return result


async def load_recovery_broker(bootstrap: str, m: int) -> None:
    _app, counts = streamkit_app(RECOVERY_APP, "kafka://unused", RECOVERY_IN)
    await create_topics(bootstrap, [RECOVERY_IN])
    await load_broker(bootstrap, counts.changelog_topic.name, m, recovery_key, recovery_value,
                      counts.changelog_topic.config)


def load_recovery_embedded(data_dir: Path, m: int) -> None:
    _app, counts = streamkit_app(RECOVERY_APP, "file://unused", RECOVERY_IN)
    load_embedded(data_dir, RECOVERY_IN, 0)
    load_embedded(data_dir, counts.changelog_topic.name, m, recovery_key, recovery_value,
                  counts.changelog_topic.config)


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records counted per run")
    parser.add_argument("--words", type=int, default=100_000, help="distinct words (keys) among them")
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys of the table the recovery runs restore")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant (the median is reported)")
    parser.add_argument("--faust-records", type=int, default=None,
                        help="records for the faust runs (default: --records; it is a rate, and faust is slow)")
    parser.add_argument("--faust-repeat", type=int, default=1, help="runs of faust (default 1)")
    parser.add_argument("--only", default=",".join(v for v in VARIANTS if v not in KSTREAMS),
                        help=f"comma-separated subset of {','.join(VARIANTS)} (default: all but the Kafka Streams peers)")
    parser.add_argument("--broker", default="streamkit",
                        help="the broker(s) the apps run against, in turn: streamkit, kafka (Apache Kafka) or both")
    parser.add_argument("--faust-python", default=None, help="a python with faust-streaming (skips the venv)")
    parser.add_argument("--profile", action="store_true", help="cProfile the streamkit runs (slows them)")
    parser.add_argument("--profile-dir", type=Path, default=HERE / ".data" / "profiles")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp dir goes (default: system temp)")
    args = parser.parse_args()
    only = [v.strip() for v in args.only.split(",") if v.strip()]
    unknown = set(only) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}: use {','.join(VARIANTS)}")
    try:
        kinds = parse_brokers(args.broker)
    except ValueError as exc:
        parser.error(str(exc))
    for name in ("records", "words", "keys", "repeat", "faust_repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.words % STRIDE == 0:
        parser.error(f"--words must not be a multiple of {STRIDE}")
    n, m = args.records, args.keys
    faust_n = args.faust_records or n
    python = faust_python(args.faust_python) if "faust" in only else None

    words = Words(args.words)
    expected = words.expected(n) if set(only) & set(COUNTING) else {}
    faust_expected = expected if faust_n == n else words.expected(faust_n)
    children = Children()
    base = Path(tempfile.mkdtemp(prefix="table-bench-", dir=args.dir))
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    counting: dict[str, list[Run]] = {}
    recovery: dict[tuple[str, str], list[Recovery]] = {}
    try:
        print(f"{n:,} records over {args.words:,} words, {PARTITIONS} partitions; recovery of {m:,} keys; "
              f"{machine_note()}; in {base}")
        # faust reads the broker's input when it counts as many records, else a topic of its own.
        faust_in = "words" if faust_n == n and set(only) & {"broker", "raw", *KSTREAMS} else "words-faust"
        embedded_dir = base / "embedded"
        if "embedded" in only:
            started = time.perf_counter()
            load_embedded(embedded_dir, "words", n, words.of, words.of)
            print(f"  loaded the embedded input in {time.perf_counter() - started:.1f} s")
        recovery_dir = base / "recovery-embedded"
        if "recover-embedded" in only:
            started = time.perf_counter()
            load_recovery_embedded(recovery_dir, m)
            print(f"  loaded the embedded changelog of {m:,} keys in {time.perf_counter() - started:.1f} s")
        on_broker = [v for v in only if v not in BROKERLESS]
        for pass_number, kind in enumerate(kinds):
            variants = [v for v in only if v in on_broker or pass_number == 0]
            broker: AnyBroker | None = None
            if on_broker:
                started = time.perf_counter()
                broker = open_broker(kind, children, base / f"broker-{kind}")
                print(f"  {kind} broker on {broker.bootstrap}, up in {time.perf_counter() - started:.1f} s", flush=True)
                started = time.perf_counter()
                if set(only) & {"broker", "raw", *KSTREAMS}:
                    asyncio.run(load_broker(broker.bootstrap, "words", n, words.of, words.of))
                if "faust" in only and faust_in != "words":
                    asyncio.run(load_broker(broker.bootstrap, faust_in, faust_n, words.of, words.of))
                if "recover-broker" in only:
                    asyncio.run(load_recovery_broker(broker.bootstrap, m))
                print(f"  loaded its input in {time.perf_counter() - started:.1f} s", flush=True)
            for i in range(max(args.repeat, args.faust_repeat if "faust" in only else 0)):
                for variant in variants:
                    if (variant == "faust" and i >= args.faust_repeat) or (variant != "faust" and i >= args.repeat):
                        continue
                    label = variant if variant in BROKERLESS or kind == "streamkit" else f"{variant}@{kind}"
                    tag = f"{variant}-{kind}-{i}"
                    gc.collect()
                    if variant == "embedded":
                        with profiled(args.profile, tag, args.profile_dir, 30, "table"):
                            run = asyncio.run(run_streamkit(variant, f"file://{embedded_dir}", "words", n, tag, None,
                                                            base / "state" / tag, expected))
                    elif variant == "broker":
                        assert broker is not None
                        with profiled(args.profile, tag, args.profile_dir, 30, "table"):
                            run = asyncio.run(run_streamkit(variant, broker.url, "words", n, tag, broker,
                                                            base / "state" / tag, expected))
                    elif variant == "faust":
                        assert broker is not None and python is not None
                        run = asyncio.run(run_faust(children, broker, python, faust_in, faust_n, tag, base,
                                                    faust_expected))
                    elif variant == "raw":
                        assert broker is not None
                        run = asyncio.run(run_raw(broker, "words", n, tag, base / f"raw-{tag}", expected))
                    elif variant in KSTREAMS:
                        assert broker is not None
                        run = asyncio.run(run_kstreams(variant, children, broker, "words", n, tag, base, expected))
                    else:
                        url = f"file://{recovery_dir}" if variant == "recover-embedded" else (broker.url if broker else "")
                        state_dir = base / "state" / f"{variant}-{kind}"
                        for case in ("replay", "restart"):
                            with profiled(args.profile, f"{tag}-{case}", args.profile_dir, 30, "table"):
                                result = asyncio.run(run_recovery(
                                    variant, url, m, case, state_dir,
                                    broker if variant == "recover-broker" else None, check=i == 0,
                                ))
                            result.variant = label
                            recovery.setdefault((label, case), []).append(result)
                            print(result.line(), flush=True)
                        continue
                    shutil.rmtree(base / "state" / tag, ignore_errors=True)
                    run.variant = label
                    counting.setdefault(label, []).append(run)
                    print(run.line(), flush=True)
            if broker is not None:
                close_broker(broker, children)
    finally:
        signal.signal(signal.SIGTERM, previous)
        children.stop_all()
        shutil.rmtree(base, ignore_errors=True)
    report(counting, recovery, n, faust_n, m)


def report(
    counting: dict[str, list[Run]], recovery: dict[tuple[str, str], list[Recovery]], n: int, faust_n: int, m: int
) -> None:
    medians = {v: Medians.of(runs) for v, runs in counting.items() if runs}
    if medians:
        print(f"\nmedians ({n:,} records; faust {faust_n:,}); ev/CPU-s = records per CPU second of the"
              " counting process:")
        print("  (a variant@kafka ran against Apache Kafka, the others against streamkit broker or embedded)")
        print(f"  {'variant':<18} {'end-to-end ev/s':>16} {'steady ev/s':>12} {'ev/CPU-s':>10}   runs (end-to-end ev/s)")
        for variant, med in medians.items():
            each = ", ".join(f"{r.total_rate:,.0f}" for r in counting[variant])
            steady = f"{med.steady:>12,.0f}" if med.steady else f"{'-':>12}"
            print(f"  {variant:<18} {med.total:>16,.0f} {steady} {med.per_cpu:>10,.0f}   {each}")
        print(f"\n  {'ratio':<36} {'end-to-end':>10} {'steady':>10} {'per CPU-s':>10}")

        def ratio(num: str, den: str, goal: float | None = None, as_x: bool = False) -> None:
            if num not in medians or den not in medians:
                return
            a, b = medians[num], medians[den]
            cells = []
            for x, y in ((a.total, b.total), (a.steady, b.steady), (a.per_cpu, b.per_cpu)):
                cells.append("-" if not (x and y) else (f"{x / y:.1f}x" if as_x else f"{x / y:.1%}"))
            verdict = ""
            if goal is not None and b.total:
                text = f"{goal:.0f}x" if as_x else f"{goal:.0%}"
                verdict = f"  goal >= {text} (end-to-end): {'met' if a.total / b.total >= goal else 'MISSED'}"
            name = num if num.startswith("kstreams") else f"streamkit-{num}"
            print(f"  {f'{name} / {den}':<36} {cells[0]:>10} {cells[1]:>10} {cells[2]:>10}{verdict}")

        for on in ("", "@kafka"):
            ratio(f"broker{on}", f"faust{on}", 10.0, as_x=True)
            if not on:
                ratio("embedded", "faust", as_x=True)
            ratio(f"broker{on}", f"raw{on}", 0.5)
            if not on:
                ratio("embedded", "raw")
            for peer in KSTREAMS:
                ratio(f"broker{on}", f"{peer}{on}", as_x=True)
                ratio(f"{peer}{on}", f"raw{on}")
        for variant in ("broker", "raw", *KSTREAMS):  # the same app on Apache Kafka / on streamkit broker
            ratio(f"{variant}@kafka", variant)
    report_start(counting)
    if recovery:
        print(f"\nrecovery of {m:,} keys (medians; start -> restored, group join included):")
        for (variant, case), results in recovery.items():
            seconds = statistics.median(r.seconds for r in results)
            restore = statistics.median(r.restore_s for r in results)
            replayed = statistics.median(r.replayed for r in results)
            each = ", ".join(f"{r.seconds:.3f}" for r in results)
            print(f"  {variant:<16} {case:<7} {seconds:8.3f} s  (restore {restore:.3f} s; {replayed:>9,.0f} "
                  f"records replayed, {per_second(replayed, seconds)} records/s)   runs: {each} s")
        for variant in RECOVERY:
            replay, restart = recovery.get((variant, "replay")), recovery.get((variant, "restart"))
            if not (replay and restart):
                continue
            replay_s = statistics.median(r.seconds for r in replay)
            restart_s = statistics.median(r.seconds for r in restart)
            speedup = replay_s / restart_s if restart_s else 0.0
            print(f"  {variant}: restart {speedup:.1f}x faster than the full replay  "
                  f"goal >= 20x: {'met' if speedup >= 20 else 'MISSED'}")
            if m == 1_000_000:
                print(f"  {variant}: full replay of 1M keys {replay_s:.2f} s  "
                      f"goal < 10 s: {'met' if replay_s < 10 else 'MISSED'}")
            else:  # start-up costs do not scale: no verdict
                print(f"  {variant}: full replay of {m:,} keys {replay_s:.2f} s  goal (1M keys < 10 s): "
                      "judged with --keys 1000000 only")
    notes = [(r.variant, r.note) for runs in counting.values() for r in runs if r.note]
    notes += [(f"{r.variant} {r.case}", r.note) for runs in recovery.values() for r in runs if r.note]
    if notes:
        print("\nruns with notes:")
        for what, note in notes:
            print(f"  {what}: {note}")


if __name__ == "__main__":
    main()
