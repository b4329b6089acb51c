"""The command as a real process: exit codes, one-line errors, pipes and signals."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from streamkit.log.manager import LogManager
from tests.support.processes import interruptible

STREAMKIT = Path(sys.executable).parent / "streamkit"  # the console script of this venv


def _read_lines(proc: subprocess.Popen[bytes], n: int, timeout_s: float = 20.0) -> list[bytes]:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout_s
    while buf.count(b"\n") < n:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out with {buf!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"stdout closed with {buf!r}"
            buf += chunk
    return buf.splitlines()


def _read_stderr_line(proc: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """The first stderr line of ``proc``, read byte by byte so nothing after it is consumed."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    line = b""
    deadline = time.monotonic() + timeout_s
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"no line on stderr within {timeout_s} s: {line!r}"
        if select.select([fd], [], [], left)[0]:
            byte = os.read(fd, 1)
            assert byte, f"stderr closed after {line!r} (exit {proc.poll()})"
            line += byte
    return line


def test_help_and_version(run_process) -> None:
    result = run_process("--help", module=True)
    assert result.returncode == 0
    assert result.stdout.startswith(b"Usage: streamkit [OPTIONS] COMMAND [ARGS]...")
    for command in (b"topics", b"produce", b"consume", b"log", b"broker", b"worker", b"agents", b"send"):
        assert command in result.stdout
    version = run_process("--version")
    assert version.returncode == 0 and b"0.1.0" in version.stdout


def test_errors_are_one_line_with_exit_code_2(run_process, tmp_path: Path, one_line_error) -> None:
    data = tmp_path / "d"
    assert run_process("topics", "create", "t", data_dir=data).returncode == 0
    for module, args, fragment in [
        (True, ("topics", "describe", "nope"), "unknown topic 'nope'"),
        (False, ("topics", "create"), "Missing argument 'NAME'"),
        (False, ("topics", "create", "x", "--partitions", "abc"), "'abc' is not a valid integer"),
        (True, ("consume", "t", "--no-such-flag"), "--no-such-flag"),
        (False, ("produce", "t", "--header", "oops"), "expected KEY=VALUE"),
    ]:
        result = run_process(*args, data_dir=data, module=module)
        assert result.returncode == 2, (args, result)
        assert result.stdout == b""
        one_line_error(result.stderr, fragment)

    with LogManager(data, background=False):
        locked = run_process("produce", "t", data_dir=data, input=b"x\n")
    assert locked.returncode == 2
    one_line_error(locked.stderr, "is in use by another process", f"pid {os.getpid()}")


def _in_dir(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "STREAMKIT_DATA_DIR"}
    return subprocess.run([str(STREAMKIT), *args], cwd=cwd, env=env, capture_output=True, timeout=60)


def test_an_app_module_that_fails_to_import_is_one_line_naming_file_and_line(
    tmp_path: Path, one_line_error
) -> None:
    (tmp_path / "broken_syntax.py").write_text("import streamkit as sk\n\ndef f(:\n    pass\n")
    (tmp_path / "broken_run.py").write_text("import streamkit as sk\n\napp = sk.App('x')\nraise RuntimeError('no config')\n")
    for command in (("worker",), ("agents",), ("send", "t", "1")):
        for module, fragments in [
            ("broken_syntax", (f"{tmp_path / 'broken_syntax.py'}, line 3", "invalid syntax")),
            ("broken_run", (f"{tmp_path / 'broken_run.py'}, line 4", "RuntimeError: no config")),
        ]:
            result = _in_dir(tmp_path, command[0], "-A", f"{module}:app", *command[1:])
            assert result.returncode == 2, (command, module, result)
            one_line_error(result.stderr, f"cannot import {module!r}", *fragments)


