"""``streamkit tables``: through a running worker, then from the state directory it left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STREAMKIT = str(Path(sys.executable).parent / "streamkit")


def run(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([STREAMKIT, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_tables_get_scan_list_live_and_from_the_state_directory(tmp_path: Path) -> None:
    env = {**os.environ, "STREAMKIT_BROKER": f"file://{tmp_path / 'log'}", "PYTHONPATH": str(ROOT)}
    state = tmp_path / "state"
    app = ("-A", "apps.wordcount:app")
    worker = subprocess.Popen(
        [STREAMKIT, "worker", *app, "--web-port", "0", "--state-dir", str(state), "--progress-interval", "0"],
        env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert worker.stderr is not None
        for line in worker.stderr:
            if re.search(r"web: http://127\.0\.0\.1:\d+", line):
                break
        for text in ["the cat and the hat", "the end"]:
            sent = run("send", *app, "lines", text, env=env, cwd=tmp_path)
            assert sent.returncode == 0, sent.stderr
        common = ("--state-dir", str(state))
        got = None
        for _ in range(200):  # the worker counts and commits (every second) in its own time
            got = run("tables", "get", *app, "word_counts", "the", *common, env=env, cwd=tmp_path)
            if got.returncode == 0 and json.loads(got.stdout)["value"] == 3:
                break
            time.sleep(0.1)
        assert got is not None and got.returncode == 0 and json.loads(got.stdout) == {"key": "the", "value": 3}, got
        missing = run("tables", "get", *app, "word_counts", "dog", *common, env=env, cwd=tmp_path)
        assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "not in table" in missing.stderr
        unknown = run("tables", "get", *app, "nope", "the", *common, env=env, cwd=tmp_path)
        assert unknown.returncode == 1 and "no table named 'nope'" in unknown.stderr
        listed = run("tables", "list", *app, *common, env=env, cwd=tmp_path)
        assert listed.returncode == 0 and listed.stdout.startswith("word_counts\t"), listed
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    assert not (state / ".web").exists()  # the stopped worker no longer advertises itself
    # No worker now: the state directory answers, read-only, as of the last commit.
    offline = run("tables", "get", *app, "word_counts", "hat", "--state-dir", str(state), env=env, cwd=tmp_path)
    assert offline.returncode == 0 and json.loads(offline.stdout) == {"key": "hat", "value": 1}, offline
    scanned = run("tables", "scan", *app, "word_counts", "--prefix", "th", "--state-dir", str(state), env=env, cwd=tmp_path)
    assert scanned.returncode == 0
    assert sorted(json.loads(line)["key"] for line in scanned.stdout.splitlines()) == ["the"]
    bad = run("tables", "scan", *app, "word_counts", "--limit", "0", "--state-dir", str(state), env=env, cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("streamkit: error:") and bad.stderr.count("\n") == 1


def test_tables_get_finds_an_untyped_tables_string_key_as_the_scan_lists_it(tmp_path: Path) -> None:
    """``streamkit tables get ... 0`` finds the key "0" that ``tables scan`` lists (Faust's
    tabletest counts under ``str(partition)``), through the worker and from the state directory;
    when both 5 and "5" are keys, ``5`` is the integer (JSON first)."""
    env = {**os.environ, "STREAMKIT_BROKER": f"file://{tmp_path / 'log'}", "PYTHONPATH": str(ROOT)}
    state = tmp_path / "state"
    app = ("-A", "tests.tables.untyped_app:app")
    common = ("--state-dir", str(state))
    worker = subprocess.Popen(
        [STREAMKIT, "worker", *app, "--web-port", "0", *common, "--progress-interval", "0"],
        env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert worker.stderr is not None
        for line in worker.stderr:
            if re.search(r"web: http://127\.0\.0\.1:\d+", line):
                break
        for key, value in [('"0"', "41"), ('"5"', "3"), ("5", "5")]:
            sent = run("send", *app, "events", value, "--key", key, env=env, cwd=tmp_path)
            assert sent.returncode == 0, sent.stderr
        got = None
        for _ in range(200):  # the worker adds and commits in its own time
            got = run("tables", "get", *app, "totals", "5", *common, env=env, cwd=tmp_path)
            if got.returncode == 0:
                break
            time.sleep(0.1)
        assert got is not None and json.loads(got.stdout) == {"key": 5, "value": 5}, got
        live = run("tables", "get", *app, "totals", "0", *common, env=env, cwd=tmp_path)
        assert live.returncode == 0 and json.loads(live.stdout) == {"key": "0", "value": 41}, live
        scanned = run("tables", "scan", *app, "totals", *common, env=env, cwd=tmp_path)
        assert {"key": "0", "value": 41} in [json.loads(line) for line in scanned.stdout.splitlines()], scanned
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    for text, key, value in [("0", "0", 41), ("5", 5, 5), ('"5"', "5", 3)]:
        offline = run("tables", "get", *app, "totals", text, *common, env=env, cwd=tmp_path)
        assert offline.returncode == 0 and json.loads(offline.stdout) == {"key": key, "value": value}, offline
    missing = run("tables", "get", *app, "totals", "6", *common, env=env, cwd=tmp_path)
    assert missing.returncode == 1 and missing.stderr == "streamkit: error: key '6' is not in table 'totals'\n"
