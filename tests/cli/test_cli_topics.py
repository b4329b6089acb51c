"""``streamkit topics``: create, list, describe, delete, and their one-line errors."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord
from tests.cli.conftest import STREAMKIT


def test_create_list_describe_delete(run, data_dir: Path) -> None:
    result = run("topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000")
    assert result.exit_code == 0, result.output
    assert result.stdout == "created topic orders with 3 partitions\n"
    assert run("topics", "create", "audit").stdout == "created topic audit with 1 partition\n"

    assert run("topics", "list").stdout == "audit\norders\n"
    assert run("topics", "list", "--internal").stdout == "__consumer_offsets\naudit\norders\n"

    with LogManager(data_dir, background=False) as log:
        log.partition("orders", 1).append_records([NewRecord(b"k", b"v", 1), NewRecord(None, b"w", 2)])
    described = run("topics", "describe", "orders")
    assert described.exit_code == 0
    lines = described.stdout.splitlines()
    assert lines[0].startswith("Topic: orders  Partitions: 3  Internal: no  Offsets in the log: 2")
    assert lines[2].split() == ["Partition", "LogStartOffset", "HighWatermark", "Size", "Segments"]
    assert lines[3].split() == ["0", "0", "0", "0", "1"]
    row = lines[4].split()
    assert row[:3] == ["1", "0", "2"] and int(row[3]) > 61 and row[4] == "1"
    assert "  retention.ms = 60000" in lines
    assert "  cleanup.policy = delete" in lines

    deleted = run("topics", "delete", "orders")
    assert deleted.exit_code == 0 and deleted.stdout == "deleted topic orders\n"
    assert run("topics", "list").stdout == "audit\n"


def test_create_if_not_exists(run) -> None:
    assert run("topics", "create", "t").exit_code == 0
    again = run("topics", "create", "t", "--if-not-exists", "--partitions", "4")
    assert again.exit_code == 0 and again.stdout == ""


def test_errors_are_one_line_with_exit_code_2(run, data_dir: Path, one_line_error) -> None:
    missing_dir = run("topics", "list")
    assert missing_dir.exit_code == 2
    one_line_error(missing_dir.stderr, "no data directory at", str(data_dir))
    assert not data_dir.exists()  # only `topics create` makes a data directory

    assert run("topics", "create", "t").exit_code == 0
    cases = [
        (("topics", "create", "t"), "already exists"),
        (("topics", "create", "x", "--config", "no.such.config=1"), "Unknown topic config name: no.such.config"),
        (("topics", "create", "x", "--config", "retention.ms=soon"), "Not a number of type LONG"),
        (("topics", "create", "x", "--config", "retention.ms"), "expected KEY=VALUE"),
        (("topics", "create", "x", "--partitions", "0"), "--partitions"),
        (("topics", "create", "bad/name"), "invalid topic name"),
        (("topics", "create", "__mine"), "reserved"),
        (("topics", "create"), "Missing argument 'NAME'"),
        (("topics", "describe", "nope"), "unknown topic 'nope'"),
        (("topics", "delete", "nope"), "unknown topic 'nope'"),
        (("topics", "delete", "__consumer_offsets"), "cannot be deleted"),
        (("topics", "frobnicate"), "No such command 'frobnicate'"),
        (("topics", "list", "--bogus"), "No such option"),
    ]
    for args, fragment in cases:
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stdout == "", args
        one_line_error(result.stderr, fragment)


def test_locked_data_dir(run, data_dir: Path, one_line_error) -> None:
    assert run("topics", "create", "t").exit_code == 0
    with LogManager(data_dir, background=False):
        result = run("topics", "list")
    assert result.exit_code == 2
    one_line_error(result.stderr, f"data directory {data_dir} is ", "pid")  # the process tests check "another process"


def test_data_dir_option_and_help(run, tmp_path: Path) -> None:
    other = tmp_path / "other"
    assert run("topics", "create", "x", "--data-dir", str(other)).exit_code == 0
    assert (other / "x-0").is_dir()
    assert run("topics", "list", "--data-dir", str(other)).stdout == "x\n"

    help_ = run("topics", "create", "--help")
    assert help_.exit_code == 0
    assert "Usage: streamkit topics create [OPTIONS] NAME" in help_.stdout
    assert "--data-dir" in help_.stdout
    assert run("--help").exit_code == 0


def _nofile_1024() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


def test_thousands_of_partitions_under_ulimit_1024(data_dir: Path) -> None:
    # Each command is its own process with at most 1,024 open files (`ulimit -n 1024`).
    def streamkit(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(STREAMKIT), *args, "--data-dir", str(data_dir)],
            capture_output=True,
            preexec_fn=_nofile_1024,
            timeout=300,
        )

    created = streamkit("topics", "create", "m", "-p", "3000")
    assert created.returncode == 0, created.stderr
    assert created.stdout == b"created topic m with 3000 partitions\n"
    listed = streamkit("topics", "list")
    assert listed.returncode == 0 and listed.stdout == b"m\n", listed.stderr
    described = streamkit("topics", "describe", "m")
    assert described.returncode == 0, described.stderr
    assert described.stdout.decode().splitlines()[0].startswith("Topic: m  Partitions: 3000 ")
    deleted = streamkit("topics", "delete", "m")
    assert deleted.returncode == 0, deleted.stderr
    assert streamkit("topics", "list").stdout == b""
    assert not [p for p in data_dir.iterdir() if p.name.startswith("m-")]


def test_a_corrupt_topic_metadata_file_is_one_warning_and_the_rest_still_lists(run, data_dir: Path) -> None:
    for name in ("a", "b", "c"):
        assert run("topics", "create", name).exit_code == 0
    bad = data_dir / ".meta" / "topics" / "b.json"
    bad.write_bytes(b"\x00not json")
    listed = run("topics", "list")
    assert listed.exit_code == 0
    assert listed.stdout == "a\nc\n"
    [line] = listed.stderr.splitlines()
    assert line.startswith("streamkit: warning: ") and str(bad) in line
    assert run("topics", "describe", "c").exit_code == 0


def test_names_and_configs_are_checked_before_anything_is_made(run, data_dir: Path, one_line_error) -> None:
    cases = [
        (("topics", "create", "n" * 250), "invalid topic name"),
        (("topics", "create", "x", "--config", "max.message.bytes=0"), "max.message.bytes"),
        (("topics", "create", "x", "--config", "max.message.bytes=99999999999999999999"), "max.message.bytes"),
    ]
    for args, fragment in cases:
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        one_line_error(result.stderr, fragment)
        assert not data_dir.exists(), args
    longest = "n" * 249
    created = run("topics", "create", longest, "-p", "2")
    assert created.exit_code == 0, created.output
    assert run("produce", longest, input="v\n").exit_code == 0
    assert run("topics", "delete", longest).exit_code == 0
    assert run("topics", "list").stdout == ""
