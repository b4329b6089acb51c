"""faust-streaming's own example apps, run on streamkit with only their imports and broker URL
changed (issue 14's last must-show; docs/faust.md lists them with their status).

The examples are not in this repository: the test takes them from faust-streaming's source
distribution on PyPI at test time (the version ``benchmarks/requirements-faust.txt`` pins),
fetched once into ``benchmarks/.data/faust-sdist`` (git-ignored). The sdist is a tarball and
nothing of it is built: its address and sha256 come from the package index's JSON API (PEP 691,
``PIP_INDEX_URL`` or PyPI), the download is checked against that hash and bounded in time, and
only ``examples/`` is unpacked. (``pip download --no-binary :all:`` would prepare the sdist's
metadata, building faust's build dependencies, Cython among them, from source: longer than a
test may take on a machine with nothing cached.) When they cannot be had, the tests fail with
one line saying why. Each example is rewritten as
a Faust user moving over would rewrite it: ``import faust`` becomes ``import streamkit as
faust``, ``from faust... import`` becomes ``from streamkit... import``, and its broker URL
names the test's ``streamkit broker`` (an example that names none, relying on Faust's default
``kafka://localhost:9092``, gets ``app.conf.broker = ...`` before it runs). Then it runs as its
docstring says (``python example.py worker -l info``, its commands), briefly, and the test
watches for what Faust's run of it prints, sends or serves.

Examples that need a part of the Faust surface streamkit does not offer yet are skipped with
the missing part named (probed, not assumed, so they run as soon as it lands).
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import streamkit as faust

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "benchmarks" / "requirements-faust.txt"
SDIST_DIR = ROOT / "benchmarks" / ".data" / "faust-sdist"
WORKER_ARGS = ("worker", "-l", "info", "--web-port", "0", "--progress-interval", "0")


def _faust_version() -> str:
    match = re.search(r"^faust-streaming==(\S+)$", REQUIREMENTS.read_text(), re.MULTILINE)
    assert match, "benchmarks/requirements-faust.txt pins faust-streaming"
    return match.group(1)


SDIST_TIMEOUT_S = 120.0  # the whole fetch, index page and tarball (about 1 MB)


def _fetch_examples(version: str, target: Path) -> None:
    """faust-streaming ``version``'s sdist from the package index, its ``examples/`` unpacked
    into ``target`` (whole or not at all). Raises OSError or ValueError saying what failed."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    page = f"{index}/faust-streaming/"
    filename = f"faust_streaming-{version}.tar.gz"
    deadline = time.monotonic() + SDIST_TIMEOUT_S

    def read(url: str, accept: str = "*/*") -> bytes:
        request = urllib.request.Request(url, headers={"Accept": accept})
        chunks: list[bytes] = []
        with urllib.request.urlopen(request, timeout=30) as response:
            while chunk := response.read(1 << 16):
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{url} took longer than {SDIST_TIMEOUT_S:.0f} s")
        return b"".join(chunks)

    listing = json.loads(read(page, "application/vnd.pypi.simple.v1+json"))
    entry = next((f for f in listing.get("files", []) if f.get("filename") == filename), None)
    if entry is None:
        raise ValueError(f"{page} lists no {filename}")
    data = read(urllib.parse.urljoin(page, entry["url"]))
    expected = entry.get("hashes", {}).get("sha256")
    if expected is None or hashlib.sha256(data).hexdigest() != expected:
        raise ValueError(f"{filename} from {page} does not match the index's sha256 {expected}")
    SDIST_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=SDIST_DIR) as tmp, tarfile.open(fileobj=io.BytesIO(data)) as tar:
        prefix = f"faust_streaming-{version}/examples/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        if not members:
            raise ValueError(f"no examples/ in {filename}")
        tar.extractall(tmp, members=members, filter="data")
        target.parent.mkdir(parents=True, exist_ok=True)
        (Path(tmp) / prefix).rename(target)


