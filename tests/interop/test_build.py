"""The Kafka Streams module builds from Maven Central and runs the pinned version."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.interop import ROOT, java


def test_the_module_runs_the_pinned_kafka_version() -> None:
    pinned = re.search(r"<kafka.version>([^<]+)</kafka.version>", (ROOT / "interop/kafka-streams/pom.xml").read_text())
    assert pinned is not None
    assert java("kafka-streams", "io.streamkit.interop.Version").strip() == pinned.group(1)


def test_an_unknown_module_is_one_clear_error() -> None:
    done = subprocess.run(["bash", str(Path(ROOT, "scripts/interop.sh")), "no-such"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip() == f"interop: no module 'no-such' (no {ROOT}/interop/no-such/pom.xml)"


def test_apache_kafka_runs_the_pinned_version() -> None:
    pinned = re.search(r"<kafka.version>([^<]+)</kafka.version>", (ROOT / "interop/kafka/pom.xml").read_text())
    assert pinned is not None
    assert java("kafka", "io.streamkit.interop.kafka.Version").strip() == pinned.group(1)
