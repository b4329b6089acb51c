"""``streamkit topics/produce/consume --bootstrap``: the same commands against a real broker.

A ``streamkit broker`` subprocess serves a data directory on a free loopback port; the
commands run in-process (CliRunner) or as processes and reach it over the Kafka wire
protocol. The last tests cover the data-directory owner: with the directory locked by a
broker that is recorded in ``DIR/.owner``, ``--data-dir DIR`` goes through that broker.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from streamkit._core.partitioner import partition_for_key
from streamkit.cli.main import cli
from streamkit.log.manager import OWNER_FILE, LogManager
from streamkit.log.records import NewRecord
from streamkit.transport.kafka_tools import FetchOutOfRangeError, KafkaTools, TopicNotFoundError
from tests.support.broker import STREAMKIT, BrokerProcess
from tests.support.processes import free_port, interruptible

_CLEAN_ENV = {"STREAMKIT_DATA_DIR": None, "STREAMKIT_BOOTSTRAP": None}


def sk(*args: str, input: str | bytes | None = None, env: dict[str, str | None] | None = None) -> Result:
    """The command in-process, with no log options from the environment unless ``env`` sets them."""
    return CliRunner().invoke(cli, list(args), input=input, env={**_CLEAN_ENV, **(env or {})}, catch_exceptions=False)


def sk_process(*args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    base = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
    return subprocess.run(
        [str(STREAMKIT), *args], input=input, capture_output=True, env={**base, **(env or {})}, timeout=60
    )


def one_line_error(stderr: str | bytes, *fragments: str) -> None:
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    lines = text.splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamkit: error: "), text
    for fragment in fragments:
        assert fragment in lines[0], text


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, read by a client that does not join the group."""

    async def read() -> dict[int, int]:
        async with KafkaTools(bootstrap) as tools:
            return await tools.committed(group, topic)

    return asyncio.run(read())


def test_topics_create_list_describe_delete(bootstrap: str, unique: str) -> None:
    b = ("--bootstrap", bootstrap)
    topic, one, bad = f"{unique}-topics", f"{unique}-one", f"{unique}-bad"
    created = sk("topics", "create", topic, "-p", "3", "-c", "retention.ms=60000", *b)
    assert created.exit_code == 0, created.output
    assert created.stdout == f"created topic {topic} with 3 partitions\n"
    assert sk("topics", "create", one, *b).stdout == f"created topic {one} with 1 partition\n"
    again = sk("topics", "create", topic, *b)
    assert again.exit_code == 2
    one_line_error(again.stderr, f"Topic '{topic}' already exists.")  # the broker's words, Kafka's
    assert sk("topics", "create", topic, "--if-not-exists", *b).exit_code == 0
    bad_config = sk("topics", "create", bad, "-c", "no.such.config=1", *b)
    assert bad_config.exit_code == 2
    one_line_error(bad_config.stderr, "Unknown topic config name: no.such.config")

    names = sk("topics", "list", *b).stdout.split()
    assert {topic, one} <= set(names) and bad not in names and names == sorted(names)

    assert sk("produce", topic, "-p", "1", *b, input="a\nb\n").exit_code == 0
    described = sk("topics", "describe", topic, *b)
    assert described.exit_code == 0, described.output
    lines = described.stdout.splitlines()
    assert lines[0] == f"Topic: {topic}  Partitions: 3  Internal: no  Offsets in the log: 2  Size: -"
    assert lines[2].split() == ["Partition", "LogStartOffset", "HighWatermark", "Size", "Segments"]
    assert [line.split() for line in lines[3:6]] == [["0", "0", "0", "-", "-"], ["1", "0", "2", "-", "-"], ["2", "0", "0", "-", "-"]]
    assert "  retention.ms = 60000" in lines and "  cleanup.policy = delete" in lines

    deleted = sk("topics", "delete", topic, *b)
    assert deleted.exit_code == 0 and deleted.stdout == f"deleted topic {topic}\n"
    assert topic not in sk("topics", "list", *b).stdout.split()
    for args in (("topics", "describe", topic), ("topics", "delete", topic)):
        gone = sk(*args, *b)
        assert gone.exit_code == 2 and gone.stdout == ""
        one_line_error(gone.stderr, f"unknown topic '{topic}'")
    # Describing a missing topic did not auto-create it on the broker.
    assert topic not in sk("topics", "list", *b).stdout.split()


