"""Kafka Streams as a peer in the benchmarks, and Apache Kafka beside ``streamkit broker``.

``run_peer`` runs one of ``interop/kafka-streams``' peer applications (``WordCount``,
``WindowedCount``, ``WindowedJoin``: Kafka Streams 4.4, one stream thread, RocksDB stores) as
a JVM subprocess against a broker, over a pre-loaded input, and measures it as the benchmarks
measure every subprocess: the clock runs from the JVM's start until the application's group
has committed every input offset (OffsetFetch, polled every 0.2 s). The peer is told
``--records N``: when its topology has seen the N-th input record it closes, which commits at
once (a transaction under ``exactly_once_v2``), so the end is not held back by the commit
interval. Its CPU-seconds are the whole JVM's (every thread: stream thread, clients' network
threads, RocksDB, JIT and GC; start-up included), read from the kernel's accounting of the
process when it has ended (``wait4``), so the close's last commit is counted too.

``open_broker("streamkit" | "kafka", ...)`` starts the broker an app under test runs against:
a ``streamkit broker`` subprocess (``engine_bench.Broker``) or a one-node Apache Kafka
(``tests/support/kafka.py``, KRaft, the jars ``scripts/interop.sh kafka`` builds) with a
benchmark's heap. Both offer ``bootstrap``, ``url``, ``cpu_s()`` and ``check_alive()``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from engine_bench import (
    PARTITIONS,
    Broker,
    Children,
    CommittedOffsets,
    Progress,
    Run,
    delete_topic,
    poll_until_done,
    proc_cpu_s,
)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the Java build and the Kafka runner live in tests/support
    sys.path.append(str(ROOT))

from tests.support.interop import classpath  # noqa: E402
from tests.support.kafka import KafkaCluster  # noqa: E402

BROKERS = ("streamkit", "kafka")
GUARANTEES = {"alos": "at_least_once", "eos": "exactly_once_v2"}
PEER_PACKAGE = "io.streamkit.interop.peer."
PEER_HEAP = "-Xmx1g"
KAFKA_HEAP = "-Xmx2g"
COMMIT_INTERVAL_MS = 1000  # streamkit's, faust's and Quix's commit interval in these benchmarks
PEER_POLL_S = 0.2
EXIT_TIMEOUT_S = 60.0


class KafkaBroker:
    """A one-node Apache Kafka (KRaft) on loopback, shaped like ``engine_bench.Broker``."""

    def __init__(self, children: Children, data_dir: Path) -> None:
        # No retention by time: the window benchmark's input carries 2023 timestamps, which
        # Kafka's default 7 days would delete under a running app (streamkit broker keeps them).
        self.cluster = KafkaCluster(data_dir, nodes=1, heap=KAFKA_HEAP, **{"log.retention.ms": "-1"})
        try:
            self.cluster.start()
        finally:  # stop_all ends the node if the benchmark stops early
            children.procs.extend(p for p in self.cluster.procs if p is not None)
        self.bootstrap = self.cluster.bootstrap
        self.url = f"kafka://{self.bootstrap}"

    def _proc(self) -> subprocess.Popen[bytes]:
        proc = self.cluster.procs[0]
        assert proc is not None
        return proc

    def cpu_s(self) -> float:
        return proc_cpu_s(self._proc().pid)

    def check_alive(self) -> str | None:
        proc = self._proc()
        if proc.poll() is not None:
            return f"Apache Kafka exited with {proc.returncode}\n{self.cluster.logs()}"
        return None

    def close(self, children: Children) -> None:
        self.cluster.close()
        for proc in self.cluster.procs:
            if proc in children.procs:
                children.procs.remove(proc)


AnyBroker = Broker | KafkaBroker


@dataclass
class PeerRun(Run):
    """A peer's run, with the JVM's CPU-seconds until the application was first RUNNING (JVM
    start, class loading, the group join, the stores' set-up): sampled by the 0.2 s poller, so
    up to one poll late."""

    start_cpu_s: float = 0.0

    def line(self) -> str:
        return super().line() + f"  (CPU {self.start_cpu_s:.1f} s until RUNNING)"


def open_broker(kind: str, children: Children, work_dir: Path) -> AnyBroker:
    """Start the ``kind`` broker (one of ``BROKERS``) with its data under ``work_dir``."""
    if kind == "kafka":
        return KafkaBroker(children, work_dir / "kafka")
    if kind == "streamkit":
        (work_dir / "streamkit").mkdir(parents=True, exist_ok=True)
        return Broker(children, work_dir / "streamkit" / "broker")
    raise ValueError(f"unknown broker {kind!r}: use one of {', '.join(BROKERS)}")


def close_broker(broker: AnyBroker, children: Children) -> None:
    if isinstance(broker, KafkaBroker):
        broker.close(children)
    else:
        Children.stop(broker.proc)
        children.procs.remove(broker.proc)


def parse_brokers(text: str) -> list[str]:
    """``--broker streamkit,kafka`` -> the brokers in the order given; ValueError names a bad one."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in BROKERS]
    if unknown or not kinds:
        raise ValueError(f"--broker takes a comma-separated subset of {','.join(BROKERS)}, not {text!r}")
    return list(dict.fromkeys(kinds))


def guarantee_of(variant: str) -> str:
    """``...-kstreams`` runs at-least-once, ``...-kstreams-eos`` exactly_once_v2."""
    return GUARANTEES["eos" if variant.endswith("-eos") else "alos"]


def _exited(pid: int) -> bool:
    """Whether ``pid`` has ended, without reaping it (its resource usage stays readable)."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return info is not None


async def run_peer(
    variant: str, main: str, children: Children, broker: AnyBroker, args: dict[str, str], inputs: list[str], n: int,
    work_dir: Path, tag: str,
) -> Run:
    """Run the peer ``main`` over ``n`` records of ``inputs`` (``args``: its ``--key value``s
    beyond bootstrap, application id, guarantee, state dir, commit interval and record count);
    the group is the application id, ``bench-<tag>``."""
    run = PeerRun(variant, n)
    app_id = f"bench-{tag}"
    log_path = work_dir / f"{tag}.log"
    argv = {
        "bootstrap": broker.bootstrap, "application-id": app_id, "guarantee": guarantee_of(variant),
        "state-dir": str(work_dir / "state" / tag), "commit-interval-ms": str(COMMIT_INTERVAL_MS),
        "records": str(n), "input": inputs[0], **args,
    }
    cmd = ["java", PEER_HEAP, "-cp", classpath("kafka-streams"), PEER_PACKAGE + main]
    cmd += [part for key, value in argv.items() for part in (f"--{key}", value)]
    broker_cpu = broker.cpu_s()
    progress = Progress(n)
    with open(log_path, "w") as log:
        proc = children.start(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(work_dir))

    def failed() -> str | None:
        if not run.start_cpu_s and "RUNNING" in log_path.read_text():
            run.start_cpu_s = proc_cpu_s(proc.pid)
        if _exited(proc.pid) and progress.count < n:
            return f"{variant} ended early:\n{log_path.read_text()[-4000:]}"
        return broker.check_alive()

    try:
        async with CommittedOffsets(broker.bootstrap, app_id, *inputs) as committed:
            await poll_until_done(progress, committed.count, failed, PEER_POLL_S)
        run.total_s = time.perf_counter() - progress.started
        run.broker_cpu_s = broker.cpu_s() - broker_cpu
        progress.fill(run)
        deadline = time.perf_counter() + EXIT_TIMEOUT_S
        while not _exited(proc.pid) and time.perf_counter() < deadline:
            await asyncio.sleep(0.05)
        if _exited(proc.pid):
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            run.cpu_s = usage.ru_utime + usage.ru_stime
        else:
            run.cpu_s = proc_cpu_s(proc.pid)
            run.note = f"did not end {EXIT_TIMEOUT_S:.0f} s after its last commit (CPU read then)"
    finally:
        Children.stop(proc, timeout=30.0)
        children.procs.remove(proc)
    await settle_output(broker.bootstrap, argv["output"])
    lines = log_path.read_text().splitlines()
    if proc.returncode or lines[-1:] != [f"processed {n}"]:
        note = f"exit {proc.returncode}, last lines {lines[-3:]}"
        run.note = "; ".join(x for x in (run.note, note) if x)
    return run


def report_start(results: dict[str, list[Run]]) -> None:
    """The peers' median CPU until RUNNING, and their events per CPU-second after it."""
    peers = {v: [r for r in runs if isinstance(r, PeerRun)] for v, runs in results.items()}
    peers = {v: runs for v, runs in peers.items() if runs}
    if not peers:
        return
    print("\nKafka Streams peers: JVM CPU until RUNNING (start, group join, stores) and ev/CPU-s after it (medians):")
    for variant, runs in peers.items():
        start = statistics.median(r.start_cpu_s for r in runs)
        after = statistics.median(r.records / (r.cpu_s - r.start_cpu_s) for r in runs if r.cpu_s > r.start_cpu_s)
        print(f"  {variant:<24} {start:6.1f} s {after:>10,.0f} ev/CPU-s after RUNNING")


async def settle_output(bootstrap: str, topic: str) -> None:
    """Until ``topic`` has no open transaction (its last stable offsets are its high watermarks).

    A transaction's commit returns once the coordinator has decided it; the markers that make
    its records readable to read_committed consumers reach the partitions a moment later, so
    an exactly-once peer's last output is not yet readable when the peer has ended."""
    committed = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await committed.start()
    await uncommitted.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        deadline = time.perf_counter() + EXIT_TIMEOUT_S
        while await committed.end_offsets(tps) != await uncommitted.end_offsets(tps):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{topic} still has an open transaction after {EXIT_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.1)
    finally:
        await committed.stop()
        await uncommitted.stop()


async def delete_app_topics(bootstrap: str, app_id: str) -> None:
    """Delete the internal topics (changelogs, suppression buffers) of application ``app_id``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(f"{app_id}-")]
    finally:
        await admin.close()
    for name in names:
        await delete_topic(bootstrap, name)
