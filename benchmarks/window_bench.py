"""Windows: a tumbling count and a windowed stream-stream join, beside faust-streaming, Quix
Streams and a raw loop, all on one ``streamkit broker``.

The input (pre-loaded, not timed), on 4-partition topics, keyed by user (``--keys`` users,
``user-NNNN``, record i's user ``i mod keys``), values short strings, event times advancing:

* count: ``--events`` page views (1,000,000 by default), view i at ``T0 + i * --step-ms``
  (1 ms); each is counted per user per tumbling window of ``--window-s`` (10 s);
* join: two streams of ``--join-events`` records each (500,000), left i at ``T0 + 2i`` ms and
  right i at ``T0 + 2i + 1`` ms, same user; pairs of one user whose times differ by at most
  ``--within-s`` (1 s) are joined (inner). With the defaults each left record meets exactly
  one right record: 500,000 results.

The variants (each a fresh consumer group, output topic and state dir):

1. ``count-streamkit``: ``app.stream(views).group_by_key().window(Tumbling(size)).count(...)``
   with ``.to_stream(emit="close").to(out)``: each window once, when stream time closes it;
   a streamkit ``Worker`` on ``kafka://`` (RocksDB, changelog);
2. ``count-faust``: faust-streaming 0.15.3 (``faust_window.py``, its venv from
   ``requirements-faust.txt``): ``Table(...).tumbling(size, expires=size)``, ``+= 1`` per view
   (RocksDB through rocksdict); faust has no emit-on-close, so it only counts;
3. ``count-quix``: Quix Streams (``quix_window.py``, in ``benchmarks/.data/venv-quix`` from
   ``requirements-quix.txt``: its confluent-kafka pin is not streamkit's):
   ``tumbling_window(size).count().final()`` to an output topic;
4. ``count-raw``: no framework: an aiokafka consumer; per record decode key and value, the
   window's start, a rocksdict ``get`` + ``put`` of its count (raw mode), stream time per
   partition; a window closed by it is read, produced as JSON to the output topic and deleted;
   flush + commit every second;
5. ``join-streamkit``: ``app.stream(left).join(app.stream(right), lambda l, r: f"{l}|{r}",
   within=..., grace=...).to(out)``;
6. ``join-quix``: ``join_interval(right, how="inner", backward_ms=within, forward_ms=within)``;
7. ``join-raw``: an aiokafka consumer on both topics; each record is put into a rocksdict
   under ``side | user | time | offset``, the other side's records of the user within
   ``within`` are read with a range iterator and each pair is produced; records older than
   stream time - within - grace are deleted; flush + commit every second.

8. ``count-kstreams``, ``count-kstreams-eos``, ``join-kstreams``, ``join-kstreams-eos`` (not in
   the default ``--only``): the Kafka Streams 4.4 peers (``interop/kafka-streams``,
   ``kstreams_peer.py``), one stream thread, commit every second, at-least-once or
   ``exactly_once_v2``: ``WindowedCount --emit close`` (``windowedBy(TimeWindows
   .ofSizeWithNoGrace(size)).count()`` then ``suppress(untilWindowCloses)``: each window once, as
   streamkit's ``emit="close"``; key ``user@start``) and ``WindowedJoin``
   (``JoinWindows.ofTimeDifferenceAndGrace(within, grace)``, inner). Their CPU-seconds are the
   whole JVM's, start-up included (the part until it was RUNNING is reported too).

``--broker streamkit,kafka`` runs the variants against ``streamkit broker`` and then against a
one-node Apache Kafka (``tests/support/kafka.py``), each loaded with the same input; the Kafka
runs are labelled ``variant@kafka``.

The join's grace (``--join-grace-s``, by default the whole input's span) keeps every record
joinable however far one input is read ahead of the other: every variant then owes exactly the
pairs the input holds, so the results can be compared exactly.

A run's clock starts when the worker (or subprocess) is started and stops when every input
record is processed and committed: streamkit's commit positions reach the end and a final
commit returned; faust's and Quix's group offsets reach the end (polled every 0.2 s; both
commit every second); the raw loop's last commit. Every run is then checked, untimed, against
the input: the windows emitted on close (streamkit, raw: exactly the windows partition stream
time closed; Quix closes a window only when its own key comes again, so it must emit a subset
of those, each with the right count), faust's changelog (its latest count of each window), the
join's pairs (exactly the expected ones). A run that fails a check gets a note.

    python benchmarks/window_bench.py                        # full size, 3 runs, faust once on 200k
    python benchmarks/window_bench.py --events 100000 --join-events 50000 --repeat 1 --faust-events 20000
    python benchmarks/window_bench.py --only count-streamkit --profile      # cProfile streamkit
    python benchmarks/window_bench.py --broker streamkit,kafka --only \
        count-streamkit,count-raw,count-kstreams,count-kstreams-eos,join-streamkit,join-raw,join-kstreams,join-kstreams-eos

Goals (issue 10): streamkit >= 10x faust-streaming, ahead of Quix Streams, >= 50% of the raw
loop (end-to-end events/s, medians).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rocksdict
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
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
from table_bench import processed

import streamkit as sk
from streamkit._core.partitioner import partition_for_key
from streamkit.runtime import Worker
from streamkit.windows import Tumbling

HERE = Path(__file__).resolve().parent
FAUST_APP = HERE / "faust_window.py"
QUIX_APP = HERE / "quix_window.py"
QUIX_VENV = HERE / ".data" / "venv-quix"
QUIX_REQUIREMENTS = HERE / "requirements-quix.txt"
T0 = 1_700_000_000_000  # a round minute, so windows are aligned the same way everywhere
LOAD_BATCH = 2000
# The input's event times are in 2023: a broker's default 7-day retention by time would delete
# the inputs, and the outputs that carry their times (windows, joined pairs), under a run or
# before its check (streamkit broker did, to an exactly-once peer's output).
KEEP = {"retention.ms": "-1"}
SUB_POLL_S = 0.2
COUNT = ("count-streamkit", "count-faust", "count-quix", "count-raw", "count-kstreams", "count-kstreams-eos")
JOIN = ("join-streamkit", "join-quix", "join-raw", "join-kstreams", "join-kstreams-eos")
VARIANTS = COUNT + JOIN
KSTREAMS = ("count-kstreams", "count-kstreams-eos", "join-kstreams", "join-kstreams-eos")

Window = tuple[bytes, int]  # user, window start (ms)
Pair = tuple[bytes, bytes]  # user, "left|right"


# -- the input ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    keys: int
    step_ms: int

    def key(self, i: int) -> bytes:
        return b"user-%04d" % (i % self.keys)

    def view(self, i: int) -> tuple[bytes, bytes, int]:
        return self.key(i), b"v%d" % i, T0 + i * self.step_ms

    def left(self, i: int) -> tuple[bytes, bytes, int]:
        return self.key(i), b"l%d" % i, T0 + 2 * i

    def right(self, i: int) -> tuple[bytes, bytes, int]:
        return self.key(i), b"r%d" % i, T0 + 2 * i + 1


def placed(n: int, record: Any) -> Iterator[tuple[int, list[tuple[bytes, bytes, int]]]]:
    """Records 0..n-1 placed by key as producers place them, in batches per partition."""
    pending: list[list[tuple[bytes, bytes, int]]] = [[] for _ in range(PARTITIONS)]
    for i in range(n):
        r = record(i)
        p = partition_for_key(r[0], PARTITIONS)
        pending[p].append(r)
        if len(pending[p]) >= LOAD_BATCH:
            yield p, pending[p]
            pending[p] = []
    for p, records in enumerate(pending):
        if records:
            yield p, records


async def load(bootstrap: str, topic: str, n: int, record: Any) -> None:
    await create_topics(bootstrap, [topic], KEEP)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=1024 * 1024)
    await producer.start()
    try:
        futures = []
        for p, records in placed(n, record):
            batch = producer.create_batch()
            for key, value, ts in records:
                if batch.append(key=key, value=value, timestamp=ts) is None:
                    futures.append(await producer.send_batch(batch, topic, partition=p))
                    batch = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=ts)
            futures.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def expected_windows(data: Input, n: int, size_ms: int) -> tuple[dict[Window, int], dict[Window, int]]:
    """Every window's count, and those closed by their partition's stream time (grace 0)."""
    counts: dict[Window, int] = collections.Counter()
    stream_time = [-1] * PARTITIONS
    for i in range(n):
        key, _value, ts = data.view(i)
        counts[(key, ts - ts % size_ms)] += 1
        p = partition_for_key(key, PARTITIONS)
        stream_time[p] = max(stream_time[p], ts)
    closed = {w: c for w, c in counts.items() if w[1] + size_ms <= stream_time[partition_for_key(w[0], PARTITIONS)]}
    return dict(counts), closed


def expected_pairs(data: Input, n: int, within_ms: int) -> collections.Counter[Pair]:
    by_key: dict[bytes, list[tuple[int, bytes]]] = collections.defaultdict(list)
    for i in range(n):
        key, value, ts = data.right(i)
        by_key[key].append((ts, value))
    pairs: collections.Counter[Pair] = collections.Counter()
    for i in range(n):
        key, value, ts = data.left(i)
        for rts, rvalue in by_key[key]:
            if abs(rts - ts) <= within_ms:
                pairs[(key, value + b"|" + rvalue)] += 1
    return pairs


# -- reading back --------------------------------------------------------------------------------


async def read_topic(bootstrap: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """Every ``(key, value)`` of ``topic``."""
    # read_committed: an exactly-once app's aborted writes are not its output
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=4 * 1024 * 1024, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]  # every topic here has 4
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[bytes, bytes | None]] = []
        deadline = time.perf_counter() + RUN_TIMEOUT_S
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            fetched = await consumer.getmany(timeout_ms=500, max_records=50_000)
            for records in fetched.values():
                out.extend((r.key or b"", r.value) for r in records)
            if time.perf_counter() > deadline:
                raise TimeoutError(f"could not read {topic} to its end")
        return out
    finally:
        await consumer.stop()


def windows_of(records: list[tuple[bytes, bytes | None]], start: str, end: str, size_ms: int) -> tuple[dict[Window, int], int]:
    """Emitted windows ``{(key, start): count}`` from JSON values, and how many were duplicates."""
    out: dict[Window, int] = {}
    duplicates = 0
    for key, value in records:
        if value is None:
            continue
        doc = json.loads(value)
        if doc[end] - doc[start] != size_ms:
            raise ValueError(f"a window of {doc[end] - doc[start]} ms: {doc}")
        window = (key, doc[start])
        duplicates += window in out
        out[window] = doc["value"]
    return out, duplicates


def peer_windows(records: list[tuple[bytes, bytes | None]]) -> tuple[dict[Window, int], int]:
    """The Kafka Streams peer's windows: key ``user@start``, value the count as text."""
    out: dict[Window, int] = {}
    duplicates = 0
    for key, value in records:
        if value is None:
            continue
        user, _, start = key.rpartition(b"@")
        window = (user, int(start))
        duplicates += window in out
        out[window] = int(value)
    return out, duplicates


