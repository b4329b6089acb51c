"""Throughput of the stream engine: one stateless consume -> map -> produce pipeline, four ways.

Every variant reads the same ``--records`` records (keys ``user-NNNN``, ~100-byte values)
from a pre-loaded 4-partition input topic, upper-cases each value and writes it with the same
key to a fresh 4-partition output topic, committing its input offsets as it goes:

1. ``streamkit embedded``: a ``Worker`` on the embedded log (``file://`` in a temp dir), agent
   ``async for value in stream: yield transform(value)`` with the output topic as sink;
2. ``streamkit broker``: the same app on ``kafka://`` against a ``streamkit broker``
   subprocess the benchmark starts (127.0.0.1, a free port, its own data directory);
3. ``faust-streaming``: the same pipeline written for faust (``faust_pipeline.py``), run as a
   worker subprocess against the same broker, from a separate venv the benchmark creates on
   first use (``benchmarks/.data/venv-faust``, from ``requirements-faust.txt``);
4. ``raw aiokafka``: no framework, aiokafka consumer + producer against the same broker:
   ``getmany``, transform, ``send`` (or ``create_batch``/``send_batch``), flush + commit every
   second. The best of the two is the ceiling.

Loading the input is not timed. A run's clock starts when the worker (or the subprocess) is
started; a poller reads the output topic's end offsets every ``POLL_S``. Three figures:

* *end-to-end* (the one the goals are judged on): ``--records`` over the time from start until
  every output is acknowledged and, for streamkit, ``settle()`` is true and the final commit
  returned (startup and group join included);
* *steady*: the records written between the first poll that sees output and the poll that sees
  all of them, over that time (startup excluded; shown only when that window holds at least
  half the run, so use large ``--records``). It flatters a worker whose first outputs come
  late and in a burst, as streamkit's do (an agent works through an inbox-full of records
  before the event loop turns and the producer hands their outputs over);
* *ev/CPU-s*: records per CPU second of the pipeline's process (all its threads), which other
  load on a shared machine disturbs least. The broker's CPU seconds (from /proc) are printed
  per run too: they tell whether the broker or the client was the bottleneck.

    python benchmarks/engine_bench.py                       # 1M records, 3 runs each, faust once
    python benchmarks/engine_bench.py --records 100000 --repeat 1
    python benchmarks/engine_bench.py --only embedded,broker --profile   # cProfile streamkit

Goals (issue 4): streamkit through the broker >= 20x faust-streaming's events/s, and >= 50%
of the raw loop's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import hashlib
import io
import os
import platform
import pstats
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

import streamkit as sk
from streamkit._core.partitioner import partition_for_key
from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord, build_batch
from streamkit.runtime import Worker

HERE = Path(__file__).resolve().parent
FAUST_VENV = HERE / ".data" / "venv-faust"
FAUST_REQUIREMENTS = HERE / "requirements-faust.txt"
FAUST_PIPELINE = HERE / "faust_pipeline.py"
PARTITIONS = 4
KEYS = 1000
VALUE_BYTES = 100
POLL_S = 0.02
STREAMKIT = Path(sys.executable).parent / "streamkit"  # the installed console script, as users run it
LOAD_BATCH = 2000
RUN_TIMEOUT_S = 1800.0
VARIANTS = ("embedded", "broker", "faust", "raw-send", "raw-batch")
_LISTENING = re.compile(r"listening on (\S+):(\d+) \(")


def transform(value: bytes) -> bytes:
    """The map step every variant runs."""
    return value.upper()


def key_of(i: int) -> bytes:
    return b"user-%04d" % (i % KEYS)


def value_of(i: int) -> bytes:
    return (b"%012d" % i + b" page=/product/%d session=%d agent=Mozilla/5.0 (X11; Linux x86_64) " % (i % 97, i % 13)
            + b"." * VALUE_BYTES)[:VALUE_BYTES]


# -- results ---------------------------------------------------------------------------------


@dataclass
class Run:
    variant: str
    records: int
    out_records: int = 0
    steady_s: float = 0.0  # first output seen -> all outputs seen
    steady_records: int = 0  # outputs written in that window
    total_s: float = 0.0  # start -> everything acknowledged (and committed)
    cpu_s: float = 0.0  # the pipeline process
    broker_cpu_s: float | None = None
    note: str = ""

    @property
    def steady_rate(self) -> float:
        return self.steady_records / self.steady_s if self.steady_s > 0 else 0.0

    @property
    def total_rate(self) -> float:
        return self.records / self.total_s if self.total_s > 0 else 0.0

    @property
    def cpu_rate(self) -> float:
        return self.records / self.cpu_s if self.cpu_s > 0 else 0.0

    def line(self) -> str:
        broker = "" if self.broker_cpu_s is None else f"  broker CPU {self.broker_cpu_s:6.1f} s"
        extra = f"  [{self.note}]" if self.note else ""
        steady = f"{self.steady_rate:>10,.0f}" if self.steady_rate else f"{'-':>10}"
        return (f"  {self.variant:<18} {self.total_rate:>10,.0f} ev/s end-to-end ({self.total_s:6.2f} s)  "
                f"{steady} ev/s steady  CPU {self.cpu_s:6.1f} s{broker}{extra}")


@dataclass
class Progress:
    """What the output poller saw: when output first appeared and when it was complete."""

    want: int
    started: float = field(default_factory=time.perf_counter)
    first_at: float | None = None
    first_count: int = 0
    done_at: float | None = None
    count: int = 0

    def observe(self, count: int, now: float) -> None:
        self.count = count
        if count and self.first_at is None:
            self.first_at, self.first_count = now, count
        if count >= self.want and self.done_at is None:
            self.done_at = now

    def fill(self, run: Run) -> None:
        run.out_records = self.count
        # The window needs most of the run inside it: a worker's event loop reaches the poller
        # only between inbox-fulls of records, so a small run may be half done at first sight.
        if (self.first_at is not None and self.done_at is not None and self.done_at > self.first_at
                and self.first_count <= self.want // 2):
            run.steady_s = self.done_at - self.first_at
            run.steady_records = self.want - self.first_count


async def poll_until_done(
    progress: Progress, count: Callable[[], Awaitable[int]], failed: Callable[[], str | None],
    poll_s: float = POLL_S,
) -> None:
    deadline = time.perf_counter() + RUN_TIMEOUT_S
    while progress.done_at is None:
        # Stamped when asked: the broker answers at once, but a busy worker's event loop may
        # read the answer much later.
        asked = time.perf_counter()
        progress.observe(await count(), asked)
        if progress.done_at is not None:
            return
        reason = failed()
        if reason:
            raise RuntimeError(reason)
        if time.perf_counter() > deadline:
            raise TimeoutError(f"only {progress.count} of {progress.want} outputs after {RUN_TIMEOUT_S:.0f} s")
        await asyncio.sleep(poll_s)


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- subprocesses ----------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the benchmark dies, so no broker or worker outlives it."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Children:
    """Every subprocess the benchmark starts; ``stop_all`` ends them (SIGTERM, then SIGKILL)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[Any]] = []

    def start(self, cmd: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        proc = subprocess.Popen(cmd, preexec_fn=_die_with_parent, **kwargs)
        self.procs.append(proc)
        return proc

    @staticmethod
    def stop(proc: subprocess.Popen[Any], timeout: float = 20.0) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)
        self.procs.clear()