def _examples(version: str) -> Path:
    """The ``examples/`` folder of faust-streaming ``version``: cached, else fetched, else the
    test fails with one line saying why."""
    target = SDIST_DIR / f"faust_streaming-{version}" / "examples"
    if not target.is_dir():
        try:
            _fetch_examples(version, target)
        except (OSError, ValueError, KeyError, tarfile.TarError) as exc:
            pytest.fail(f"cannot get faust-streaming {version}'s examples from its sdist: {exc}", pytrace=False)
    return target


@pytest.fixture(scope="session")
def examples() -> Path:
    """faust-streaming's ``examples/`` folder, from its sdist (fetched once)."""
    return _examples(_faust_version())


def rewrite(source: str, broker_url: str) -> str:
    """The example as a Faust user moving to streamkit rewrites it: imports and broker URL."""
    text = re.sub(r"^(\s*)import faust\s*$", r"\1import streamkit as faust", source, flags=re.MULTILINE)
    text = re.sub(r"^(\s*)from faust((?:\.\w+)*) import", r"\1from streamkit\2 import", text, flags=re.MULTILINE)
    text = re.sub(r"(?:aio)?kafka://[^'\"]*", broker_url, text)
    if "broker=" not in text:  # Faust's default broker, kafka://localhost:9092
        setting = f"app.conf.broker = {broker_url!r}\n"
        main = re.search(r"^if __name__ == .__main__.:", text, flags=re.MULTILINE)
        text = text[: main.start()] + setting + "\n" + text[main.start():] if main else text + "\n" + setting
    return text


# -- examples that need parts other work is landing ------------------------------------------


def _declares(ex: Example, *needs: tuple[type, str]) -> None:
    """Skip an example that needs parts of the Faust surface other work is landing (channels,
    RPC, Faust's windowed tables: docs/faust.md names them) when importing it, which runs its
    declarations, fails here (the error is the skip's reason), or when a class lacks a name
    it calls only as it runs (``needs``: (class, attribute) pairs). Once they land, it runs.
    The examples that need nothing more are never probed: a failure of theirs is a failure."""
    for cls, attribute in needs:
        if not hasattr(cls, attribute):
            pytest.skip(f"needs {cls.__name__}.{attribute}, not in streamkit yet")
    probe = subprocess.run(
        [sys.executable, "-c", f"import {ex.name}"], cwd=ex.dir, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ex.dir)},
    )
    if probe.returncode != 0:
        error = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"declaring it fails here (needs what is not in streamkit yet): {error}")


# -- running one example ---------------------------------------------------------------------