def compare_windows(found: dict[Window, int], expected: dict[Window, int], what: str, subset: bool = False) -> str:
    wrong = [(w, c, expected.get(w)) for w, c in found.items() if expected.get(w) != c]
    missing = 0 if subset else len(expected.keys() - found.keys())
    if not wrong and not missing:
        return ""
    example = f"; e.g. {wrong[0][0]!r}: {wrong[0][1]} for {wrong[0][2]}" if wrong else ""
    return (f"{what}: {len(found)} windows for {len(expected)} expected ({missing} missing, "
            f"{len(wrong)} unexpected or wrong{example})")


def compare_pairs(found: collections.Counter[Pair], expected: collections.Counter[Pair]) -> str:
    if found == expected:
        return ""
    missing, unexpected = expected - found, found - expected
    example = f"; e.g. missing {next(iter(missing))!r}" if missing else ""
    example += f", unexpected {next(iter(unexpected))!r}" if unexpected else ""
    return (f"join: {sum(found.values())} results for {sum(expected.values())} expected "
            f"({len(missing)} missing, {len(unexpected)} unexpected or repeated{example})")


# -- streamkit ---------------------------------------------------------------------------------


def count_app(app_id: str, url: str, in_topic: str, out_topic: str, size_s: float) -> sk.App:
    app = sk.App(app_id, broker=url)
    views = app.topic(in_topic, key_type=str, value_type=str, partitions=PARTITIONS)
    out = app.topic(out_topic, key_type=str, value_type=dict, partitions=PARTITIONS)
    per_window = app.stream(views).group_by_key().window(Tumbling(size_s)).count("views_per_window")
    per_window.to_stream(emit="close").to(out)
    return app