def test_keyed_round_trip_with_offsets_and_keys(bootstrap: str, unique: str) -> None:
    env = {"STREAMKIT_BOOTSTRAP": bootstrap}  # the environment variable works too
    orders = f"{unique}-orders"
    assert sk("topics", "create", orders, "-p", "3", env=env).exit_code == 0
    lines = "".join(f"user{i % 7}:event {i}\n" for i in range(40))
    produced = sk("produce", orders, "--key-separator", ":", "-H", "src=cli", "--compression", "gzip", input=lines, env=env)
    assert produced.exit_code == 0, produced.output
    assert produced.stderr.startswith(f"produced 40 records in 3 batches to {orders} (partitions 0: ")

    consumed = sk("consume", orders, "--from-beginning", "--print-offsets", "--print-keys", env=env)
    assert consumed.exit_code == 0, consumed.output
    assert consumed.stderr == f"consumed 40 records from {orders}\n"
    next_offset: Counter[int] = Counter()
    values = []
    for row in consumed.stdout.splitlines():
        position, key, value = row.split("\t")
        partition, offset = map(int, position.split(":"))
        assert partition == partition_for_key(key.encode(), 3)  # Kafka's partitioner, as embedded
        assert offset == next_offset[partition]
        next_offset[partition] += 1
        assert int(value.split()[1]) % 7 == int(key[4:])
        values.append(int(value.split()[1]))
    assert sorted(values) == list(range(40))
    assert sk("consume", orders, env=env).stdout == ""  # starts at the end, exits there

    async def first_record() -> tuple[int, list[tuple[str, bytes | None]]]:
        async with KafkaTools(bootstrap) as tools:
            got = await tools.fetch(orders, partition, 0, 1 << 20)
            return got.records[0].timestamp, got.records[0].headers

    timestamp, headers = asyncio.run(first_record())
    assert headers == [("src", b"cli")] and abs(timestamp - time.time() * 1000) < 60_000


def test_kafka_tools_directly(broker: BrokerProcess) -> None:
    """What the commands do not reach: fetch out of range, null headers, commits without a member."""

    async def scenario() -> None:
        async with KafkaTools(broker.bootstrap) as tools:
            await tools.create_topic("wire-tools", 2, {"cleanup.policy": "compact"})
            assert (await tools.describe_topic("wire-tools")).config["cleanup.policy"] == "compact"
            records = [NewRecord(b"k%d" % i, b"v%d" % i, 1000 + i, [("h", None)]) for i in range(3)]
            assert await tools.produce("wire-tools", 1, records) == 0
            assert await tools.produce("wire-tools", 1, records[:1], compression="zstd") == 3
            got = await tools.fetch("wire-tools", 1, 1, 1 << 20)
            assert [(r.offset, r.key, r.timestamp, r.headers) for r in got.records][:2] == [
                (1, b"k1", 1001, [("h", None)]),
                (2, b"k2", 1002, [("h", None)]),
            ]
            assert got.high_watermark == 4
            small = await tools.fetch("wire-tools", 1, 0, 64)  # another size: a new fetch consumer
            assert small.records[0].offset == 0  # a whole first batch even when it is larger
            empty = await tools.fetch("wire-tools", 0, 0, 1 << 20)
            assert (empty.records, empty.next_offset, empty.high_watermark) == ([], 0, 0)
            with pytest.raises(FetchOutOfRangeError) as caught:
                await tools.fetch("wire-tools", 1, 10, 1 << 20)
            assert (caught.value.log_start_offset, caught.value.high_watermark) == (0, 4)
            again = await tools.fetch("wire-tools", 1, 3, 1 << 20)  # usable after the error
            assert [r.value for r in again.records] == [b"v0"]

            assert await tools.committed("tools-group", "wire-tools") == {}
            await tools.commit("tools-group", "wire-tools", {1: 2})
            await tools.commit("tools-group", "wire-tools", {0: 0, 1: 4})
            assert await tools.committed("tools-group", "wire-tools") == {0: 0, 1: 4}
            await tools.delete_topic("wire-tools")
            with pytest.raises(TopicNotFoundError):
                await tools.describe_topic("wire-tools")
        await tools.aclose()  # idempotent

    asyncio.run(scenario())