class Run:
    """One process of an example, its stdout and stderr read line by line as they come."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(cwd), "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 60.0, count: int = 1) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            found = [m for m in (re.search(pattern, line) for line in list(self.lines)) if m]
            if len(found) >= count:
                return found[count - 1]
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"exited {self.proc.returncode} before {pattern!r}:\n" + self.output())
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {timeout} s:\n" + self.output())
            time.sleep(0.05)

    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def stop(self, sig: int | None = signal.SIGTERM, expect: int = 0, timeout: float = 60.0) -> str:
        """Send ``sig`` (None: let it end by itself), wait, check the exit code and that no
        traceback was printed; returns everything it printed."""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self._reader.join(timeout=10)
        text = "\n".join(self.lines)
        assert code == expect, f"exit {code}:\n{self.output()}"
        assert "Traceback" not in text, text
        return text


class Example:
    def __init__(self, examples: Path, relative: str, tmp: Path, broker: Any) -> None:
        self.name = "ex_" + Path(relative).stem
        self.dir = tmp
        self.broker = broker
        self.url = f"kafka://{broker.bootstrap}"
        self.file = tmp / f"{self.name}.py"
        self.file.write_text(rewrite((examples / relative).read_text(), self.url))
        self.runs: list[Run] = []

    def worker(self, *, main: bool = True) -> Run:
        """``python example.py worker -l info`` (or ``streamkit worker -A example:app`` for an
        example without ``app.main()``), serving its pages on a free port."""
        state = ["--state-dir", str(self.dir / "state")]
        if main:
            args = [sys.executable, str(self.file), *WORKER_ARGS, *state]
        else:
            args = [sys.executable, "-m", "streamkit.cli", *WORKER_ARGS, "-A", f"{self.name}:app",
                    "--broker", self.url, *state]
        run = Run(args, self.dir)
        self.runs.append(run)
        return run

    def web_url(self, run: Run) -> str:
        return run.wait_for(r"web: (http://127\.0\.0\.1:\d+)").group(1)

    def command(self, *args: str) -> Run:
        run = Run([sys.executable, str(self.file), *args], self.dir)
        self.runs.append(run)
        return run

    def close(self) -> None:
        for run in self.runs:
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()


@pytest.fixture
def example(examples: Path, tmp_path: Path, broker: Any) -> Iterator[Callable[[str], Example]]:
    made: list[Example] = []

    def make(relative: str) -> Example:
        made.append(Example(examples, relative, tmp_path, broker))
        return made[-1]

    yield make
    for each in made:
        each.close()


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def _until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (urllib.error.URLError, OSError):
            last = None
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


# -- the examples, one test each -----------------------------------------------------------------


def test_the_rewrite_changes_only_imports_and_the_broker() -> None:
    source = "import faust\nfrom faust.cli import option\napp = faust.App('x', broker='kafka://localhost:9092')\n"
    assert rewrite(source, "kafka://127.0.0.1:1") == (
        "import streamkit as faust\nfrom streamkit.cli import option\n"
        "app = faust.App('x', broker='kafka://127.0.0.1:1')\n"
    )
    no_broker = rewrite("import faust\napp = faust.App('x')\nif __name__ == '__main__':\n    app.main()\n", "kafka://h:1")
    assert no_broker.splitlines()[2:4] == ["app.conf.broker = 'kafka://h:1'", ""]


class _Index:
    """A package index on loopback serving one sdist of faust-streaming through the PEP 691 JSON
    API (``sha256`` as given), or answering 500 to every request."""

    def __init__(self, sdist: bytes, *, sha256: str | None = None, failing: bool = False) -> None:
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.requests.append(self.path)
                if failing:
                    self.send_error(500, "index down")
                    return
                if self.path == "/simple/faust-streaming/":
                    digest = sha256 or hashlib.sha256(sdist).hexdigest()
                    files = [{"filename": "faust_streaming-9.9.9.tar.gz", "url": "/files/f.tar.gz",
                              "hashes": {"sha256": digest}}]
                    body = json.dumps({"files": files}).encode()
                else:
                    body = sdist
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.requests: list[str] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Index:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _sdist(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return out.getvalue()


SDIST = _sdist({
    "faust_streaming-9.9.9/examples/hello_world.py": "import faust\n",
    "faust_streaming-9.9.9/examples/windowing/tumbling.py": "import faust\n",
    "faust_streaming-9.9.9/setup.py": "raise SystemExit('never run')\n",
})


def _fetch_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index_url: str) -> str:
    monkeypatch.setenv("PIP_INDEX_URL", index_url)
    monkeypatch.setattr(sys.modules[__name__], "SDIST_DIR", tmp_path / "faust-sdist")
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        _examples("9.9.9")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "faust-sdist" / "faust_streaming-9.9.9").exists()  # nothing half-unpacked
    message = str(failed.value)
    assert len(message.splitlines()) == 1 and message.startswith("cannot get faust-streaming 9.9.9's examples"), message
    return message


def test_the_examples_come_from_the_sdist_without_building_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "SDIST_DIR", tmp_path / "faust-sdist")
    with _Index(SDIST) as index:
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        found = _examples("9.9.9")
        assert _examples("9.9.9") == found  # cached: asked once
    assert index.requests == ["/simple/faust-streaming/", "/files/f.tar.gz"]
    assert found == tmp_path / "faust-sdist" / "faust_streaming-9.9.9" / "examples"
    assert sorted(str(p.relative_to(found)) for p in found.rglob("*.py")) == ["hello_world.py", "windowing/tumbling.py"]
    assert not (found.parent / "setup.py").exists()  # only examples/ is unpacked


def test_examples_that_cannot_be_had_fail_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _Index(SDIST, sha256="0" * 64) as index:
        assert "does not match the index's sha256" in _fetch_fails(tmp_path, monkeypatch, index.url)
    with _Index(SDIST, failing=True) as index:
        assert "HTTP Error 500" in _fetch_fails(tmp_path, monkeypatch, index.url)
    with socket.socket() as closed:  # a loopback port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert "Connection refused" in _fetch_fails(tmp_path, monkeypatch, f"http://127.0.0.1:{port}/simple")


def test_hello_world(example: Callable[[str], Example]) -> None:
    ex = example("hello_world.py")
    worker = ex.worker()
    worker.wait_for(r"^hello 0$", timeout=90)  # its timer sends 100 greetings every 5 s
    worker.wait_for(r"^hello 99$")
    worker.stop()


def test_leader(example: Callable[[str], Example]) -> None:
    ex = example("leader.py")  # no app.main(): Faust runs it with `faust -A examples.leader worker`
    worker = ex.worker(main=False)
    worker.wait_for(r"^PUBLISHING ON LEADER!$", timeout=90)
    worker.wait_for(r"0\.\d+")  # the agent prints the random number the leader's timer sent
    worker.stop()


def test_service(example: Callable[[str], Example]) -> None:
    ex = example("advanced/service.py")
    _declares(ex)
    worker = ex.worker()
    worker.wait_for(r"\[\^MyService\]: STARTED")
    worker.wait_for(r"^Received: 'hello'$", timeout=90)
    text = worker.stop()
    assert "[^MyService]: STOPPED" in text


def test_crontab_tz_unaware(example: Callable[[str], Example]) -> None:
    ex = example("crontab/tz_unaware.py")
    worker = ex.worker()
    # '*/1 * * * *': at the next minute's start, then the agent prints the record sent.
    worker.wait_for(r"^-- We should send a message every minute --$", timeout=90)
    worker.wait_for(r"^record: .*random")
    worker.stop()


def test_word_count(example: Callable[[str], Example]) -> None:
    ex = example("word_count.py")
    _declares(ex)
    worker = ex.worker()
    web = ex.web_url(worker)
    # Its task sends 1000 of each word; the table route answers the page.
    for word in ("the", "quick", "brown", "fox"):
        _until(lambda w=word: _get(f"{web}/count/{w}/") == (200, {w: 1000}), f"{word} counted 1000 times", 120)
    status, body = _get(f"{web}/last/fox/")
    assert status == 200 and body["fox"] == {"the": 1000, "quick": 1000, "brown": 1000, "fox": 1000}
    worker.wait_for(r"\$\$ TALLY \$\$")
    worker.stop()


def test_tabletest(example: Callable[[str], Example]) -> None:
    ex = example("tabletest.py")
    worker = ex.worker()
    web = ex.web_url(worker)
    worker.wait_for(r"\$\$ TALLY - after rebalance \$\$")
    produce = ex.command("produce")  # sends 0, 1, 2, ... to each of 4 partitions, pausing every 100
    produce.wait_for(r"^100$", timeout=60)
    produce.stop(signal.SIGINT, expect=130)  # a command ends cleanly on Ctrl-C
    # Partition j's key str(j) sums the values it read; at least 0 + 1 + ... + 100.
    for partition in range(4):
        _until(lambda p=partition: (_get(f"{web}/count/{p}/")[1].get(str(p)) or 0) >= 5050, f"partition {partition} counted")
    worker.wait_for(r"\$\$ TALLY \$\$", timeout=30)  # its 10 s timer prints the table
    text = worker.stop()
    assert "!!! PREV" not in text  # every partition's values came in order


def test_tableofset(example: Callable[[str], Example]) -> None:
    ex = example("tableofset.py")
    worker = ex.worker()
    worker.wait_for(r"streamkit worker: app 'table-of-sets-windowed-v2'")
    ex.command("joining", "home", "alice").stop(None)
    worker.wait_for(r"^- Alice joined home$", timeout=60)
    worker.wait_for(r"^TABLE CUR: .*alice")
    ex.command("leaving", "home", "alice").stop(None)
    worker.wait_for(r"^- Alice left home$", timeout=60)
    worker.wait_for(r"^TABLE NOW:$", timeout=30)  # its 10 s timer prints the table
    worker.stop()


def test_kubernetes_consumer(example: Callable[[str], Example]) -> None:
    ex = example("kubernetes/consumer/consumer.py")
    worker = ex.worker()
    worker.wait_for(r"streamkit worker: app 'scores'")
    # Its producer is a kafka-python script; any Kafka client writes the same JSON.
    produced = subprocess.run(
        [sys.executable, "-m", "streamkit.cli", "produce", "test", "--bootstrap", ex.broker.bootstrap],
        input='{"index": 1, "value": 7}\n{"index": 2, "value": 3}\n{"index": 3, "value": 1}\n',
        capture_output=True, text=True, timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    worker.wait_for(r"^Total: 3, Partition partition: 1: 2$", timeout=60)
    worker.stop()


def test_withdrawals(example: Callable[[str], Example]) -> None:
    ex = example("withdrawals.py")
    _declares(ex)
    worker = ex.worker()
    web = ex.web_url(worker)
    produce = ex.command("produce", "--max-messages", "50", "--max-latency", "0")
    produce.wait_for(r"^\+SEND 0$")
    produce.stop(None)
    # track_user_withdrawal reads them (track_country_withdrawal reads its own topic, which
    # nothing in the example sends to, on Faust too); none fails.
    def read_all() -> dict[str, Any] | None:
        status: dict[str, Any] = _get(f"{web}/status")[1]
        return status if status["records_in"] >= 50 else None

    assert _until(read_all, "the 50 withdrawals read")["dead_lettered"] == 0
    worker.stop()


def test_isolated_partitions_crashing(example: Callable[[str], Example]) -> None:
    ex = example("advanced/isolated_partitions_crashing.py")
    _declares(ex)
    worker = ex.worker()
    produce = ex.command("produce", "--max-messages", "30", "--max-latency", "0")
    produce.wait_for(r"^\+SEND 0$")
    produce.stop(None)
    worker.wait_for(r"^Progressing: was 0 now 30$", timeout=60)  # its task, looping on app.should_stop
    worker.stop()


def test_rpc(example: Callable[[str], Example]) -> None:
    ex = example("advanced/rpc.py")
    _declares(ex, (faust.Agent, "ask"), (faust.Agent, "join"))
    worker = ex.worker()
    worker.wait_for(r"streamkit worker: app 'RPC99'")
    x100 = ex.command("x100", "3")
    x100.wait_for(r"^3 \* 100 = 300\.0$", timeout=60)
    x100.stop(None)
    worker.wait_for(r"^JOINED: \[91809\.0", timeout=60)  # 30.3 ** 2 * 100, after its 10 s timer
    worker.wait_for(r"^RECEIVED REPLY: ")
    worker.stop()


def test_bound_agent(example: Callable[[str], Example]) -> None:
    ex = example("bound_agent.py")
    _declares(ex, (faust.App, "channel"))
    worker = ex.worker()
    worker.wait_for(r"\[stage1\] action arrived|\[dead letter\] arrived", timeout=60)
    worker.stop()


def test_windowing_tumbling(example: Callable[[str], Example]) -> None:
    ex = example("windowing/tumbling.py")
    _declares(ex)
    worker = ex.worker()
    worker.wait_for(r"^current\(\) should go from 1 to 5: 1$", timeout=60)
    worker.wait_for(r"^current\(\) should go from 1 to 5: 2$", timeout=60)
    worker.stop()


def test_windowing_hopping(example: Callable[[str], Example]) -> None:
    ex = example("windowing/hopping.py")
    _declares(ex)
    worker = ex.worker()
    worker.wait_for(r"^current\(\) should have values between 1-3: [123]$", timeout=60)
    worker.stop()


def test_windowing_hopping_2(example: Callable[[str], Example]) -> None:
    ex = example("windowing/hopping_2.py")
    _declares(ex)
    worker = ex.worker()
    worker.wait_for(r"^Receive message : ", timeout=60)
    worker.wait_for(r"^processing window:\d+ events,timestamp ", timeout=60)
    worker.stop()


def test_windowed_aggregation(example: Callable[[str], Example]) -> None:
    ex = example("windowed_aggregation.py")
    _declares(ex)
    worker = ex.worker()
    worker.wait_for(r"^processing window:\d+ events,mean: \d\.\d\d,timestamp ", timeout=60)
    worker.stop()