def join_app(app_id: str, url: str, left: str, right: str, out_topic: str, within_s: float, grace_s: float,
             rekey: bool = False, drift_ms: int | None = 0) -> sk.App:
    """The join; with ``rekey`` both sides go through a ``map`` (keeping the key), so each is
    written to a repartition topic by aligned tasks and the join task merges the two in their
    order (``runtime/merge.py``); ``drift_ms`` is ``max_task_drift_ms`` (None: alignment off)."""
    app = sk.App(app_id, broker=url, max_task_drift_ms=drift_ms)
    lefts = app.topic(left, key_type=str, value_type=str, partitions=PARTITIONS)
    rights = app.topic(right, key_type=str, value_type=str, partitions=PARTITIONS)
    out = app.topic(out_topic, key_type=str, value_type=str, partitions=PARTITIONS)
    left_stream, right_stream = app.stream(lefts), app.stream(rights)
    if rekey:
        left_stream, right_stream = left_stream.map(lambda k, v: (k, v)), right_stream.map(lambda k, v: (k, v))
    joined = left_stream.join(
        right_stream, lambda lv, rv: f"{lv}|{rv}", within=within_s, grace=grace_s, how="inner",
    )
    joined.to(out)
    return app


async def run_streamkit(variant: str, app: sk.App, inputs: list[str], n: int, broker: AnyBroker, state_dir: Path) -> Run:
    run = Run(variant, n)
    gc_default = gc.get_threshold()
    gc.set_threshold(700, 10, 100)  # what `streamkit worker` sets (cli/apps.py)
    broker_cpu = broker.cpu_s()
    cpu = time.process_time()
    progress = Progress(n)
    worker = Worker(app, state_dir=str(state_dir))
    try:
        await worker.start()

        async def count() -> int:
            return processed(worker)

        await poll_until_done(progress, count, broker.check_alive)
        while not await worker.settle():
            await asyncio.sleep(POLL_S)
        committed = await worker.commit()
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = time.process_time() - cpu
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
        positions = {**worker.committed, **committed}
        done = sum(positions.get(sk.TopicPartition(t, p), 0) for t in inputs for p in range(PARTITIONS))
        if done != n:
            run.note = f"committed {done} of {n} input offsets"
    finally:
        await worker.stop()
        gc.set_threshold(*gc_default)
    return run