def test_group_commit_and_resume(bootstrap: str, unique: str) -> None:
    b = ("--bootstrap", bootstrap)
    topic, billing, late = f"{unique}-groups", f"{unique}-billing", f"{unique}-late"
    sk("topics", "create", topic, "-p", "2", *b)
    sk("produce", topic, "-p", "0", *b, input="".join(f"zero {i}\n" for i in range(6)))
    sk("produce", topic, "-p", "1", *b, input="".join(f"one {i}\n" for i in range(4)))

    first = sk("consume", topic, "-g", billing, "--from-beginning", "--max", "4", *b)
    assert first.exit_code == 0, first.output
    assert first.stdout == "zero 0\nzero 1\nzero 2\nzero 3\n"
    assert first.stderr == f"consumed 4 records from {topic}; group {billing} is at 0:4, 1:0\n"
    rest = sk("consume", topic, "-g", billing, *b)  # resumes from the commits
    assert rest.stdout == "zero 4\nzero 5\none 0\none 1\none 2\none 3\n"
    assert rest.stderr == f"consumed 6 records from {topic}; group {billing} is at 0:6, 1:4\n"
    assert sk("consume", topic, "-g", billing, "--from-beginning", *b).stdout == ""

    # A new group starting at the end commits where it started, as Kafka does.
    fresh = sk("consume", topic, "-g", late, *b)
    assert fresh.stderr == f"consumed 0 records from {topic}; group {late} is at 0:6, 1:4\n"
    sk("produce", topic, "-p", "1", *b, input="new\n")
    assert sk("consume", topic, "-g", late, *b).stdout == "new\n"


def test_partition_and_offset(broker: BrokerProcess) -> None:
    b = ("--bootstrap", broker.bootstrap)
    sk("topics", "create", "wire-seek", "-p", "2", *b)
    sk("produce", "wire-seek", "-p", "1", *b, input="a\nb\nc\nd\n")
    got = sk("consume", "wire-seek", "--partition", "1", "--offset", "2", "--print-offsets", *b)
    assert got.exit_code == 0 and got.stdout == "1:2\tc\n1:3\td\n"
    assert sk("consume", "wire-seek", "-p", "1", "-o", "earliest", "-n", "1", *b).stdout == "a\n"
    assert sk("consume", "wire-seek", "-p", "1", "-o", "latest", *b).stdout == ""
    assert sk("consume", "wire-seek", "-p", "0", "--from-beginning", *b).stdout == ""
    for args, fragment in [
        (("-p", "1", "-o", "9"), "offset 9 is out of range [0, 4] of partition 1"),
        (("-p", "2",), "topic 'wire-seek' has partitions 0 to 1"),
    ]:
        result = sk("consume", "wire-seek", *args, *b)
        assert result.exit_code == 2
        one_line_error(result.stderr, fragment)


def test_errors_are_one_line(broker: BrokerProcess, tmp_path: Path) -> None:
    b = ("--bootstrap", broker.bootstrap)
    for args in (("produce", "wire-nope"), ("consume", "wire-nope"), ("topics", "describe", "wire-nope")):
        result = sk(*args, *b, input="x\n")
        assert result.exit_code == 2, (args, result.output)
        one_line_error(result.stderr, "unknown topic 'wire-nope'")
    for value, fragment in [
        ("localhost", "no port"),
        ("localhost:", "the port must be 1 to 65535"),
        ("localhost:0", "the port must be 1 to 65535"),
        (":9092", "no host"),
        ("::1:9092", "put an IPv6 host in brackets"),
        ("h:1,h", "'h' is not HOST:PORT"),
    ]:
        result = sk("topics", "list", "--bootstrap", value)
        assert result.exit_code == 2, value
        one_line_error(result.stderr, "Invalid value for '--bootstrap'", fragment)

    both = sk("topics", "list", *b, "--data-dir", str(tmp_path))
    assert both.exit_code == 2
    one_line_error(both.stderr, "--bootstrap and --data-dir exclude each other")
    both_env = sk("topics", "list", env={"STREAMKIT_BOOTSTRAP": broker.bootstrap, "STREAMKIT_DATA_DIR": str(tmp_path)})
    assert both_env.exit_code == 2
    one_line_error(both_env.stderr, "STREAMKIT_BOOTSTRAP and STREAMKIT_DATA_DIR are both set")
    # The command line beats the environment.
    assert sk("topics", "list", *b, env={"STREAMKIT_DATA_DIR": str(tmp_path)}).exit_code == 0
    dir_wins = sk("topics", "list", "--data-dir", str(tmp_path / "none"), env={"STREAMKIT_BOOTSTRAP": broker.bootstrap})
    one_line_error(dir_wins.stderr, "no data directory at")

    # Nobody listening: one line, exit 2, none of aiokafka's log lines, no traceback.
    unreachable = sk_process("topics", "list", "--bootstrap", f"127.0.0.1:{free_port()}")
    assert unreachable.returncode == 2
    one_line_error(unreachable.stderr, "cannot reach a broker at 127.0.0.1:")