class Broker:
    def __init__(self, children: Children, data_dir: Path) -> None:
        self.stderr_path = data_dir.parent / "broker.stderr"
        with open(self.stderr_path, "w") as stderr:
            self.proc = children.start(
                [str(STREAMKIT), "broker", "--data-dir", str(data_dir),
                 "--host", "127.0.0.1", "--port", "0", "--log-level", "warning"],
                stdout=subprocess.PIPE, stderr=stderr, text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        line = _first_line(self.proc, 30.0) or ""
        match = _LISTENING.search(line)
        if match is None:
            Children.stop(self.proc)
            raise RuntimeError(f"the broker did not start: {line!r}\n{self.stderr()}")
        self.bootstrap = f"{match.group(1)}:{match.group(2)}"
        self.url = f"kafka://{self.bootstrap}"

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid)

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text()[-4000:]
        except FileNotFoundError:
            return ""

    def check_alive(self) -> str | None:
        if self.proc.poll() is not None:
            return f"the broker exited with {self.proc.returncode}\n{self.stderr()}"
        return None


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    out: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.readline())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return out[0] if out else None


# -- loading and polling ---------------------------------------------------------------------


RecordOf = Callable[[int], bytes]  # record number -> its key (or its value)


def batches_by_partition(
    n: int, keys: RecordOf = key_of, values: RecordOf = value_of
) -> Iterator[tuple[int, list[NewRecord]]]:
    """Records 0..n-1 placed by key as a producer places them, in batches per partition."""
    now_ms = int(time.time() * 1000)
    pending: list[list[NewRecord]] = [[] for _ in range(PARTITIONS)]
    for i in range(n):
        key = keys(i)
        p = partition_for_key(key, PARTITIONS)
        pending[p].append(NewRecord(key, values(i), now_ms))
        if len(pending[p]) >= LOAD_BATCH:
            yield p, pending[p]
            pending[p] = []
    for p, records in enumerate(pending):
        if records:
            yield p, records