# -- faust and Quix (subprocesses in their own venvs) -------------------------------------------


def quix_python(explicit: str | None) -> Path:
    """The Quix venv's python, creating or updating the venv from the pinned requirements."""
    if explicit:
        return Path(explicit)
    python = QUIX_VENV / "bin" / "python"
    digest = hashlib.sha256(QUIX_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = QUIX_VENV / "requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    print(f"installing quixstreams into {QUIX_VENV} (first run) ...", flush=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--clear", str(QUIX_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(QUIX_REQUIREMENTS)],
        check=True,
    )
    stamp.write_text(digest + "\n")
    return python


async def run_subprocess(
    variant: str, children: Children, broker: AnyBroker, cmd: list[str], env: dict[str, str], group: str,
    inputs: list[str], n: int, work_dir: Path, tag: str,
) -> Run:
    run = Run(variant, n)
    log_path = work_dir / f"{tag}.log"
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    full_env.pop("PYTHONPATH", None)
    broker_cpu = broker.cpu_s()
    progress = Progress(n)
    with open(log_path, "w") as log:
        proc = children.start(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=str(work_dir))

    def failed() -> str | None:
        if proc.poll() is not None:
            return f"{variant} exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}"
        return broker.check_alive()

    try:
        async with CommittedOffsets(broker.bootstrap, group, *inputs) as committed:
            await poll_until_done(progress, committed.count, failed, SUB_POLL_S)
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = proc_cpu_s(proc.pid)
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
    finally:
        Children.stop(proc, timeout=30.0)
    errors = [line for line in log_path.read_text().splitlines()
              if any(word in line for word in ("WARN", "ERROR", "CRIT", "Traceback"))]
    if errors:
        run.note = f"{len(errors)} warning/error lines, first: {errors[0][:300]}"
    return run


# -- the raw loops -----------------------------------------------------------------------------


async def run_raw_count(broker: AnyBroker, in_topic: str, out_topic: str, n: int, tag: str, size_ms: int,
                        db_dir: Path) -> Run:
    """aiokafka + rocksdict: get + put of the window's count per record; closed windows read,
    produced and deleted as stream time passes their end."""
    run = Run("count-raw", n)
    broker_cpu = broker.cpu_s()
    cpu = time.process_time()
    progress = Progress(n)
    db = rocksdict.Rdict(str(db_dir), rocksdict.Options(raw_mode=True))
    consumer = AIOKafkaConsumer(
        in_topic, bootstrap_servers=broker.bootstrap, group_id=f"bench-{tag}", enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, max_batch_size=1024 * 1024)
    await consumer.start()
    await producer.start()
    try:
        get, put, delete = db.get, db.put, db.delete
        stream_time = [-1] * PARTITIONS
        # open windows per partition: end -> window keys (insertion order is end order here,
        # but a dict of lists keeps out-of-order input right too)
        open_windows: list[dict[int, list[tuple[bytes, int]]]] = [{} for _ in range(PARTITIONS)]
        positions: dict[TopicPartition, int] = {}
        sent = []
        done = 0
        last_commit = time.perf_counter()
        deadline = last_commit + RUN_TIMEOUT_S
        while done < n:
            fetched = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for tp, records in fetched.items():
                p = tp.partition
                opened = open_windows[p]
                now = stream_time[p]
                for r in records:
                    key = r.key
                    key.decode()  # what the str serde does to the key and the value
                    r.value.decode()
                    ts = r.timestamp
                    if ts > now:
                        now = ts
                    start = ts - ts % size_ms
                    if start + size_ms <= now:
                        continue  # late: its window is closed
                    wkey = key + start.to_bytes(8, "big")
                    old = get(wkey)
                    if old is None:
                        opened.setdefault(start + size_ms, []).append((key, start))
                        put(wkey, b"1")
                    else:
                        put(wkey, b"%d" % (int(old) + 1))
                    if now > stream_time[p]:
                        stream_time[p] = now
                        for end in [e for e in opened if e <= now]:
                            for wk, ws in opened.pop(end):
                                raw = wk + ws.to_bytes(8, "big")
                                count = int(get(raw))
                                delete(raw)
                                value = b'{"window_start":%d,"window_end":%d,"value":%d}' % (ws, end, count)
                                sent.append(await producer.send(out_topic, value, key=wk, partition=p))
                positions[tp] = records[-1].offset + 1
                done += len(records)
            progress.observe(done, time.perf_counter())
            if time.perf_counter() - last_commit >= 1.0:
                await producer.flush()
                sent.clear()
                await consumer.commit(positions)
                last_commit = time.perf_counter()
            if broker.check_alive() or time.perf_counter() > deadline:
                raise RuntimeError(broker.check_alive() or f"only {done} of {n} records after {RUN_TIMEOUT_S:.0f} s")
        await producer.flush()
        await consumer.commit(positions)
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = time.process_time() - cpu
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
    finally:
        await consumer.stop()
        await producer.stop()
        db.close()
        shutil.rmtree(db_dir, ignore_errors=True)
    return run


