"""A stock Kafka Streams 4.4 application runs on ``streamkit broker`` (issue 29's peer).

The word count, the tumbling windowed count and the inner windowed join of
``interop/kafka-streams`` (``peer/``; they become the Kafka Streams peer of
``benchmarks/window_bench.py`` and ``table_bench.py``) run as subprocesses against a broker
on loopback, at-least-once and ``exactly_once_v2``: Kafka Streams creates its internal
topics there (with the configs it sets on them), joins the group, commits (transactionally
under exactly-once, reading offsets with RequireStable), and its output topic, read with a
read_committed consumer, must equal the answer computed here: the last count per key (per
word; per word and window) or the multiset of joined pairs. The Java process is always ended
by its pid; its stderr is shown when a test fails.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from tests.support.broker import BrokerProcess
from tests.support.interop import classpath

pytestmark = pytest.mark.timeout(300)

PEER = "io.streamkit.interop.peer."
RECORDS = 3_000
PARTITIONS = 3
RUN_TIMEOUT_S = 150
WINDOW_MS = 1_000
# Recent, on a round hour: the brokers' 7-day retention deletes records stamped further back,
# and the peers' output topics (created by Kafka Streams) keep the broker's default.
BASE_TS = (int(time.time() * 1000) // 3_600_000 - 2) * 3_600_000
JOIN_USERS = 600
JOIN_WITHIN_MS = 1_000


@pytest.fixture(scope="module")
def broker_args() -> tuple[str, ...]:
    return ("--default-partitions", str(PARTITIONS))


class Peer:
    """One Kafka Streams peer application, a JVM subprocess."""

    def __init__(self, main: str, args: dict[str, str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        argv = [f"--{key}" if i % 2 == 0 else value for key, value in args.items() for i in range(2)]
        with open(stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                ["java", "-Xmx512m", "-cp", classpath("kafka-streams"), PEER + main, *argv],
                stdout=subprocess.PIPE, stderr=stderr, text=True,
            )

    def wait(self, timeout_s: float) -> tuple[int, str]:
        """(exit code, stdout) once it ended by itself; stopped by its pid if it did not."""
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the peer did not finish in {timeout_s} s\n{self.stderr()}") from None
        return self.proc.returncode, out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def stderr(self) -> str:
        return self.stderr_path.read_text()[-6000:]


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for peer in started:
        peer.stop()


def produce(bootstrap: str, topic: str, records: list[tuple[str, str, int]]) -> None:
    """(key, value, timestamp) records into a new topic of ``PARTITIONS`` partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value, ts in records:
        producer.produce(topic, key=key, value=value, timestamp=ts)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, value: Callable[[bytes], str] = bytes.decode) -> list[tuple[str, str]]:
    """Every (key, value) of ``topic``, read to its end with read_committed."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True,
    })
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[tuple[str, str]] = []
        at_end: set[int] = set()
        while len(at_end) < len(partitions):
            message = consumer.poll(10)
            assert message is not None, f"no end of {topic} in 10 s"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(message.partition())
                continue
            records.append((message.key().decode(), value(message.value())))
        return records
    finally:
        consumer.close()


def run_peer(
    peers: list[Peer], tmp_path: Path, broker: BrokerProcess, main: str, unique: str, guarantee: str,
    extra: dict[str, str] | None = None,
) -> list[tuple[str, str]]:
    """Run the peer over the ``RECORDS`` input records to its end: its output topic's records."""
    peer = Peer(main, {
        "bootstrap": broker.bootstrap, "application-id": unique, "input": f"{unique}-in",
        "output": f"{unique}-out", "guarantee": guarantee, "state-dir": str(tmp_path / "state"),
        "commit-interval-ms": "500", "records": str(RECORDS), **(extra or {}),
    }, tmp_path / "peer.stderr")
    peers.append(peer)
    code, out = peer.wait(RUN_TIMEOUT_S)
    assert code == 0 and out.splitlines() == ["RUNNING", f"processed {RECORDS}"], (code, out, peer.stderr())
    try:
        return read_all(broker.bootstrap, f"{unique}-out")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{peer.stderr()}") from exc