def load_embedded(
    data_dir: Path, topic: str, n: int, keys: RecordOf = key_of, values: RecordOf = value_of,
    config: Mapping[str, str] | None = None,
) -> None:
    with LogManager(str(data_dir), background=False) as log:
        log.create_topic(topic, PARTITIONS, config)
        for p, records in batches_by_partition(n, keys, values):
            log.partition(topic, p).append(build_batch(records), verify_crc=False)


async def create_topics(
    bootstrap: str, names: list[str], config: Mapping[str, str] | None = None
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configs = dict(config or {})
        await admin.create_topics([NewTopic(name, PARTITIONS, 1, topic_configs=configs) for name in names])
    finally:
        await admin.close()


async def delete_topic(bootstrap: str, name: str) -> None:
    """Best effort: keeps the broker's page cache and disk small between runs."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        await admin.start()
        await admin.delete_topics([name])
    except Exception as exc:
        print(f"    (could not delete {name}: {exc!r})")
    finally:
        await admin.close()


async def load_broker(
    bootstrap: str, topic: str, n: int, keys: RecordOf = key_of, values: RecordOf = value_of,
    config: Mapping[str, str] | None = None,
) -> None:
    await create_topics(bootstrap, [topic], config)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=1024 * 1024)
    await producer.start()
    try:
        futures = []
        for p, records in batches_by_partition(n, keys, values):
            batch = producer.create_batch()
            for record in records:
                if batch.append(key=record.key, value=record.value, timestamp=record.timestamp) is None:
                    futures.append(await producer.send_batch(batch, topic, partition=p))
                    batch = producer.create_batch()
                    batch.append(key=record.key, value=record.value, timestamp=record.timestamp)
            futures.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def group_committed(bootstrap: str, group: str, topic: str) -> int:
    """Sum of ``group``'s committed offsets on ``topic``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(meta.offset for tp, meta in offsets.items() if tp.topic == topic and meta.offset > 0)


class CommittedOffsets:
    """Sum of a group's committed offsets on its input topics (OffsetFetch), for the poller."""

    def __init__(self, bootstrap: str, group: str, *topics: str) -> None:
        self._admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        self._group = group
        self._topics = set(topics)
        self._last = 0

    async def __aenter__(self) -> CommittedOffsets:
        await self._admin.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._admin.close()

    async def count(self) -> int:
        """The sum now; the last one seen while the group's coordinator is not ready yet (a
        fresh Apache Kafka creates its offsets topic when first asked for a coordinator)."""
        try:
            offsets = await self._admin.list_consumer_group_offsets(self._group)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            return self._last
        self._last = sum(m.offset for tp, m in offsets.items() if tp.topic in self._topics and m.offset > 0)
        return self._last


class EndOffsets:
    """Sum of a topic's end offsets through the broker (ListOffsets), for the poller."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        self._tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    async def __aenter__(self) -> EndOffsets:
        await self._consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def count(self) -> int:
        ends = await self._consumer.end_offsets(self._tps)
        return sum(ends.values())


# -- the variants ----------------------------------------------------------------------------


def streamkit_app(app_id: str, url: str, in_topic: str, out_topic: str) -> sk.App:
    app = sk.App(app_id, broker=url)
    source = app.topic(in_topic, key_serializer="raw", value_serializer="raw", partitions=PARTITIONS)
    sink = app.topic(out_topic, key_serializer="raw", value_serializer="raw", partitions=PARTITIONS)

    @app.agent(source, sink=[sink])
    async def pipeline(stream: sk.Stream) -> Any:
        async for value in stream:
            yield transform(value)

    return app


async def run_streamkit(
    variant: str, url: str, in_topic: str, out_topic: str, n: int, tag: str, broker: Broker | None,
    embedded_dir: Path | None = None,
) -> Run:
    run = Run(variant, n)
    app = streamkit_app(f"bench-{tag}", url, in_topic, out_topic)
    # The GC setting `streamkit worker` applies (cli/apps.py); restored after the run so the
    # other variants run with the interpreter's defaults.
    gc_default = gc.get_threshold()
    gc.set_threshold(700, 10, 100)
    broker_cpu = broker.cpu_s() if broker else 0.0
    cpu = time.process_time()
    progress = Progress(n)
    worker = Worker(app)
    try:
        await worker.start()
        if broker is None:
            log = worker.client.log  # type: ignore[attr-defined]
            parts = [log.partition(out_topic, p) for p in range(PARTITIONS)]

            async def count() -> int:
                return sum(part.high_watermark for part in parts)

            await poll_until_done(progress, count, lambda: None)
        else:
            async with EndOffsets(broker.bootstrap, out_topic) as ends:
                await poll_until_done(progress, ends.count, broker.check_alive)
        while not await worker.settle():
            await asyncio.sleep(POLL_S)
        committed = await worker.commit()
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = time.process_time() - cpu
        if broker is not None:
            run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
        positions = {**worker.committed, **committed}
        if sum(positions.get(sk.TopicPartition(in_topic, p), 0) for p in range(PARTITIONS)) != n:
            run.note = f"committed {positions} != {n} inputs"
    finally:
        await worker.stop()
        gc.set_threshold(*gc_default)
    if broker is not None:
        async with EndOffsets(broker.bootstrap, out_topic) as ends:
            run.out_records = await ends.count()
    elif embedded_dir is not None:
        with LogManager(str(embedded_dir), background=False) as log:
            run.out_records = sum(log.partition(out_topic, p).high_watermark for p in range(PARTITIONS))
    if run.out_records != n:
        run.note = (run.note + "; " if run.note else "") + f"{run.out_records} outputs for {n} inputs"
    return run


async def run_raw(broker: Broker, in_topic: str, out_topic: str, n: int, tag: str, batched: bool) -> Run:
    """The ceiling: aiokafka consumer + producer, no framework; same commit discipline."""
    run = Run("raw-batch" if batched else "raw-send", n)
    await create_topics(broker.bootstrap, [out_topic])
    broker_cpu = broker.cpu_s()
    cpu = time.process_time()
    progress = Progress(n)
    consumer = AIOKafkaConsumer(
        in_topic, bootstrap_servers=broker.bootstrap, group_id=f"bench-{tag}", enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=100, max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5, max_batch_size=1024 * 1024
    )
    await consumer.start()
    await producer.start()
    try:
        async with EndOffsets(broker.bootstrap, out_topic) as ends:
            poller = asyncio.ensure_future(poll_until_done(progress, ends.count, broker.check_alive))
            try:
                positions: dict[TopicPartition, int] = {}
                done = 0
                last_commit = time.perf_counter()
                while done < n:
                    fetched = await consumer.getmany(timeout_ms=200, max_records=10_000)
                    for tp, records in fetched.items():
                        if batched:
                            batch = producer.create_batch()
                            for r in records:
                                value = transform(r.value)
                                if batch.append(key=r.key, value=value, timestamp=None) is None:
                                    await producer.send_batch(batch, out_topic, partition=tp.partition)
                                    batch = producer.create_batch()
                                    batch.append(key=r.key, value=value, timestamp=None)
                            await producer.send_batch(batch, out_topic, partition=tp.partition)
                        else:
                            send = producer.send
                            for r in records:
                                await send(out_topic, transform(r.value), key=r.key, partition=tp.partition)
                        positions[tp] = records[-1].offset + 1
                        done += len(records)
                    if time.perf_counter() - last_commit >= 1.0:
                        await producer.flush()
                        await consumer.commit(positions)
                        last_commit = time.perf_counter()
                    if poller.done():
                        poller.result()  # raises if the broker died
                await producer.flush()
                await consumer.commit(positions)
                await poller
            finally:
                poller.cancel()
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = time.process_time() - cpu
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
    finally:
        await producer.stop()
        await consumer.stop()
    if run.out_records != n:
        run.note = f"{run.out_records} outputs for {n} inputs"
    return run


async def run_faust(
    children: Children, broker: Broker, python: Path, in_topic: str, out_topic: str, n: int, tag: str,
    work_dir: Path,
) -> Run:
    run = Run("faust", n)
    await create_topics(broker.bootstrap, [out_topic])
    datadir = work_dir / f"faust-{tag}"
    log_path = work_dir / f"faust-{tag}.log"
    env = {
        **os.environ,
        "BENCH_BROKER": broker.url, "BENCH_APP_ID": f"bench-{tag}", "BENCH_IN": in_topic,
        "BENCH_OUT": out_topic, "BENCH_DATADIR": str(datadir), "BENCH_PARTITIONS": str(PARTITIONS),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PYTHONPATH", None)
    broker_cpu = broker.cpu_s()
    progress = Progress(n)
    with open(log_path, "w") as log:
        proc = children.start(
            [str(python), str(FAUST_PIPELINE), "worker", "--without-web", "-l", "info"],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(work_dir),
        )

    def failed() -> str | None:
        if proc.poll() is not None:
            return f"the faust worker exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}"
        return broker.check_alive()

    try:
        async with EndOffsets(broker.bootstrap, out_topic) as ends:
            await poll_until_done(progress, ends.count, failed)
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = proc_cpu_s(proc.pid)
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
    finally:
        Children.stop(proc, timeout=30.0)
    async with EndOffsets(broker.bootstrap, out_topic) as ends:
        run.out_records = await ends.count()
    if run.out_records != n:
        run.note = f"{run.out_records} outputs for {n} inputs"
    committed = await group_committed(broker.bootstrap, f"bench-{tag}", in_topic)
    if committed != n:  # faust commits on an interval and when it stops: all of it by now
        run.note = (run.note + "; " if run.note else "") + f"faust committed {committed} of {n} input offsets"
    errors = [line for line in log_path.read_text().splitlines()
              if any(word in line for word in ("WARN", "ERROR", "CRIT", "Traceback"))]
    if errors:
        run.note = (run.note + "; " if run.note else "") + f"{len(errors)} warning/error lines from faust, first: {errors[0][:300]}"
    return run


# -- faust venv ------------------------------------------------------------------------------


def faust_python(explicit: str | None) -> Path:
    """The faust venv's python, creating or updating the venv from the pinned requirements."""
    if explicit:
        return Path(explicit)
    python = FAUST_VENV / "bin" / "python"
    digest = hashlib.sha256(FAUST_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = FAUST_VENV / "requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    print(f"installing faust-streaming into {FAUST_VENV} (first run) ...", flush=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--clear", str(FAUST_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--only-binary", ":all:",
         "-r", str(FAUST_REQUIREMENTS)],
        check=True,
    )
    stamp.write_text(digest + "\n")
    return python


# -- main ------------------------------------------------------------------------------------


def profiled(
    enabled: bool, name: str, out_dir: Path, top: int, prefix: str = "engine"
) -> contextlib.AbstractContextManager[None]:
    @contextlib.contextmanager
    def manager() -> Iterator[None]:
        if not enabled:
            yield
            return
        profile = cProfile.Profile()
        profile.enable()
        try:
            yield
        finally:
            profile.disable()
            out_dir.mkdir(parents=True, exist_ok=True)
            path = out_dir / f"{prefix}-{name}.pstats"
            profile.dump_stats(str(path))
            text = io.StringIO()
            stats = pstats.Stats(profile, stream=text).strip_dirs()
            stats.sort_stats("tottime").print_stats(top)
            print(f"\n--- cProfile of {name} (by own time; saved to {path}) ---")
            lines = text.getvalue().splitlines()
            start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
            print("\n".join(line for line in lines[start:] if line.strip()))

    return manager()


def machine_note() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} CPUs ({model or platform.machine()}), Python {platform.python_version()}, {platform.system()}"