async def run_raw_join(broker: AnyBroker, left: str, right: str, out_topic: str, n: int, tag: str,
                       within_ms: int, grace_ms: int, db_dir: Path) -> Run:
    """aiokafka + rocksdict: each record stored under side|user|time|offset, the other side's
    records of the user within ``within_ms`` read by a range iterator, each pair produced."""
    run = Run("join-raw", n)
    broker_cpu = broker.cpu_s()
    cpu = time.process_time()
    progress = Progress(n)
    db = rocksdict.Rdict(str(db_dir), rocksdict.Options(raw_mode=True))
    consumer = AIOKafkaConsumer(
        left, right, bootstrap_servers=broker.bootstrap, group_id=f"bench-{tag}", enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5, max_batch_size=1024 * 1024)
    await consumer.start()
    await producer.start()
    try:
        put, delete = db.put, db.delete
        stream_time = [-1] * PARTITIONS
        stored: list[collections.deque[tuple[int, bytes]]] = [collections.deque() for _ in range(PARTITIONS)]
        positions: dict[TopicPartition, int] = {}
        done = 0
        last_commit = time.perf_counter()
        deadline = last_commit + RUN_TIMEOUT_S
        while done < n:
            fetched = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for tp, records in fetched.items():
                p = tp.partition
                mine, other = (b"L", b"R") if tp.topic == left else (b"R", b"L")
                is_left = mine == b"L"
                kept = stored[p]
                for r in records:
                    key = r.key
                    key.decode()
                    value = r.value.decode()
                    ts = r.timestamp
                    if ts > stream_time[p]:
                        stream_time[p] = ts
                    if ts < stream_time[p] - within_ms - grace_ms:
                        continue  # too late to join
                    prefix = key + b"\x00"
                    skey = mine + prefix + ts.to_bytes(8, "big") + r.offset.to_bytes(8, "big")
                    put(skey, r.value)
                    kept.append((ts, skey))
                    lo = other + prefix + max(ts - within_ms, 0).to_bytes(8, "big")
                    hi = other + prefix + (ts + within_ms + 1).to_bytes(8, "big")
                    it = db.iter()
                    it.seek(lo)
                    while it.valid():
                        k = it.key()
                        if k >= hi:
                            break
                        match = it.value().decode()
                        joined = f"{value}|{match}" if is_left else f"{match}|{value}"
                        await producer.send(out_topic, joined.encode(), key=key, partition=p)
                        it.next()
                    horizon = stream_time[p] - within_ms - grace_ms
                    while kept and kept[0][0] < horizon:
                        delete(kept.popleft()[1])
                positions[tp] = records[-1].offset + 1
                done += len(records)
            progress.observe(done, time.perf_counter())
            if time.perf_counter() - last_commit >= 1.0:
                await producer.flush()
                await consumer.commit(positions)
                last_commit = time.perf_counter()
            if broker.check_alive() or time.perf_counter() > deadline:
                raise RuntimeError(broker.check_alive() or f"only {done} of {n} records after {RUN_TIMEOUT_S:.0f} s")
        await producer.flush()
        await consumer.commit(positions)
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = time.process_time() - cpu
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
    finally:
        await consumer.stop()
        await producer.stop()
        db.close()
        shutil.rmtree(db_dir, ignore_errors=True)
    return run


# -- main ----------------------------------------------------------------------------------------


@dataclass
class Settings:
    events: int
    join_events: int
    faust_events: int
    size_ms: int
    within_ms: int
    grace_ms: int


