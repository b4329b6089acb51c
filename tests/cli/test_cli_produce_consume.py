"""``streamkit produce`` and ``streamkit consume``: round trips, partitioning, groups, errors."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from streamkit._core.partitioner import partition_for_key
from streamkit._core.types import TopicPartition
from streamkit.cli.produce import read_line_chunks
from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord, decode_batches, iter_batches

KEYED = "".join(f"user{i % 7}:event {i}\n" for i in range(40))


def _batches(data_dir: Path, topic: str, partition: int) -> list[tuple[int, list[object]]]:
    """(record count, records) of every batch of a partition, read with the log itself."""
    with LogManager(data_dir, background=False) as log:
        part = log.partition(topic, partition)
        data = part.read(0, 64 * 1024 * 1024) if part.high_watermark else b""
    return [(h.records_count, list(records)) for h, records in decode_batches(data)]


@pytest.fixture
def orders(run) -> str:
    assert run("topics", "create", "orders", "--partitions", "3").exit_code == 0
    return "orders"


def test_keyed_round_trip_follows_kafkas_partitioner(run, orders: str) -> None:
    produced = run("produce", orders, "--key-separator", ":", input=KEYED)
    assert produced.exit_code == 0, produced.output
    assert produced.stdout == ""
    assert produced.stderr.startswith("produced 40 records in 3 batches to orders (partitions 0: ")

    consumed = run("consume", orders, "--from-beginning", "--print-offsets", "--print-keys")
    assert consumed.exit_code == 0
    assert consumed.stderr == "consumed 40 records from orders\n"
    rows = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert len(rows) == 40
    next_offset: Counter[int] = Counter()
    per_key: dict[str, list[int]] = {}
    for position, key, value in rows:
        partition, offset = map(int, position.split(":"))
        assert partition == partition_for_key(key.encode(), 3)
        assert offset == next_offset[partition]  # dense offsets, in order, per partition
        next_offset[partition] += 1
        assert value.startswith("event ")
        per_key.setdefault(key, []).append(int(value.split()[1]))
    for key, events in per_key.items():
        assert events == sorted(events), key  # a key's records stay in order
        assert all(e % 7 == int(key[4:]) for e in events)


def test_values_only_by_default_and_end_means_nothing(run, orders: str) -> None:
    run("produce", orders, "--partition", "1", input="a\nb\n")
    assert run("consume", orders).stdout == ""  # starts at the end, exits there
    assert run("consume", orders, "--from-beginning").stdout == "a\nb\n"


def test_partition_option_and_unkeyed_round_robin(run, orders: str, data_dir: Path) -> None:
    assert run("produce", orders, "-p", "2", input="x\ny\nz\n").exit_code == 0
    assert run("consume", orders, "--from-beginning", "--print-offsets").stdout == "2:0\tx\n2:1\ty\n2:2\tz\n"
    result = run("produce", orders, input="".join(f"{i}\n" for i in range(9)))
    assert result.exit_code == 0
    counts = [sum(n for n, _ in _batches(data_dir, orders, p)) for p in range(3)]
    assert counts == [3, 3, 6]  # 3 each, plus partition 2's earlier three


def test_lines_are_batched(run, data_dir: Path) -> None:
    run("topics", "create", "big")
    result = run("produce", "big", input="".join(f"line {i}\n" for i in range(2500)))
    assert result.stderr == "produced 2500 records in 3 batches to big (partition 0: 2500)\n"
    assert [n for n, _ in _batches(data_dir, "big", 0)] == [1000, 1000, 500]
    small = run("produce", "big", "--batch-size", "2", input="a\nb\nc\n")
    assert small.stderr.startswith("produced 3 records in 2 batches")


def test_batches_stay_under_max_message_bytes(run, data_dir: Path) -> None:
    run("topics", "create", "small", "--config", "max.message.bytes=2000")
    lines = "".join(f"{i:03d}" + "x" * 300 + "\n" for i in range(20))
    assert run("produce", "small", input=lines).exit_code == 0
    with LogManager(data_dir, background=False) as log:
        data = log.partition("small", 0).read(0, 1 << 20)
        sizes = []
        offset = 0
        while offset < log.partition("small", 0).high_watermark:
            chunk = log.partition("small", 0).read(offset, 1)
            _pos, header = next(iter_batches(chunk))
            sizes.append(header.size)
            offset = header.next_offset
    assert len(sizes) > 3 and max(sizes) <= 2000
    assert sum(len(r) for _h, r in decode_batches(data)) >= 1
    too_big = run("produce", "small", input="y" * 5000 + "\n")
    assert too_big.exit_code == 2 and "max.message.bytes" in too_big.stderr


def test_headers_compression_and_line_ends(run, orders: str, data_dir: Path) -> None:
    result = run(
        "produce", orders, "-p", "0", "-H", "source=cli", "-H", "empty=", "--compression", "gzip",
        input=b"one\r\ntwo\n\nlast-without-newline",
    )
    assert result.exit_code == 0, result.output
    ((count, records),) = _batches(data_dir, orders, 0)
    assert count == 4
    assert [r.value for r in records] == [b"one", b"two", b"", b"last-without-newline"]  # type: ignore[attr-defined]
    assert all(r.headers == [("source", b"cli"), ("empty", b"")] for r in records)  # type: ignore[attr-defined]
    assert all(r.key is None for r in records)  # type: ignore[attr-defined]


def test_missing_separator_is_an_error_after_the_lines_before_it(run, orders: str, one_line_error) -> None:
    result = run("produce", orders, "-K", ":", input="a:1\nb:2\nno separator\nc:3\n")
    assert result.exit_code == 2
    one_line_error(result.stderr, "line 3 has no key separator ':'", "2 records before it were written")
    assert sorted(run("consume", orders, "--from-beginning").stdout.split()) == ["1", "2"]


def test_binary_and_null_values(run, orders: str, data_dir: Path) -> None:
    with LogManager(data_dir, background=False) as log:
        log.partition(orders, 0).append_records(
            [NewRecord(b"k\xff", b"caf\xc3\xa9 \xff\xfe", 1), NewRecord(None, None, 2)]
        )
    result = run("consume", orders, "--from-beginning", "--print-keys")
    assert result.stdout == "k\\xff\tcafé \\xff\\xfe\nnull\tnull\n"


def test_max_partition_and_offset(run, orders: str) -> None:
    run("produce", orders, "-p", "1", input="".join(f"v{i}\n" for i in range(10)))
    assert run("consume", orders, "--from-beginning", "--max", "3").stdout == "v0\nv1\nv2\n"
    assert run("consume", orders, "-p", "1", "-o", "7").stdout == "v7\nv8\nv9\n"
    assert run("consume", orders, "-p", "1", "-o", "earliest", "-n", "1").stdout == "v0\n"
    assert run("consume", orders, "-p", "1", "-o", "latest").stdout == ""
    assert run("consume", orders, "-p", "0", "--from-beginning").stdout == ""


def test_group_commits_and_resumes(run, orders: str, data_dir: Path) -> None:
    run("produce", orders, "-K", ":", input=KEYED)
    first = run("consume", orders, "--group", "billing", "--from-beginning", "--max", "15")
    assert first.exit_code == 0
    assert len(first.stdout.splitlines()) == 15
    assert first.stderr.startswith("consumed 15 records from orders; group billing is at ")
    second = run("consume", orders, "--group", "billing", "--from-beginning")
    assert len(second.stdout.splitlines()) == 25
    values = first.stdout.splitlines() + second.stdout.splitlines()
    assert sorted(values) == sorted(f"event {i}" for i in range(40))  # each record exactly once
    assert run("consume", orders, "--group", "billing", "--from-beginning").stdout == ""

    run("produce", orders, "-K", ":", input="newcomer:late\n")
    assert run("consume", orders, "--group", "billing").stdout == "late\n"
    with LogManager(data_dir, background=False) as log:
        committed = log.offsets.fetch("billing")
        his = {p: log.partition(orders, p).high_watermark for p in range(3)}
    assert committed == {TopicPartition(orders, p): (his[p], "") for p in range(3)}


def test_new_group_without_from_beginning_commits_the_end(run, orders: str) -> None:
    # Like Kafka's auto.offset.reset=latest: the group starts at the end, and stays there.
    run("produce", orders, input="old\n")
    assert run("consume", orders, "--group", "g").stdout == ""
    run("produce", orders, input="new\n")
    assert run("consume", orders, "--group", "g", "--from-beginning").stdout == "new\n"


def test_consume_errors(run, orders: str, one_line_error) -> None:
    run("produce", orders, "-p", "0", input="a\n")
    cases = [
        (("consume", orders, "--offset", "0"), "--offset needs --partition"),
        (("consume", orders, "-p", "0", "-o", "0", "--from-beginning"), "exclude each other"),
        (("consume", orders, "-p", "0", "-o", "5"), "offset 5 is out of range [0, 1]"),
        (("consume", orders, "-p", "0", "-o", "soon"), "'soon' is not an offset"),
        (("consume", orders, "-p", "3"), "partitions 0 to 2"),
        (("consume", orders, "--max", "0"), "--max"),
        (("consume", orders, "--group", ""), "--group"),
        (("consume", "nope"), "unknown topic 'nope'"),
        (("produce", "nope"), "unknown topic 'nope'"),
        (("produce", orders, "-p", "9"), "partitions 0 to 2"),
        (("produce", orders, "-K", ""), "--key-separator"),
        (("produce", orders, "-H", "novalue"), "expected KEY=VALUE"),
        (("produce", orders, "--compression", "brotli"), "--compression"),
        (("produce", "__consumer_offsets"), "internal"),
    ]
    for args, fragment in cases:
        result = run(*args, input="x\n")
        assert result.exit_code == 2, (args, result.output)
        one_line_error(result.stderr, fragment)


def test_read_line_chunks_without_a_file_descriptor() -> None:
    import io

    stream = io.BytesIO(b"a\nb\r\nc\nd")
    assert list(read_line_chunks(stream, 3)) == [[b"a", b"b", b"c"], [b"d"]]
    assert list(read_line_chunks(io.BytesIO(b""), 3)) == []


def test_consume_across_compacted_gaps_and_control_batches(run, data_dir: Path) -> None:
    from streamkit.log.records import build_batch, control_batch

    config = {"segment.bytes": "400", "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0"}
    with LogManager(data_dir, background=False) as log:
        log.create_topic("latest", 1, config)
        part = log.partition("latest", 0)
        for i in range(30):
            part.append_records([NewRecord(b"k%d" % (i % 3), b"v%d" % i, 1000 + i)])
        part.append(build_batch([NewRecord(b"t", b"in-txn", 2000)], producer_id=3, producer_epoch=0, base_sequence=0, transactional=True))
        part.append(control_batch(commit=True, producer_id=3, producer_epoch=0, timestamp=2001))
        assert log.run_upkeep(force_compaction=True).segments_compacted > 0
        end = part.high_watermark
    result = run("consume", "latest", "--from-beginning", "--group", "g", "--print-keys")
    values = result.stdout.splitlines()
    assert len(values) < 30 and values[-1] == "t\tin-txn"  # the commit marker is not a record
    for key in ("k0", "k1", "k2"):  # the latest value of each key survives compaction
        assert f"{key}\tv{27 + int(key[1])}" in values
    assert result.stderr.endswith(f"group g is at 0:{end}\n")
    assert run("consume", "latest", "--group", "g").stdout == ""
