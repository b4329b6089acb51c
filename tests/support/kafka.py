"""Apache Kafka itself, for the tests that hold streamkit to it: KRaft nodes on loopback.

``KafkaCluster(root, nodes=1)`` runs Apache Kafka (``interop/kafka/``, built by
``scripts/interop.sh`` from Maven Central's jars) as ``nodes`` combined broker+controller
processes on free loopback ports, with a static controller quorum, small heaps and the settings
a test wants (no initial rebalance delay, no topic auto-creation, internal topics replicated to
every node, ``min.insync.replicas`` 2 on a cluster of three). ``start()`` formats the nodes'
log directories (``kafka.tools.StorageTool``), starts them and waits until every broker is in
the metadata; ``secured=True`` adds a SASL_SSL listener beside PLAINTEXT on each node
(``tests/support/secured.py``: a CA made with openssl, SCRAM and PLAIN users, reached at
``sasl_ssl_bootstrap``); ``kill(i)``/``restart(i)``/``stop(i)`` fault one node, ``restart_all()``
brings back a cluster whose nodes were all stopped (one node alone has no controller quorum),
``ensure_running()`` starts whichever nodes are not running (a faulting test's cleanup);
``leader(topic, p)`` names a partition's leader and ``wait_in_sync()`` waits until every replica
caught up; ``close()`` ends every process by its pid. Each node's log (``server.log``) stays in
its directory and ``logs()``
returns the ends of them, for a failing test's report.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from tests.support import secured
from tests.support.interop import classpath

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
HEAP = "-Xmx384m"

_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = warn
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaCluster:
    def __init__(self, root: Path, nodes: int = 1, heap: str = HEAP, *, secured: bool = False, **overrides: str) -> None:
        """``heap`` is each node's ``-Xmx`` flag: small for tests, larger for a benchmark."""
        self.root = root
        self.heap = heap
        self.size = nodes
        self.overrides = overrides
        self.ports = [free_port() for _ in range(nodes)]
        self.controller_ports = [free_port() for _ in range(nodes)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * nodes
        self.cluster_id = ""
        self.sasl_ssl_ports = [free_port() for _ in range(nodes)] if secured else []
        self.tls: secured.Tls | None = None  # made by start() when secured

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.sasl_ssl_ports)

    def node_dir(self, i: int) -> Path:
        return self.root / f"node{i}"

    def _properties(self, i: int) -> str:
        n = self.size
        voters = ",".join(f"{j + 1}@127.0.0.1:{p}" for j, p in enumerate(self.controller_ports))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(i + 1),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.ports[i]},CONTROLLER://127.0.0.1:{self.controller_ports[i]}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.ports[i]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.node_dir(i) / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.replication.factor": str(n),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(n),
            "transaction.state.log.min.isr": str(min(2, n)),
            "transaction.state.log.num.partitions": "5",
            "share.coordinator.state.topic.replication.factor": str(n),
            "share.coordinator.state.topic.min.isr": str(min(2, n)),
            "min.insync.replicas": str(min(2, n)),
            "default.replication.factor": str(n),
            # Tests stamp records in 2023 (T0): Kafka's time retention would delete whole
            # partitions of them, the active segment too, at its 5-minute check, in the middle
            # of whichever test runs then. Retention is tested with per-topic settings.
            "log.retention.ms": "-1",
        }
        if self.tls is not None:
            extra = f"{secured.LISTENER}://127.0.0.1:{self.sasl_ssl_ports[i]}"
            props["listeners"] += "," + extra
            props["advertised.listeners"] += "," + extra
            props["listener.security.protocol.map"] += f",{secured.LISTENER}:{secured.LISTENER}"
            props.update(secured.listener_properties(self.tls))
        props.update(self.overrides)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, i: int, *args: str) -> list[str]:
        log4j = self.node_dir(i) / "log4j2.properties"
        return [
            "java", self.heap, "-Xms128m", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={log4j}",
            "-cp", classpath("kafka"), *args,
        ]

    def start(self) -> KafkaCluster:
        self.cluster_id = subprocess.run(
            self._java_plain("kafka.tools.StorageTool", "random-uuid"), capture_output=True, text=True, check=True,
        ).stdout.strip() or uuid.uuid4().hex
        if self.sasl_ssl_ports:
            self.tls = secured.make_tls(self.root / "tls")
        scram = secured.scram_format_args() if self.tls is not None else []
        for i in range(self.size):
            d = self.node_dir(i)
            d.mkdir(parents=True, exist_ok=True)
            (d / "server.properties").write_text(self._properties(i))
            (d / "log4j2.properties").write_text(_LOG4J.format(path=d / "server.log"))
            done = subprocess.run(
                self._java(i, "kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                           "-c", str(d / "server.properties"), "--ignore-formatted", *scram),
                capture_output=True, text=True, timeout=120,
            )
            if done.returncode != 0:
                raise RuntimeError(f"formatting Kafka node {i} failed:\n{done.stdout}{done.stderr}")
        for i in range(self.size):
            self._spawn(i)
        self.wait_ready()
        return self

    def _java_plain(self, *args: str) -> list[str]:
        return ["java", HEAP, "-cp", classpath("kafka"), *args]

    def _spawn(self, i: int) -> None:
        d = self.node_dir(i)
        with open(d / "stdout.log", "ab") as out:
            self.procs[i] = subprocess.Popen(
                self._java(i, "kafka.Kafka", str(d / "server.properties")),
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until every running node answers a metadata request itself and lists every running
        node as a broker. Asking each node (not the cluster) matters after a crash: the
        controller keeps listing a SIGKILLed broker until its session expires, so the
        cluster's metadata shows a restarted node before that node serves."""
        from confluent_kafka.admin import AdminClient

        running = [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]
        deadline = time.monotonic() + timeout
        last = ""
        waiting = list(running)
        while time.monotonic() < deadline:
            for i, p in enumerate(self.procs):
                if p is not None and p.poll() is not None and i in running:
                    raise RuntimeError(f"Kafka node {i} exited with {p.returncode}:\n{self.logs()}")
            for i in list(waiting):
                # A client of this node alone: its first metadata can only come from it.
                admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.ports[i]}", "log_level": 0})
                try:
                    brokers = admin.list_topics(timeout=2).brokers
                except Exception as e:  # a node that is starting refuses or times out
                    last = f"node {i}: {e}"
                    continue
                if {b - 1 for b in brokers} >= set(running):
                    waiting.remove(i)
                else:
                    last = f"node {i} lists brokers {sorted(brokers)}"
            if not waiting:
                return
            time.sleep(0.3)
        raise RuntimeError(f"Kafka did not start in {timeout} s ({last}):\n{self.logs()}")

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (a crash)."""
        p = self.procs[i]
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(STOP_TIMEOUT_S)

    def stop(self, i: int) -> None:
        """SIGTERM node ``i`` (a controlled shutdown), SIGKILL when it does not end in time."""
        p = self.procs[i]
        if p is None or p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(STOP_TIMEOUT_S)

    def restart(self, i: int) -> None:
        self.stop(i)
        self._spawn(i)
        self.wait_ready()

    def restart_all(self) -> None:
        """Every node stopped (if it is not) and started again: a node waits for the
        controller quorum, so they start together and are ready once all are brokers."""
        for i in range(self.size):
            self.stop(i)
        for i in range(self.size):
            self._spawn(i)
        self.wait_ready()

    def ensure_running(self) -> None:
        """Every node that is not running started again (together: a node alone may have no
        controller quorum), then ready: what a test that faults a shared cluster does at its
        end, also when it failed between a kill and the restart."""
        stopped = [i for i, p in enumerate(self.procs) if p is None or p.poll() is not None]
        for i in stopped:
            self._spawn(i)
        if stopped:
            self.wait_ready()

    def leader(self, topic: str, partition: int) -> int:
        """The node id (index + 1) leading ``topic``'s ``partition``, -1 while none does."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return int(admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader)

    def wait_in_sync(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until every partition of every topic has all its replicas in sync: a node just
        restarted is a broker before it caught up, and a second fault before that leaves
        partitions under ``min.insync.replicas``."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        behind: list[str] = []
        while time.monotonic() < deadline:
            try:
                topics = admin.list_topics(timeout=5).topics
            except Exception as e:  # a node that is starting refuses or times out
                behind = [str(e)]
            else:
                behind = [f"{t} [{p.id}] isr {p.isrs} of {p.replicas}"
                          for t, meta in topics.items() for p in meta.partitions.values()
                          if sorted(p.isrs) != sorted(p.replicas)]
                if not behind:
                    return
            time.sleep(0.3)
        raise RuntimeError(f"replicas not in sync in {timeout} s: {behind[:5]}\n{self.logs()}")

    def close(self) -> None:
        for i in range(self.size):
            self.kill(i)

    def logs(self, lines: int = 40) -> str:
        out = []
        for i in range(self.size):
            for name in ("stdout.log", "server.log"):
                path = self.node_dir(i) / name
                if path.exists():
                    tail = path.read_text(errors="replace").splitlines()[-lines:]
                    out.append(f"--- node {i} {name} ---\n" + "\n".join(tail))
        return "\n".join(out)