async def check_count(variant: str, run: Run, broker: AnyBroker, out_topic: str, s: Settings,
                      closed: dict[Window, int]) -> None:
    records = await read_topic(broker.bootstrap, out_topic)
    if variant in KSTREAMS:
        found, duplicates = peer_windows(records)
        note = compare_windows(found, closed, "emitted")
        run.out_records = len(found)
    elif variant == "count-quix":
        found, duplicates = windows_of(records, "start", "end", s.size_ms)
        note = compare_windows(found, closed, "emitted", subset=True)
        run.out_records = len(found)
    else:
        found, duplicates = windows_of(records, "window_start", "window_end", s.size_ms)
        note = compare_windows(found, closed, "emitted")
        run.out_records = len(found)
    if duplicates:
        note = "; ".join(x for x in (note, f"{duplicates} windows emitted twice") if x)
    run.note = "; ".join(x for x in (run.note, note) if x)


async def check_faust(run: Run, broker: AnyBroker, changelog: str, expected: dict[Window, int]) -> None:
    """faust's changelog key is JSON ``[key, [start_s, end_s]]``; its latest value is the count."""
    latest: dict[Window, int] = {}
    for key, value in await read_topic(broker.bootstrap, changelog):
        k, (start_s, _end_s) = json.loads(key)
        window = (k.encode(), round(start_s * 1000))
        if value is None:
            latest.pop(window, None)
        else:
            latest[window] = int(value)
    run.out_records = len(latest)
    # faust deletes expired windows on a wall-clock timer: the changelog may have lost some.
    note = compare_windows(latest, expected, "faust changelog", subset=True)
    run.note = "; ".join(x for x in (run.note, note) if x)