def test_send_refuses_a_topic_the_app_does_not_declare(tmp_path: Path, one_line_error) -> None:
    data = tmp_path / "data"
    (tmp_path / "small_app.py").write_text(
        "import streamkit as sk\n"
        f"app = sk.App('small', broker='file://{data}')\n"
        "orders = app.topic('orders', partitions=1)\n"
    )
    refused = _in_dir(tmp_path, "send", "-A", "small_app:app", "UNDECLARED", "1")
    assert refused.returncode == 2, refused
    one_line_error(refused.stderr, "declares no topic 'UNDECLARED'", "orders")
    sent = _in_dir(tmp_path, "send", "-A", "small_app:app", "orders", "1")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == b"orders-0@0\n"
    with LogManager(data, background=False) as log:
        assert log.list_topics() == ["orders"]


def test_piped_produce_and_consume(run_process, tmp_path: Path) -> None:
    data = tmp_path / "d"
    run_process("topics", "create", "nums", "--partitions", "2", data_dir=data)
    lines = b"".join(b"%d:%d\n" % (i % 5, i) for i in range(2500))
    produced = run_process("produce", "nums", "-K", ":", data_dir=data, input=lines)
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.startswith(b"produced 2500 records in 6 batches to nums (partitions 0: ")
    consumed = run_process("consume", "nums", "--from-beginning", data_dir=data)
    assert consumed.returncode == 0
    assert sorted(map(int, consumed.stdout.split())) == list(range(2500))
    verified = run_process("log", "verify", str(data))
    assert verified.returncode == 0, verified.stdout


def test_verify_exit_code_on_damage(run_process, tmp_path: Path) -> None:
    data = tmp_path / "d"
    run_process("topics", "create", "t", data_dir=data)
    run_process("produce", "t", data_dir=data, input=b"hello\n")
    segment = data / "t-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    raw[-2] ^= 0xFF
    segment.write_bytes(bytes(raw))
    result = run_process("log", "verify", str(data))
    assert result.returncode == 1
    assert b"CRC mismatch" in result.stdout
    # Reading the damaged batch is a failure of the log, not of the arguments: exit 1, one line.
    consumed = run_process("consume", "t", "--from-beginning", data_dir=data)
    assert consumed.returncode == 1
    assert consumed.stderr.count(b"\n") == 1 and b"CRC mismatch" in consumed.stderr


def test_follow_until_interrupted_commits_the_group(run_process, tmp_path: Path) -> None:
    data = tmp_path / "d"
    run_process("topics", "create", "live", "--partitions", "2", data_dir=data)
    env = {**os.environ, "STREAMKIT_DATA_DIR": str(data)}
    args = [str(STREAMKIT), "consume", "live", "-f", "-g", "watchers", "--from-beginning", "--print-offsets"]
    args += ["--poll-interval-ms", "50"]  # --from-beginning: no race with the follower's start
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=interruptible
    )
    try:
        seen: list[bytes] = []
        for i in range(3):
            # Once the follower runs, each produce takes the lock between two of its polls.
            result = run_process("produce", "live", "-p", str(i % 2), data_dir=data, input=b"m%d\n" % i)
            assert result.returncode == 0, result.stderr
            seen += _read_lines(proc, 1)
        assert seen == [b"0:0\tm0", b"1:0\tm1", b"0:1\tm2"]
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert b"Traceback" not in err
    assert b"consumed 3 records from live; group watchers is at 0:2, 1:1" in err
    with LogManager(data, background=False) as log:
        assert {tp.partition: o for tp, (o, _m) in log.offsets.fetch("watchers").items()} == {0: 2, 1: 1}
        assert log.clean_shutdown  # the follower closed the directory on its way out


