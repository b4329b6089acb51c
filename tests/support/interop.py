"""The Java side of the tests: Kafka Streams (the oracle of streamkit's semantics and a peer in
its benchmarks) built from ``interop/<module>/`` by ``scripts/interop.sh``.

``classpath("kafka-streams")`` builds the module when its sources changed (Maven fetches its
jars from Maven Central the first time; later builds reuse them) and returns a ``java -cp``
value. A test run builds each module at most once. ``kafka_tool("TopicCommand", ...)`` runs
one of Apache Kafka's command-line tools (``org.apache.kafka.tools.*``, what the
``kafka-*.sh`` scripts run) and returns the finished process, whatever its exit code.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "interop.sh"


def cache_dir() -> Path:
    return Path(os.environ.get("STREAMKIT_INTEROP_CACHE", ROOT / ".cache" / "interop"))


@functools.cache
def classpath(module: str) -> str:
    """``java -cp`` for ``module``'s jar and its dependencies, built first when needed."""
    done = subprocess.run(["bash", str(SCRIPT), module], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/interop.sh {module} failed:\n{done.stderr[-4000:]}")
    return str(cache_dir() / module / "lib" / "*")


def java(module: str, main: str, *args: str, timeout: float = 120, stdin: str | None = None) -> str:
    """Run ``main`` of ``module`` to the end; its stdout, or an error with its stderr."""
    done = subprocess.run(
        ["java", "-Xmx512m", "-cp", classpath(module), main, *args],
        input=stdin, capture_output=True, text=True, timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{main} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout


KAFKA_TOOLS = "org.apache.kafka.tools."


def kafka_tool(main: str, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run Kafka's tool ``org.apache.kafka.tools.<main>`` to its end (small heap, as a test)."""
    return subprocess.run(
        ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath("kafka"), KAFKA_TOOLS + main, *args],
        input=stdin, capture_output=True, text=True, timeout=timeout,
    )