async def check_join(run: Run, broker: AnyBroker, out_topic: str, expected: collections.Counter[Pair]) -> None:
    found: collections.Counter[Pair] = collections.Counter()
    for key, value in await read_topic(broker.bootstrap, out_topic):
        if value and value[:1] == b'"':  # streamkit's str serde writes a JSON string
            value = json.loads(value).encode()
        found[(key, value or b"")] += 1
    run.out_records = sum(found.values())
    run.note = "; ".join(x for x in (run.note, compare_pairs(found, expected)) if x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="page views in the tumbling count")
    parser.add_argument("--join-events", type=int, default=500_000, help="records in each side of the join")
    parser.add_argument("--keys", type=int, default=1000, help="distinct users")
    parser.add_argument("--step-ms", type=int, default=1, help="event time between two page views")
    parser.add_argument("--window-s", type=float, default=10.0, help="the tumbling window's size")
    parser.add_argument("--within-s", type=float, default=1.0, help="the join's window (each way)")
    parser.add_argument("--join-grace-s", type=float, default=None,
                        help="how long the join keeps records (default: the input's whole span)")
    parser.add_argument("--join-rekey", action="store_true",
                        help="join-streamkit re-keys both sides first (repartition topics, the join task merging them)")
    parser.add_argument("--join-drift", default="0",
                        help="join-streamkit's max_task_drift_ms ('off': alignment off)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant (the median is reported)")
    parser.add_argument("--faust-events", type=int, default=200_000,
                        help="page views for faust (it is a rate, and faust is slow)")
    parser.add_argument("--faust-repeat", type=int, default=1)
    parser.add_argument("--only", default=",".join(v for v in VARIANTS if v not in KSTREAMS),
                        help=f"comma-separated subset of {','.join(VARIANTS)} (default: all but the Kafka Streams peers)")
    parser.add_argument("--broker", default="streamkit",
                        help="the broker(s) the apps run against, in turn: streamkit, kafka (Apache Kafka) or both")
    parser.add_argument("--faust-python", default=None, help="a python with faust-streaming (skips the venv)")
    parser.add_argument("--quix-python", default=None, help="a python with quixstreams (skips the venv)")
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
    for name in ("events", "join_events", "keys", "step_ms", "repeat", "faust_events", "faust_repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.join_drift != "off" and not args.join_drift.isdigit():
        parser.error(f"--join-drift is a whole number of ms or 'off', not {args.join_drift!r}")
    size_ms, within_ms = round(args.window_s * 1000), round(args.within_s * 1000)
    if size_ms < 1 or within_ms < 0:
        parser.error("--window-s must be positive and --within-s not negative")
    span_ms = 2 * args.join_events + 1
    grace_ms = span_ms if args.join_grace_s is None else round(args.join_grace_s * 1000)
    s = Settings(args.events, args.join_events, min(args.faust_events, args.events), size_ms, within_ms, grace_ms)
    data = Input(args.keys, args.step_ms)
    fpython = faust_python(args.faust_python) if "count-faust" in only else None
    qpython = quix_python(args.quix_python) if {"count-quix", "join-quix"} & set(only) else None

    counts, closed = expected_windows(data, s.events, size_ms) if set(only) & set(COUNT) else ({}, {})
    faust_counts = expected_windows(data, s.faust_events, size_ms)[0] if "count-faust" in only else {}
    pairs = expected_pairs(data, s.join_events, within_ms) if set(only) & set(JOIN) else collections.Counter()
    children = Children()
    base = Path(tempfile.mkdtemp(prefix="window-bench-", dir=args.dir))
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict[str, list[Run]] = {}
    try:
        print(f"count: {s.events:,} views (faust {s.faust_events:,}) of {args.keys:,} users, {args.step_ms} ms apart, "
              f"tumbling {size_ms:,} ms: {len(counts):,} windows, {len(closed):,} closed by stream time; "
              f"join: 2 x {s.join_events:,} records within {within_ms:,} ms, grace {grace_ms:,} ms: "
              f"{sum(pairs.values()):,} pairs; {PARTITIONS} partitions; {machine_note()}; in {base}")
        for kind in kinds:
            started = time.perf_counter()
            broker = open_broker(kind, children, base / f"broker-{kind}")
            print(f"  {kind} broker on {broker.bootstrap}, up in {time.perf_counter() - started:.1f} s", flush=True)
            started = time.perf_counter()
            if set(only) & set(COUNT) - {"count-faust"}:
                asyncio.run(load(broker.bootstrap, "views", s.events, data.view))
            if "count-faust" in only:
                asyncio.run(load(broker.bootstrap, "views-faust", s.faust_events, data.view))
            if set(only) & set(JOIN):
                asyncio.run(load(broker.bootstrap, "left", s.join_events, data.left))
                asyncio.run(load(broker.bootstrap, "right", s.join_events, data.right))
            print(f"  loaded the input in {time.perf_counter() - started:.1f} s", flush=True)
            rounds = max(args.repeat, args.faust_repeat if "count-faust" in only else 0)
            for i in range(rounds):
                for variant in only:
                    if i >= (args.faust_repeat if variant == "count-faust" else args.repeat):
                        continue
                    tag = f"{variant}-{kind}-{i}"
                    out_topic = f"out-{tag}"
                    asyncio.run(create_topics(broker.bootstrap, [out_topic], KEEP))
                    gc.collect()
                    run = asyncio.run(one_run(variant, tag, out_topic, s, broker, children, base, args, fpython,
                                              qpython))
                    if variant == "count-faust":
                        asyncio.run(check_faust(run, broker, f"bench-{tag}-views_per_window-changelog", faust_counts))
                    elif variant.startswith("count"):
                        asyncio.run(check_count(variant, run, broker, out_topic, s, closed))
                    else:
                        asyncio.run(check_join(run, broker, out_topic, pairs))
                    asyncio.run(delete_topic(broker.bootstrap, out_topic))
                    if variant in KSTREAMS:
                        asyncio.run(delete_app_topics(broker.bootstrap, f"bench-{tag}"))
                    shutil.rmtree(base / "state" / tag, ignore_errors=True)
                    run.variant = variant if kind == "streamkit" else f"{variant}@{kind}"
                    results.setdefault(run.variant, []).append(run)
                    print(run.line().rstrip() + f"  out {run.out_records:,}", flush=True)
            close_broker(broker, children)
    finally:
        signal.signal(signal.SIGTERM, previous)
        children.stop_all()
        shutil.rmtree(base, ignore_errors=True)
    report(results)


async def one_run(variant: str, tag: str, out_topic: str, s: Settings, broker: AnyBroker, children: Children,
                  base: Path, args: Any, fpython: Path | None, qpython: Path | None) -> Run:
    state_dir = base / "state" / tag
    app_id = f"bench-{tag}"
    if variant == "count-streamkit":
        app = count_app(app_id, broker.url, "views", out_topic, s.size_ms / 1000)
        with profiled(args.profile, tag, args.profile_dir, 30, "window"):
            return await run_streamkit(variant, app, ["views"], s.events, broker, state_dir)
    if variant == "join-streamkit":
        drift = None if args.join_drift == "off" else int(args.join_drift)
        app = join_app(app_id, broker.url, "left", "right", out_topic, s.within_ms / 1000, s.grace_ms / 1000,
                       args.join_rekey, drift)
        with profiled(args.profile, tag, args.profile_dir, 30, "window"):
            return await run_streamkit(variant, app, ["left", "right"], 2 * s.join_events, broker, state_dir)
    if variant in ("count-kstreams", "count-kstreams-eos"):
        peer = {"output": out_topic, "window-ms": str(s.size_ms), "emit": "close"}
        return await run_peer(variant, "WindowedCount", children, broker, peer, ["views"], s.events, base, tag)
    if variant in ("join-kstreams", "join-kstreams-eos"):
        peer = {"output": out_topic, "right": "right", "within-ms": str(s.within_ms), "grace-ms": str(s.grace_ms)}
        return await run_peer(variant, "WindowedJoin", children, broker, peer, ["left", "right"], 2 * s.join_events,
                              base, tag)
    if variant == "count-raw":
        return await run_raw_count(broker, "views", out_topic, s.events, tag, s.size_ms, base / f"raw-{tag}")
    if variant == "join-raw":
        return await run_raw_join(broker, "left", "right", out_topic, 2 * s.join_events, tag, s.within_ms,
                                  s.grace_ms, base / f"raw-{tag}")
    if variant == "count-faust":
        assert fpython is not None
        env = {"BENCH_BROKER": broker.url, "BENCH_APP_ID": app_id, "BENCH_IN": "views-faust",
               "BENCH_DATADIR": str(state_dir), "BENCH_PARTITIONS": str(PARTITIONS),
               "BENCH_WINDOW_S": str(s.size_ms / 1000)}
        cmd = [str(fpython), str(FAUST_APP), "worker", "--without-web", "-l", "info"]
        return await run_subprocess(variant, children, broker, cmd, env, app_id, ["views-faust"], s.faust_events,
                                    base, tag)
    assert qpython is not None
    env = {"BENCH_BOOTSTRAP": broker.bootstrap, "BENCH_APP_ID": app_id, "BENCH_OUT": out_topic,
           "BENCH_STATE_DIR": str(state_dir)}
    if variant == "count-quix":
        env.update(BENCH_MODE="count", BENCH_IN="views", BENCH_WINDOW_MS=str(s.size_ms))
        inputs, n = ["views"], s.events
    else:
        env.update(BENCH_MODE="join", BENCH_IN="left", BENCH_RIGHT="right", BENCH_WITHIN_MS=str(s.within_ms),
                   BENCH_GRACE_MS=str(s.grace_ms))
        inputs, n = ["left", "right"], 2 * s.join_events
    return await run_subprocess(variant, children, broker, [str(qpython), str(QUIX_APP)], env, app_id, inputs, n,
                                base, tag)


def report(results: dict[str, list[Run]]) -> None:
    medians = {v: Medians.of(runs) for v, runs in results.items() if runs}
    print("\nmedians; ev/CPU-s = input records per CPU second of the processing process"
          " (a variant@kafka ran against Apache Kafka, the others against streamkit broker):")
    print(f"  {'variant':<24} {'end-to-end ev/s':>16} {'ev/CPU-s':>10}   runs (end-to-end ev/s)")
    for variant, med in medians.items():
        each = ", ".join(f"{r.total_rate:,.0f}" for r in results[variant])
        print(f"  {variant:<24} {med.total:>16,.0f} {med.per_cpu:>10,.0f}   {each}")
    print(f"\n  {'ratio':<44} {'end-to-end':>10} {'per CPU-s':>10}")

    def ratio(num: str, den: str, goal: float | None, as_x: bool) -> None:
        if num not in medians or den not in medians:
            return
        a, b = medians[num], medians[den]
        cells = ["-" if not (x and y) else (f"{x / y:.1f}x" if as_x else f"{x / y:.0%}")
                 for x, y in ((a.total, b.total), (a.per_cpu, b.per_cpu))]
        verdict = ""
        if goal is not None:
            met = b.total and a.total / b.total >= goal
            verdict = f"  goal >= {f'{goal:.0f}x' if as_x else f'{goal:.0%}'}: {'met' if met else 'MISSED'}"
        print(f"  {f'{num} / {den}':<44} {cells[0]:>10} {cells[1]:>10}{verdict}")

    for on in ("", "@kafka"):
        ratio(f"count-streamkit{on}", f"count-faust{on}", 10.0, as_x=True)
        ratio(f"count-streamkit{on}", f"count-quix{on}", 1.0, as_x=True)
        ratio(f"count-streamkit{on}", f"count-raw{on}", 0.5, as_x=False)
        ratio(f"join-streamkit{on}", f"join-quix{on}", 1.0, as_x=True)
        ratio(f"join-streamkit{on}", f"join-raw{on}", 0.5, as_x=False)
        for work in ("count", "join"):
            for peer in (f"{work}-kstreams", f"{work}-kstreams-eos"):
                ratio(f"{work}-streamkit{on}", f"{peer}{on}", None, as_x=True)
                ratio(f"{peer}{on}", f"{work}-raw{on}", None, as_x=False)
    for variant in ("count-streamkit", "count-raw", "join-streamkit", "join-raw", *KSTREAMS):
        ratio(f"{variant}@kafka", variant, None, as_x=False)  # the same app on Apache Kafka / streamkit broker
    report_start(results)
    notes = [(r.variant, r.note) for runs in results.values() for r in runs if r.note]
    if notes:
        print("\nruns with notes:")
        for what, note in notes:
            print(f"  {what}: {note}")


if __name__ == "__main__":
    main()