def test_an_interrupt_at_any_moment_of_a_follow_closes_the_directory(run_process, tmp_path: Path) -> None:
    """A follower opens and closes the directory on every poll; Ctrl-C or SIGTERM landing inside
    an open or a close must still end with the group committed and the directory shut down
    cleanly (an interrupt between taking the lock and recording it left the process locked out
    of its own directory: exit 2). Signals at spread-out moments, with 10 ms polls so many land
    inside an open or a close."""
    data = tmp_path / "d"
    run_process("topics", "create", "live", data_dir=data)
    run_process("produce", "live", data_dir=data, input=b"a\nb\n")
    env = {**os.environ, "STREAMKIT_DATA_DIR": str(data)}
    for attempt in range(12):
        group = f"g{attempt}"  # a group of its own: each follower reads both records
        args = [str(STREAMKIT), "consume", "live", "-f", "-g", group, "--from-beginning", "--poll-interval-ms", "10"]
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, preexec_fn=interruptible
        )
        try:
            assert _read_lines(proc, 2) == [b"a", b"b"]
            time.sleep(0.013 * attempt)  # spread the signal over the poll cycle
            sig = signal.SIGINT if attempt % 2 == 0 else signal.SIGTERM
            proc.send_signal(sig)
            _out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == (130 if sig == signal.SIGINT else 143), err.decode()
        assert b"Traceback" not in err, err.decode()
        with LogManager(data, background=False) as log:
            assert {tp.partition: o for tp, (o, _m) in log.offsets.fetch(group).items()} == {0: 2}
            assert log.clean_shutdown, f"attempt {attempt}: the follower left the directory unclean"


def test_sigterm_closes_cleanly(tmp_path: Path, run_process) -> None:
    data = tmp_path / "d"
    run_process("topics", "create", "live", data_dir=data)
    env = {**os.environ, "STREAMKIT_DATA_DIR": str(data)}
    proc = subprocess.Popen(
        [str(STREAMKIT), "consume", "live", "-f", "--poll-interval-ms", "50"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stderr is not None
        # SIGTERM once the follower says it runs: earlier it would race the interpreter's start.
        ready = _read_stderr_line(proc, timeout_s=30)
        assert ready == b"following live (partitions 0); Ctrl-C to stop\n", ready
        proc.send_signal(signal.SIGTERM)
        _out, rest = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = ready + rest
    assert proc.returncode == 143, err
    assert b"Traceback" not in err


def test_closed_stdout_is_quiet(run_process, tmp_path: Path) -> None:
    data = tmp_path / "d"
    run_process("topics", "create", "many", data_dir=data)
    padding = b"x" * 100  # several fetches of output, so writes go on after the reader left
    run_process("produce", "many", data_dir=data, input=b"".join(b"value %d %s\n" % (i, padding) for i in range(30000)))
    env = {**os.environ, "STREAMKIT_DATA_DIR": str(data)}
    proc = subprocess.Popen(
        [str(STREAMKIT), "consume", "many", "--from-beginning"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"value 0 x")
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read()
    proc.wait(timeout=20)
    assert proc.returncode == 1
    assert b"Traceback" not in err and b"Exception" not in err


def test_backfill_without_the_spark_extra_is_one_line(tmp_path: Path, one_line_error) -> None:
    """Where the spark extra is not installed, ``streamkit backfill`` says so in one line (not
    pyarrow's ModuleNotFoundError traceback). The extra is made missing here the way Python
    knows: None in sys.modules makes importing it fail as for a module that is not there."""
    (tmp_path / "small_app.py").write_text(
        f"import streamkit as sk\napp = sk.App('small', broker='file://{tmp_path / 'data'}')\n"
    )
    without_spark = (
        "import sys; sys.modules.update(dict.fromkeys(('pyspark', 'pyarrow'))); "
        "from streamkit.cli import main; main()"
    )
    env = {k: v for k, v in os.environ.items() if k != "STREAMKIT_DATA_DIR"}
    result = subprocess.run(
        [sys.executable, "-c", without_spark, "backfill", "-A", "small_app:app", "--table", "counts"],
        cwd=tmp_path, env=env, capture_output=True, timeout=60,
    )
    assert result.returncode == 1, result
    one_line_error(result.stderr, "streamkit backfill needs the spark extra", "pip install 'streamkit[spark]'")
