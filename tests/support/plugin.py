"""The pytest plugin of the fixtures every test directory may use (``tests/conftest.py`` registers it).

``broker`` is a real ``streamkit broker`` process shared by the tests of one module, on a free
loopback port; a conftest or a test module that needs other broker options overrides
``broker_args``. ``broker_factory`` makes brokers a test starts, stops and restarts itself.
Every broker a fixture started must stop cleanly at teardown: SIGTERM ends it with exit code
0 (and, for ``broker``, no traceback in its stderr), so a broker that crashed, hung or logged
a traceback behind a passing test fails it. When a test that uses ``broker`` fails, the broker's stderr is attached to its
report.

``log_url`` runs a test three times: on the embedded log (``file://<tmp>``), on the module's
broker (``kafka://127.0.0.1:<port>``) and on Apache Kafka (the session's ``kafka``); the last
two are shared, so a test names its apps and topics with ``unique``. ``bootstrap`` is the
module's broker or Apache Kafka as ``HOST:PORT``, for the tests of the wire only. ``data_dir`` is a data
directory not created yet.
``faust_python`` is a python with faust-streaming (see its docstring).

``kafka`` is Apache Kafka itself (one KRaft node, ``tests/support/kafka.py``) shared by the
whole test session; ``kafka_cluster`` three nodes (replication 3, ``min.insync.replicas`` 2) for
the tests of one module, which may kill and restart its nodes. A failing test that used either
gets the ends of the nodes' logs in its report.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess, assert_stops_cleanly
from tests.support.kafka import KafkaCluster

ROOT = Path(__file__).resolve().parents[2]
FAUST_VENV = ROOT / "benchmarks" / ".data" / "venv-faust"
FAUST_REQUIREMENTS = ROOT / "benchmarks" / "requirements-faust.txt"
FAUST_INSTALL_TIMEOUT_S = 200.0  # under the tests' 300 s


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture(scope="module")
def broker_args() -> tuple[str, ...]:
    """The ``streamkit broker`` options of the module's ``broker`` (override it to change them)."""
    return ()


@pytest.fixture(scope="module")
def broker(broker_args: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("broker") / "data", *broker_args).start(same_port=False)
    yield proc
    assert_stops_cleanly(proc)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type[BrokerProcess]]:
    """``broker_factory(*args, data_dir=None)``: a ``BrokerProcess`` not started yet. A broker
    the test left running is stopped at teardown and must exit with 0; the test checks the
    brokers it stopped or killed itself. Only the exit code: these tests damage a broker's
    files or feed it garbage, and its stderr holds the tracebacks of what it refused."""
    made: list[BrokerProcess] = []

    class Factory(BrokerProcess):
        def __init__(self, *args: str, data_dir: Path | None = None) -> None:
            super().__init__(data_dir or tmp_path / f"data{len(made)}", *args)
            made.append(self)

    yield Factory
    try:
        for proc in made:
            if proc.alive():
                code = proc.stop()
                assert code == 0, f"broker exited with {code}\n{proc.stderr()}"
    finally:
        for proc in made:
            proc.kill()


@pytest.fixture(params=["embedded", "broker", "kafka"])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "embedded":
        return f"file://{tmp_path / 'log'}"
    if request.param == "kafka":
        kafka: KafkaCluster = request.getfixturevalue("kafka")
        return f"kafka://{kafka.bootstrap}"
    broker: BrokerProcess = request.getfixturevalue("broker")
    return f"kafka://{broker.bootstrap}"


@pytest.fixture(params=["broker", "kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    """``HOST:PORT`` of the module's ``streamkit broker`` or of the session's Apache Kafka: the
    tests of the wire (``--bootstrap``, ``kafka://`` apps) with no embedded variant. Both are
    shared: name topics, groups and apps with ``unique``."""
    if request.param == "kafka":
        kafka: KafkaCluster = request.getfixturevalue("kafka")
        return kafka.bootstrap
    broker: BrokerProcess = request.getfixturevalue("broker")
    return broker.bootstrap


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka"), 1, secured=True)  # SASL_SSL beside PLAINTEXT
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(tmp_path_factory.mktemp("kafka3"), 3)
    try:
        yield cluster.start()
    finally:
        cluster.close()


INTEROP = Path(__file__).resolve().parent.parent / "interop"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``jvm`` every test that needs one of Kafka's Java processes: Apache Kafka itself
    (the ``kafka`` and ``kafka_cluster`` fixtures, the kafka variant of ``log_url`` and of
    other backend parameters, a test that starts its own cluster and says so with
    ``@pytest.mark.jvm``), or Kafka's tools and Kafka Streams (``tests/interop``). The Python-version matrix leaves them out
    (``scripts/test-matrix.sh``): what Kafka answers does not depend on the Python of its
    client, and the same Python clients run there against ``streamkit broker``."""
    for item in items:
        params = getattr(item, "callspec", None)
        if (
            item.path.is_relative_to(INTEROP)
            or {"kafka", "kafka_cluster"} & set(getattr(item, "fixturenames", ()))
            or (params is not None and "kafka" in params.params.values())  # log_url, bootstrap, ...
        ):
            item.add_marker(pytest.mark.jvm)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when == "call":
        broker_proc = item.funcargs.get("broker") if hasattr(item, "funcargs") else None
        if isinstance(broker_proc, BrokerProcess):
            report.sections.append(("broker stderr", broker_proc.stderr()[-20000:]))
        for name in ("kafka", "kafka_cluster"):
            cluster = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(cluster, KafkaCluster):
                report.sections.append((f"{name} logs", cluster.logs()[-20000:]))
    return report


@pytest.fixture(scope="session")
def faust_python() -> Path:
    """A python with faust-streaming.

    faust-streaming does not share streamkit's venv: it pins ``click<8.4`` (streamkit's venv
    has a newer click), so it lives in the separate venv ``benchmarks/engine_bench.py`` uses,
    ``benchmarks/.data/venv-faust``, created from ``benchmarks/requirements-faust.txt`` on
    first use (the same stamp file, so the benchmark and these tests share one install).
    ``STREAMKIT_FAUST_PYTHON`` names another python that has faust-streaming instead.
    """
    explicit = os.environ.get("STREAMKIT_FAUST_PYTHON")
    if explicit:
        return Path(explicit)
    python = FAUST_VENV / "bin" / "python"
    digest = hashlib.sha256(FAUST_REQUIREMENTS.read_bytes()).hexdigest()
    stamp = FAUST_VENV / "requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    base = getattr(sys, "_base_executable", sys.executable)
    # Wheels only: every pin has one for CPython 3.11 on Linux (about 10 s from an empty pip
    # cache), and a pin that had none would fail here at once instead of building from source
    # for longer than a test may take.
    steps = [
        [base, "-m", "venv", "--clear", str(FAUST_VENV)],
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--only-binary", ":all:",
         "-r", str(FAUST_REQUIREMENTS)],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=FAUST_INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            done = None  # failed below, outside the except block: one line, no exception chain
        if done is None:
            pytest.fail(f"installing faust-streaming into {FAUST_VENV} took over {FAUST_INSTALL_TIMEOUT_S:.0f} s", pytrace=False)
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            pytest.fail(f"cannot install faust-streaming into {FAUST_VENV}: {why}", pytrace=False)
    stamp.write_text(digest + "\n")
    return python


_unique_names = itertools.count()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> str:
    """A name no other test in the session uses (app ids, topics, groups: tests share brokers)."""
    name = re.sub(r"[^a-zA-Z0-9]", "-", request.node.name)[:60]
    return f"{name}-{next(_unique_names)}"