def test_follow_over_the_wire(broker: BrokerProcess) -> None:
    b = ("--bootstrap", broker.bootstrap)
    sk("topics", "create", "wire-live", "-p", "2", *b)
    # --from-beginning: the records produced below are read even if the follower starts late.
    cmd = [str(STREAMKIT), "consume", "wire-live", "-f", "--from-beginning"]
    cmd += ["-g", "watchers", "--print-offsets", *b]
    env = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=interruptible)
    try:
        assert proc.stdout is not None
        seen = []
        for i in range(3):
            assert sk("produce", "wire-live", "-p", str(i % 2), *b, input=f"m{i}\n").exit_code == 0
            seen.append(proc.stdout.readline())
        assert seen == [b"0:0\tm0\n", b"1:0\tm1\n", b"0:1\tm2\n"]
        # Interrupt once the follower has committed past m2: a Ctrl-C that lands between
        # printing a record and advancing past it re-delivers the record (at-least-once).
        deadline = time.monotonic() + 20
        while committed(broker.bootstrap, "watchers", "wire-live") != {0: 2, 1: 1}:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    assert b"consumed 3 records from wire-live; group watchers is at 0:2, 1:1" in err
    sk("produce", "wire-live", "-p", "1", *b, input="after\n")
    assert sk("consume", "wire-live", "-g", "watchers", *b).stdout == "after\n"


# -- a data directory reached through its owner ----------------------------------------------


def _write_owner(data_dir: Path, port: int, pid: int) -> None:
    (data_dir / OWNER_FILE).write_text(json.dumps({"host": "127.0.0.1", "port": port, "pid": pid}))


def test_locked_data_dir_goes_through_its_owner(tmp_path: Path) -> None:
    data = tmp_path / "data"
    d = ("--data-dir", str(data))
    assert sk("topics", "create", "owned", "-p", "2", *d).exit_code == 0
    owner = BrokerProcess(data).start(same_port=False)  # holds the data directory's lock
    try:
        assert owner.proc is not None
        # Where the owner serves the log (the broker records it too; the test does not rely on that).
        (data / OWNER_FILE).write_text(json.dumps({"host": "127.0.0.1", "port": owner.port, "pid": owner.proc.pid}))
        assert sk_process("topics", "list", *d).stdout == b"owned\n"
        assert sk("topics", "create", "second", *d).exit_code == 0
        produced = sk_process("produce", "owned", "-K", ":", *d, input=b"k1:v1\nk2:v2\nk3:v3\n")
        assert produced.returncode == 0, produced.stderr
        described = sk("topics", "describe", "owned", *d)
        assert described.stdout.splitlines()[0].endswith("Offsets in the log: 3  Size: -")  # over the wire
        consumed = sk("consume", "owned", "--from-beginning", "-g", "readers", "--print-keys", *d)
        assert consumed.exit_code == 0, consumed.output
        assert sorted(consumed.stdout.splitlines()) == ["k1\tv1", "k2\tv2", "k3\tv3"]

        # A stale .owner (nothing listening there), a malformed one or none: the usual error.
        stale = json.dumps({"host": "127.0.0.1", "port": free_port(), "pid": owner.proc.pid})
        for content in (stale, "{not json", None):
            if content is None:
                (data / OWNER_FILE).unlink()
            else:
                (data / OWNER_FILE).write_text(content)
            locked = sk_process("topics", "list", *d)
            assert locked.returncode == 2, content
            one_line_error(locked.stderr, f"data directory {data} is in use by another process")
    finally:
        assert owner.stop() == 0, owner.stderr()

    # With the owner gone the command opens the directory itself and finds everything.
    (data / OWNER_FILE).write_text(stale)  # even if a dead owner left its file behind
    assert sk("topics", "list", *d).stdout == "owned\nsecond\n"
    with LogManager(data, background=False) as log:
        assert sum(log.partition("owned", p).high_watermark for p in range(2)) == 3
        assert sum(o for _tp, (o, _m) in log.offsets.fetch("readers").items()) == 3