def placements(bootstrap: str, topic: str) -> list[tuple[int, str, int]]:
    """(partition, key, timestamp) of every record of ``topic``, as the producer placed them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-placements",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: list[tuple[int, str, int]] = []
        at_end: set[int] = set()
        while len(at_end) < PARTITIONS:
            message = consumer.poll(10)
            assert message is not None, f"no end of {topic} in 10 s"
            if message.error() is not None:
                at_end.add(message.partition())
                continue
            out.append((message.partition(), message.key().decode(), message.timestamp()[1]))
        return out
    finally:
        consumer.close()


def last_counts(records: list[tuple[str, str]]) -> dict[str, int]:
    """The last count of each key: the final table."""
    return {key: int(value) for key, value in records}


def words(seed: int) -> list[tuple[str, int]]:
    """(word, timestamp): a skewed vocabulary, timestamps rising 3 ms a record."""
    rng = random.Random(seed)
    vocabulary = [f"w{i:02d}" for i in range(40)]
    return [(rng.choice(vocabulary[: rng.randint(1, 40)]), BASE_TS + 3 * i) for i in range(RECORDS)]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_word_count_equals_the_counted_input(
    broker: BrokerProcess, peers: list[Peer], tmp_path: Path, unique: str, guarantee: str
) -> None:
    records = words(29)
    produce(broker.bootstrap, f"{unique}-in", [(word, word, ts) for word, ts in records])
    counts = last_counts(run_peer(peers, tmp_path, broker, "WordCount", unique, guarantee))
    assert counts == Counter(word for word, _ts in records)
    # Kafka Streams created its changelog itself, with the configs it sets on internal topics.
    changelog = ConfigResource("topic", f"{unique}-word-counts-changelog")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries = admin.describe_configs([changelog])[changelog].result(30)
    assert {name: e.value for name, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value} == {
        "cleanup.policy": "compact", "message.timestamp.type": "CreateTime",
    }


def test_word_count_emitting_nothing_keeps_its_counts_in_the_changelog(
    broker: BrokerProcess, peers: list[Peer], tmp_path: Path, unique: str
) -> None:
    # --emit none (table_bench's peer, beside a streamkit agent counting into a table): no
    # output, the counts in the store's changelog (8-byte big-endian longs).
    records = words(31)
    produce(broker.bootstrap, f"{unique}-in", [(word, word, ts) for word, ts in records])
    assert run_peer(peers, tmp_path, broker, "WordCount", unique, "at_least_once", {"emit": "none"}) == []
    changelog = read_all(broker.bootstrap, f"{unique}-word-counts-changelog",
                         lambda raw: str(int.from_bytes(raw, "big")))
    assert last_counts(changelog) == Counter(word for word, _ts in records)


def test_the_peer_stops_on_sigterm_after_committing_its_work(
    broker: BrokerProcess, peers: list[Peer], tmp_path: Path, unique: str
) -> None:
    records = words(30)
    produce(broker.bootstrap, f"{unique}-in", [(word, word, ts) for word, ts in records])
    peer = Peer("WordCount", {
        "bootstrap": broker.bootstrap, "application-id": unique, "input": f"{unique}-in",
        "output": f"{unique}-out", "guarantee": "exactly_once_v2", "state-dir": str(tmp_path / "state"),
        "commit-interval-ms": "200",  # no --records: it runs until SIGTERM
    }, tmp_path / "peer.stderr")
    peers.append(peer)
    assert peer.proc.stdout is not None
    assert peer.proc.stdout.readline() == "RUNNING\n", peer.stderr()
    expected = Counter(word for word, _ts in records)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while last_counts(read_all(broker.bootstrap, f"{unique}-out")) != expected:
        assert time.monotonic() < deadline, peer.stderr()
        time.sleep(0.5)
    peer.proc.send_signal(signal.SIGTERM)
    code, out = peer.wait(60)
    # Exit 0 (not 143: the peer halts while its shutdown hook holds the JVM), and at least
    # every record processed: a transaction that aborts has its records processed again
    # (exactly-once keeps the output exact, as the loop above saw).
    assert code == 0 and out.startswith("processed ") and int(out.split()[1]) >= RECORDS, (code, out, peer.stderr())


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    done = subprocess.run(
        ["java", "-cp", classpath("kafka-streams"), PEER + "WordCount", "--bootstrap", "127.0.0.1:9",
         "--application-id", "a", "--input", "i", "--output", "o", "--state-dir", str(tmp_path),
         "--guarantee", "exactly_once"],
        capture_output=True, text=True, timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "peer: --guarantee must be at_least_once or exactly_once_v2, not exactly_once\n"


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_windowed_count_equals_the_counted_input(
    broker: BrokerProcess, peers: list[Peer], tmp_path: Path, unique: str, guarantee: str
) -> None:
    records = words(26)
    produce(broker.bootstrap, f"{unique}-in", [(word, word, ts) for word, ts in records])
    counts = last_counts(run_peer(
        peers, tmp_path, broker, "WindowedCount", unique, guarantee, {"window-ms": str(WINDOW_MS)}
    ))
    expected = Counter(f"{word}@{ts - ts % WINDOW_MS}" for word, ts in records)
    assert counts == expected


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_inner_windowed_join_pairs_exactly_the_records_within_the_window(
    broker: BrokerProcess, peers: list[Peer], tmp_path: Path, unique: str, guarantee: str
) -> None:
    # window_bench's join: left i at T0 + 2i, right i at T0 + 2i + 1, user i mod USERS; a
    # user's records recur every 2 * USERS ms > the window, so each left meets one right.
    half = RECORDS // 2
    user = [f"user-{i % JOIN_USERS:04d}" for i in range(half)]
    produce(broker.bootstrap, f"{unique}-in", [(user[i], f"l{i}", BASE_TS + 2 * i) for i in range(half)])
    produce(broker.bootstrap, f"{unique}-right", [(user[i], f"r{i}", BASE_TS + 2 * i + 1) for i in range(half)])
    pairs = run_peer(peers, tmp_path, broker, "WindowedJoin", unique, guarantee, {
        "right": f"{unique}-right", "within-ms": str(JOIN_WITHIN_MS), "grace-ms": str(2 * RECORDS),
    })
    assert Counter(pairs) == Counter((user[i], f"l{i}|r{i}") for i in range(half))


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_windowed_count_emitting_on_close_writes_each_closed_window_once(
    broker: BrokerProcess, peers: list[Peer], tmp_path: Path, unique: str, guarantee: str
) -> None:
    # --emit close (window_bench's peer): each window once, with its whole count, when its
    # partition's stream time passes its end; the windows still open at the end stay unwritten.
    records = words(27)
    produce(broker.bootstrap, f"{unique}-in", [(word, word, ts) for word, ts in records])
    stream_time: dict[int, int] = {}
    partition_of: dict[str, int] = {}
    for p, word, ts in placements(broker.bootstrap, f"{unique}-in"):
        stream_time[p] = max(stream_time.get(p, 0), ts)
        partition_of[word] = p
    out = run_peer(peers, tmp_path, broker, "WindowedCount", unique, guarantee,
                   {"window-ms": str(WINDOW_MS), "emit": "close"})
    counts = Counter(f"{word}@{ts - ts % WINDOW_MS}" for word, ts in records)
    closed = {w: c for w, c in counts.items()
              if int(w.split("@")[1]) + WINDOW_MS <= stream_time[partition_of[w.split("@")[0]]]}
    assert len(out) == len({key for key, _ in out}), "a window was written twice"
    assert 0 < len(closed) < len(counts)
    assert last_counts(out) == closed