@dataclass
class Medians:
    """Per-metric medians of one variant's runs (each metric's own median)."""

    variant: str
    steady: float
    total: float
    per_cpu: float

    @classmethod
    def of(cls, runs: list[Run]) -> Medians:
        return cls(
            runs[0].variant,
            statistics.median([r.steady_rate for r in runs if r.steady_rate] or [0.0]),
            statistics.median(r.total_rate for r in runs),
            statistics.median(r.cpu_rate for r in runs),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant (the median is reported)")
    parser.add_argument("--faust-records", type=int, default=None,
                        help="records for the faust runs (default: --records; it is a rate, and faust is slow)")
    parser.add_argument("--faust-repeat", type=int, default=1,
                        help="runs of faust (default 1: one run at faust's rate takes minutes)")
    parser.add_argument("--only", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    parser.add_argument("--faust-python", default=None, help="a python with faust-streaming (skips the venv)")
    parser.add_argument("--profile", action="store_true", help="cProfile the streamkit runs (slows them)")
    parser.add_argument("--profile-dir", type=Path, default=HERE / ".data" / "profiles")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp dir goes (default: system temp)")
    args = parser.parse_args()
    only = [v.strip() for v in args.only.split(",") if v.strip()]
    unknown = set(only) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}: use {','.join(VARIANTS)}")
    n = args.records
    faust_n = args.faust_records or n
    faust_repeat = args.faust_repeat
    python = faust_python(args.faust_python) if "faust" in only else None

    children = Children()
    base = Path(tempfile.mkdtemp(prefix="engine-bench-", dir=args.dir))
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict[str, list[Run]] = {v: [] for v in only}
    try:
        print(f"{n:,} records of {VALUE_BYTES} bytes, {PARTITIONS} partitions, {KEYS} keys; {machine_note()}; in {base}")
        embedded_dir = base / "embedded"
        if "embedded" in only:
            started = time.perf_counter()
            load_embedded(embedded_dir, "in", n)
            print(f"  loaded the embedded input in {time.perf_counter() - started:.1f} s")
        broker: Broker | None = None
        if set(only) - {"embedded"}:
            broker = Broker(children, base / "broker")
            started = time.perf_counter()
            asyncio.run(load_broker(broker.bootstrap, "in", max(n, faust_n if "faust" in only else 0)))
            print(f"  broker on {broker.bootstrap}; loaded its input in {time.perf_counter() - started:.1f} s")
            if "faust" in only and faust_n != n:
                asyncio.run(load_broker(broker.bootstrap, "in-faust", faust_n))
        for i in range(max(args.repeat, faust_repeat if "faust" in only else 0)):
            for variant in only:
                if (variant == "faust" and i >= faust_repeat) or (variant != "faust" and i >= args.repeat):
                    continue
                tag = f"{variant}-{i}"
                out_topic = f"out-{tag}"
                gc.collect()  # each run starts from the same heap, not the last run's garbage
                if variant == "embedded":
                    with profiled(args.profile, tag, args.profile_dir, 30):
                        run = asyncio.run(run_streamkit(
                            variant, f"file://{embedded_dir}", "in", out_topic, n, tag, None, embedded_dir
                        ))
                else:
                    assert broker is not None
                    if variant == "broker":
                        with profiled(args.profile, tag, args.profile_dir, 30):
                            run = asyncio.run(run_streamkit(variant, broker.url, "in", out_topic, n, tag, broker))
                    elif variant == "faust":
                        assert python is not None
                        in_topic = "in" if faust_n == n else "in-faust"
                        run = asyncio.run(run_faust(children, broker, python, in_topic, out_topic, faust_n, tag, base))
                    else:
                        run = asyncio.run(run_raw(broker, "in", out_topic, n, tag, variant == "raw-batch"))
                    asyncio.run(delete_topic(broker.bootstrap, out_topic))
                results[variant].append(run)
                print(run.line(), flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        children.stop_all()
        shutil.rmtree(base, ignore_errors=True)
    report(results, n, faust_n)


def report(results: dict[str, list[Run]], n: int, faust_n: int) -> None:
    medians = {v: Medians.of(runs) for v, runs in results.items() if runs}
    print(f"\nmedians ({n:,} records; faust {faust_n:,}); ev/CPU-s = records per CPU second of the"
          " pipeline's process, which the other load on a shared machine disturbs least:")
    print(f"  {'variant':<10} {'end-to-end ev/s':>16} {'steady ev/s':>12} {'ev/CPU-s':>10}   runs (end-to-end ev/s)")
    for variant, m in medians.items():
        each = ", ".join(f"{r.total_rate:,.0f}" for r in results[variant])
        steady = f"{m.steady:>12,.0f}" if m.steady else f"{'-':>12}"
        print(f"  {variant:<10} {m.total:>16,.0f} {steady} {m.per_cpu:>10,.0f}   {each}")
    raw = [medians[v] for v in ("raw-send", "raw-batch") if v in medians]
    ceiling = max(raw, key=lambda m: m.total) if raw else None
    print()

    def ratio(what: str, num: str, den: Medians | None, goal: float | None = None, as_x: bool = False) -> None:
        if num not in medians or den is None:
            return
        a, b = medians[num], den
        cells = []
        for x, y in ((a.total, b.total), (a.steady, b.steady), (a.per_cpu, b.per_cpu)):
            if not (x and y):
                cells.append("-")
                continue
            value = x / y
            cells.append(f"{value:7.1f}x" if as_x else f"{value:7.1%} ")
        verdict = ""
        if goal is not None and b.total:
            goal_text = f"{goal:.0f}x" if as_x else f"{goal:.0%}"
            verdict = f"  goal >= {goal_text} (end-to-end): {'met' if a.total / b.total >= goal else 'MISSED'}"
        print(f"  {what:<40} {cells[0]:>10} {cells[1]:>12} {cells[2]:>10}{verdict}")

    print(f"  {'ratio':<40} {'end-to-end':>10} {'steady':>12} {'per CPU-s':>10}")
    name = ceiling.variant if ceiling else "-"
    ratio("streamkit-broker / faust", "broker", medians.get("faust"), 20.0, as_x=True)
    ratio(f"streamkit-broker / raw ({name})", "broker", ceiling, 0.5)
    ratio(f"streamkit-embedded / raw ({name})", "embedded", ceiling)
    ratio("streamkit-embedded / faust", "embedded", medians.get("faust"), as_x=True)
    if "raw-send" in medians and "raw-batch" in medians:
        ratio("raw-send / raw-batch", "raw-send", medians["raw-batch"])
    bad = [r for runs in results.values() for r in runs if r.note]
    if bad:
        print("\nruns with notes:")
        for r in bad:
            print(f"  {r.variant}: {r.note}")


if __name__ == "__main__":
    main()