@pytest.mark.parametrize("where", ["broker", "data-dir"])
def test_topics_alter_adds_partitions(broker: BrokerProcess, tmp_path: Path, where: str) -> None:
    target = ("--bootstrap", broker.bootstrap) if where == "broker" else ("--data-dir", str(tmp_path / "log"))
    name = f"grow-{where}"
    assert sk("topics", "create", name, "-p", "2", *target).exit_code == 0
    assert sk("produce", name, "-p", "1", *target, input="kept\n").exit_code == 0
    grown = sk("topics", "alter", name, "--partitions", "5", *target)
    assert grown.exit_code == 0, grown.output
    assert grown.stdout == f"topic {name} now has 5 partitions\n"
    assert sk("produce", name, "-p", "4", *target, input="new\n").exit_code == 0
    lines = sk("topics", "describe", name, *target).stdout.splitlines()
    assert lines[0].startswith(f"Topic: {name}  Partitions: 5 ")
    shrink = sk("topics", "alter", name, "--partitions", "3", *target)
    assert shrink.exit_code == 2
    one_line_error(shrink.stderr, "has 5 partitions", "not to 3")
    unknown = sk("topics", "alter", f"{name}-nope", "--partitions", "3", *target)
    assert unknown.exit_code == 2
    one_line_error(unknown.stderr, f"{name}-nope")
    missing = sk("topics", "alter", name, *target)
    assert missing.exit_code == 2
    one_line_error(missing.stderr, "--partitions")


@pytest.mark.parametrize("where", ["broker", "data-dir"])
def test_topics_delete_records_moves_the_log_start(broker: BrokerProcess, tmp_path: Path, where: str) -> None:
    target = ("--bootstrap", broker.bootstrap) if where == "broker" else ("--data-dir", str(tmp_path / "log"))
    name = f"trim-{where}"
    assert sk("topics", "create", name, "-p", "2", *target).exit_code == 0
    assert sk("produce", name, "-p", "0", *target, input="a\nb\nc\nd\n").exit_code == 0
    trimmed = sk("topics", "delete-records", name, "--partition", "0", "--offset", "3", *target)
    assert trimmed.exit_code == 0, trimmed.output
    assert trimmed.stdout == f"{name}-0: log start offset 3\n"
    lines = sk("topics", "describe", name, *target).stdout.splitlines()
    assert lines[3].split()[:3] == ["0", "3", "4"]
    consumed = sk("consume", name, "-p", "0", "--from-beginning", *target)
    assert consumed.exit_code == 0 and consumed.stdout == "d\n", consumed.output
    everything = sk("topics", "delete-records", name, "-p", "0", "-o", "-1", *target)
    assert everything.stdout == f"{name}-0: log start offset 4\n"
    past = sk("topics", "delete-records", name, "-p", "0", "-o", "9", *target)
    assert past.exit_code == 2
    one_line_error(past.stderr, "9")
    no_partition = sk("topics", "delete-records", name, "-p", "7", "-o", "0", *target)
    assert no_partition.exit_code == 2
    one_line_error(no_partition.stderr, name)
    unknown = sk("topics", "delete-records", f"{name}-nope", "-p", "0", "-o", "0", *target)
    assert unknown.exit_code == 2
    one_line_error(unknown.stderr, f"{name}-nope")
    assert sk("topics", "create", f"{name}-c", "-c", "cleanup.policy=compact", *target).exit_code == 0
    compacted = sk("topics", "delete-records", f"{name}-c", "-p", "0", "-o", "0", *target)
    assert compacted.exit_code == 2
    one_line_error(compacted.stderr, f"{name}-c-0", "cleanup.policy")
