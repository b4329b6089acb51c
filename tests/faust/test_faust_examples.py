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
checks the values it prints, sends or serves against what was sent (read back from the broker)
and what Faust's run of it computes.

Examples that need a part of the Faust surface streamkit does not offer yet are skipped with
the missing part named (probed, not assumed, so they run as soon as it lands).
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import http.server
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import streamkit as faust
from streamkit._core.types import TopicPartition
from streamkit.transport.connect import open_log_client
from tests.support.processes import free_port, interruptible

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

    try:
        listing = json.loads(read(page, "application/vnd.pypi.simple.v1+json"))
    except ValueError:
        raise ValueError(f"{page} did not answer in JSON (PEP 691)") from None
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
    if target.is_dir():
        return target
    try:
        _fetch_examples(version, target)
        return target
    except (OSError, ValueError, KeyError, tarfile.TarError) as exc:
        why = str(exc)
    # Outside the except block: pytest would show the chain of exceptions, not one line.
    pytest.fail(f"cannot get faust-streaming {version}'s examples from its sdist: {why}", pytrace=False)


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


def _pythonpath(folder: Path) -> str:
    """The example's folder first, then the caller's PYTHONPATH (the streamkit under test, when
    it is not the one installed)."""
    return os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])


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
        env={**os.environ, "PYTHONPATH": _pythonpath(ex.dir)},
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
            env={**os.environ, "PYTHONPATH": _pythonpath(cwd), "PYTHONUNBUFFERED": "1"},
            preexec_fn=interruptible,  # a command the test stops with Ctrl-C
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


def _records(broker: Any, topic: str) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """Every record of ``topic`` on the test's broker, as ``(partition, key, value,
    timestamp_ms)`` in partition and offset order: what an example sent, to check what it
    printed or served against."""

    async def read() -> list[tuple[int, bytes | None, bytes | None, int]]:
        client = open_log_client(f"kafka://{broker.bootstrap}")
        await client.start()
        try:
            reader = client.reader()
            out = []
            try:
                for partition in range(await client.partition_count(topic) or 0):
                    tp = TopicPartition(topic, partition)
                    offset, end = await reader.bounds(tp)
                    while offset < end:
                        chunk = await reader.read(tp, offset, 10_000)
                        out += [(partition, r.key, r.value, r.timestamp) for r in chunk.records]
                        if chunk.next_offset == offset:
                            break
                        offset = chunk.next_offset
            finally:
                await reader.aclose()
            return out
        finally:
            await client.aclose()

    return asyncio.run(read())


def _values(broker: Any, topic: str) -> list[Any]:
    """The JSON values of ``topic``'s records, in order."""
    return [json.loads(value) for _, _, value, _ in _records(broker, topic) if value is not None]


def _printed(run: Run, pattern: str) -> list[re.Match[str]]:
    """Every line ``run`` printed so far that matches ``pattern``, in order."""
    return [m for m in (re.search(pattern, line) for line in list(run.lines)) if m]


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
                return None  # the test's index stays quiet on stderr

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
    assert failed.value.__context__ is None  # pytest shows no chain of exceptions before the line
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
    port = free_port()  # a loopback port nobody listens on
    assert "Connection refused" in _fetch_fails(tmp_path, monkeypatch, f"http://127.0.0.1:{port}/simple")


def test_hello_world(example: Callable[[str], Example]) -> None:
    ex = example("hello_world.py")
    worker = ex.worker()
    worker.wait_for(r"^hello 99$", timeout=90)  # its timer sends 100 greetings every 5 s
    # One partition: the agent prints the first round in the order it was sent.
    assert [m.group(0) for m in _printed(worker, r"^hello \d+$")][:100] == [f"hello {i}" for i in range(100)]
    worker.stop()
    assert _values(ex.broker, "greetings")[:100] == [f"hello {i}" for i in range(100)]


NUMBER = r"^b'(\d\.\d+(?:e-\d+)?)'$"


def test_leader(example: Callable[[str], Example]) -> None:
    ex = example("leader.py")  # no app.main(): Faust runs it with `faust -A examples.leader worker`
    worker = ex.worker(main=False)
    web = ex.web_url(worker)
    worker.wait_for(r"^PUBLISHING ON LEADER!$", timeout=90)
    # The agent prints the random number the timer sent: bytes, the app's values being raw.
    worker.wait_for(NUMBER, count=2)
    [topic] = next(a["topics"] for a in _get(f"{web}/topology")[1]["agents"] if a["name"].endswith("say"))
    worker.stop()
    received = [m.group(1) for m in _printed(worker, NUMBER)]
    sent = [v.decode() for _, _, v, _ in _records(ex.broker, topic) if v is not None]  # str(random.random())
    assert received and received == sent[: len(received)], (received, sent)
    assert all(0.0 <= float(number) < 1.0 for number in received)
    assert len(_printed(worker, r"^PUBLISHING ON LEADER!$")) >= len(received)  # one publish per number


def test_service(example: Callable[[str], Example]) -> None:
    ex = example("advanced/service.py")
    _declares(ex)
    worker = ex.worker()
    web = ex.web_url(worker)
    worker.wait_for(r"\[\^MyService\]: STARTED")
    worker.wait_for(r"^Received: 'hello'$", timeout=90, count=2)  # its 1 s timer sends 'hello'
    [topic] = next(a["topics"] for a in _get(f"{web}/topology")[1]["agents"] if a["name"].endswith("consumer"))
    text = worker.stop()
    assert "[^MyService]: STOPPED" in text
    received = [m.group(1) for m in _printed(worker, r"^Received: (.*)$")]
    sent = [repr(value) for value in _values(ex.broker, topic)]  # what consumer.send(value='hello') wrote
    assert len(received) >= 2 and received == sent[: len(received)], (received, sent)


def test_crontab_tz_unaware(example: Callable[[str], Example]) -> None:
    ex = example("crontab/tz_unaware.py")
    worker = ex.worker()
    # '*/1 * * * *': at the next minute's start, then the agent prints the record sent.
    worker.wait_for(r"^-- We should send a message every minute --$", timeout=90)
    printed = float(worker.wait_for(r"^record: .*Model.*random=(\d\.\d+)").group(1))
    worker.stop()
    sent = [value["random"] for value in _values(ex.broker, "tz_unaware_topic")]
    assert sent[:1] == [printed] and 0.0 <= printed <= 1.0, (sent, printed)
    assert re.search(r"^Sending message at: \d{4}-\d\d-\d\d \d\d:\d\d:0\d", worker.output(), re.MULTILINE)


def test_word_count(example: Callable[[str], Example]) -> None:
    ex = example("word_count.py")
    _declares(ex)
    worker = ex.worker()
    web = ex.web_url(worker)
    # Its task sends 1000 of each word; the table route answers the page, and the table API.
    for word in ("the", "quick", "brown", "fox"):
        _until(lambda w=word: _get(f"{web}/count/{w}/") == (200, {w: 1000}), f"{word} counted 1000 times", 120)
        status, body = _get(f"{web}/tables/word_counts/{word}")
        assert status == 200 and (body["key"], body["value"]) == (word, 1000), body
    status, body = _get(f"{web}/last/fox/")
    assert status == 200 and body["fox"] == {"the": 1000, "quick": 1000, "brown": 1000, "fox": 1000}
    status, rows = _get(f"{web}/tables/word_counts")
    assert sorted((r["key"], r["value"]) for r in rows) == [("brown", 1000), ("fox", 1000), ("quick", 1000), ("the", 1000)]
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
    # Partition j's key str(j) sums the values sent to it: 0 + 1 + ... in order.
    sent: dict[str, list[int]] = {str(j): [] for j in range(4)}
    for partition, key, value, _ in _records(ex.broker, "countstopic"):
        assert key == str(partition).encode() and value is not None
        sent[str(partition)].append(int(value))
    for key, values in sent.items():
        assert values == list(range(len(values))) and len(values) >= 101, (key, values[-3:])
    expected = {key: sum(values) for key, values in sent.items()}
    for key, total in expected.items():
        # The table API finds the key "0" its scan lists; the example's own page answers too.
        _until(lambda k=key, t=total: _get(f"{web}/tables/counts/{k}") == (200, {"key": k, "value": t, "partition": int(k)}),
               f"counts[{key!r}] == {total} through the table API")
        assert _get(f"{web}/count/{key}/") == (200, {key: total})
    status, rows = _get(f"{web}/tables/counts")
    assert status == 200 and sorted((r["key"], r["value"]) for r in rows) == sorted(expected.items())
    tallies = len(_printed(worker, r"\$\$ TALLY \$\$"))
    worker.wait_for(r"\$\$ TALLY \$\$", timeout=30, count=tallies + 1)  # its 10 s timer prints the table
    text = worker.stop()
    assert "!!! PREV" not in text  # every partition's values came in order
    tally = text[text.rindex("$$ TALLY $$"):]
    for key, total in expected.items():
        assert re.search(rf"^\W*{key}\W+{total}\W*$", tally, re.MULTILINE), tally


def test_tableofset(example: Callable[[str], Example]) -> None:
    ex = example("tableofset.py")
    worker = ex.worker()
    worker.wait_for(r"streamkit worker: app 'table-of-sets-windowed-v2'")
    ex.command("joining", "home", "alice").stop(None)
    ex.command("joining", "home", "bob").stop(None)
    worker.wait_for(r"^- Alice joined home$", timeout=60)
    worker.wait_for(r"^- Bob joined home$", timeout=60)
    ex.command("leaving", "home", "alice").stop(None)
    worker.wait_for(r"^- Alice left home$", timeout=60)
    # The agents print the set after each change (a set's order is its hashes': compared as sets).
    cur = [ast.literal_eval(m.group(1)) for m in _printed(worker, r"^TABLE CUR: (\{.*\})$")]
    assert cur == [{"alice"}, {"alice", "bob"}, {"bob"}], cur
    worker.wait_for(r"^TABLE NOW:$", timeout=30)  # its 10 s timer prints the table
    text = worker.stop()
    now = text[text.rindex("TABLE NOW:"):]
    assert re.search(r"home\W+\{'bob'\}", now), now


def test_kubernetes_consumer(example: Callable[[str], Example]) -> None:
    ex = example("kubernetes/consumer/consumer.py")
    worker = ex.worker()
    web = ex.web_url(worker)
    worker.wait_for(r"streamkit worker: app 'scores'")
    # Its producer is a kafka-python script; any Kafka client writes the same JSON.
    produced = subprocess.run(
        [sys.executable, "-m", "streamkit.cli", "produce", "test", "--bootstrap", ex.broker.bootstrap],
        input='{"index": 1, "value": 7}\n{"index": 2, "value": 3}\n{"index": 3, "value": 1}\n',
        capture_output=True, text=True, timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    worker.wait_for(r"^Total: 3, Partition partition: 1: 2$", timeout=60)
    assert [m.group(0) for m in _printed(worker, r"^Total: .*")] == [
        "Total: 1, Partition partition: 1: 1", "Total: 2, Partition partition: 0: 1", "Total: 3, Partition partition: 1: 2",
    ]
    for key, total in [("totals", 3), ("partition: 0", 1), ("partition: 1", 2)]:
        status, body = _get(f"{web}/tables/totals/{urllib.parse.quote(key)}")
        assert status == 200 and (body["key"], body["value"]) == (key, total), body
    worker.stop()


def _withdrawals(ex: Example, worker: Run, web: str, topic: str, n: int) -> dict[str, float]:
    """Run the example's ``produce --max-messages n``; the amounts it sent summed per user."""
    produce = ex.command("produce", "--max-messages", str(n), "--max-latency", "0")
    produce.wait_for(r"^\+SEND 0$")
    produce.stop(None)

    def read_all() -> dict[str, Any] | None:
        status: dict[str, Any] = _get(f"{web}/status")[1]
        return status if status["records_in"] >= n else None

    assert _until(read_all, f"the {n} withdrawals read")["dead_lettered"] == 0
    sent = _values(ex.broker, topic)
    assert len(sent) == n
    totals: dict[str, float] = {}
    for withdrawal in sent:
        totals[withdrawal["user"]] = totals.get(withdrawal["user"], 0) + withdrawal["amount"]
    return totals


def test_withdrawals(example: Callable[[str], Example]) -> None:
    ex = example("withdrawals.py")
    _declares(ex)
    worker = ex.worker()
    web = ex.web_url(worker)
    # track_user_withdrawal sums each user's amounts in its hour-long windows
    # (track_country_withdrawal reads its own topic, which nothing in the example sends to, on
    # Faust too); the table API answers each user's windows, which add up to what was sent.
    totals = _withdrawals(ex, worker, web, "withdrawals", 50)
    for user, total in totals.items():
        def summed(u: str = user) -> float | None:
            status, body = _get(f"{web}/tables/user_to_total/{u}")
            return sum(w["value"] for w in body["windows"]) if status == 200 and body["windows"] else None

        assert _until(summed, f"{user}'s windows") == pytest.approx(total, rel=1e-9), user
    worker.stop()


def test_isolated_partitions_crashing(example: Callable[[str], Example]) -> None:
    ex = example("advanced/isolated_partitions_crashing.py")
    _declares(ex)
    worker = ex.worker()
    web = ex.web_url(worker)
    totals = _withdrawals(ex, worker, web, "withdrawals129", 30)
    worker.wait_for(r"^Progressing: was 0 now 30$", timeout=60)  # its task, looping on app.should_stop
    # withdrawal_counts counts each user's withdrawals, through every partition's agent.
    sent_counts = dict.fromkeys(totals, 0)
    for withdrawal in _values(ex.broker, "withdrawals129"):
        sent_counts[withdrawal["user"]] += 1
    status, rows = _get(f"{web}/tables/withdrawal-counts?limit=1000")
    assert status == 200 and {r["key"]: r["value"] for r in rows} == sent_counts
    worker.stop()


def test_rpc(example: Callable[[str], Example]) -> None:
    ex = example("advanced/rpc.py")
    _declares(ex, (faust.Agent, "ask"), (faust.Agent, "join"))
    worker = ex.worker()
    worker.wait_for(r"streamkit worker: app 'RPC99'")
    x100 = ex.command("x100", "3")
    x100.wait_for(r"^3 \* 100 = 300\.0$", timeout=60)
    x100.stop(None)
    # After its 10 s timer: pow asks mul, so each reply is v ** 2 * 100.0; join keeps the order,
    # map gives the same replies in any order.
    inputs = [30.3, 40.4, 50.5, 60.6, 70.7, 80.8, 90.9]
    expected = [(v**2) * 100.0 for v in inputs]
    joined = worker.wait_for(r"^JOINED: (.*)$", timeout=60).group(1)
    assert joined == repr(expected)
    worker.wait_for(r"^RECEIVED REPLY: ", count=len(inputs), timeout=60)
    replies = [float(m.group(1)) for m in _printed(worker, r"^RECEIVED REPLY: (.*)$")][: len(inputs)]
    assert sorted(replies) == sorted(expected)
    worker.stop()


def test_bound_agent(example: Callable[[str], Example]) -> None:
    ex = example("bound_agent.py")
    _declares(ex, (faust.App, "channel"))
    worker = ex.worker()
    # Its timer sends DeviceAction(device_id=0), 1, ..., n-1 (n random in 3..101) every 3 s to
    # stage1, which forwards them to stage2; a stage that fails (by the clock's second) sends
    # the action to the dead-letter agent instead. Between two rounds every action is accounted
    # for: stage1's and its dead letters are whole rounds 0..n-1, and what stage1 forwarded is
    # what stage2 logged or dead-lettered.
    def accounted() -> tuple[Counter[str], Counter[str]] | None:
        stage1 = Counter(m.group(1) for m in _printed(worker, r"\[stage1\] action arrived: .*DeviceAction.*device_id=(\w+)"))
        stage2 = Counter(m.group(1) for m in _printed(worker, r"\[stage2\] action arrived: .*DeviceAction.*device_id=(\w+)"))
        dead = [m.groups() for m in _printed(worker, r"\[dead letter\] arrived: .*DeadLetter.*stage='(\w+)'.*"
                                                       r"DeviceAction.*device_id=(\w+)")]
        dead1 = Counter(i for stage, i in dead if stage == "stage1")
        dead2 = Counter(i for stage, i in dead if stage == "stage2")
        handled = stage1 + dead1
        if not handled or stage1 != stage2 + dead2 or len(dead) != sum(dead1.values()) + sum(dead2.values()):
            return None
        counts = [handled[str(i)] for i in range(len(handled))]
        if set(handled) != {str(i) for i in range(len(handled))} or counts != sorted(counts, reverse=True):
            return None  # a round is still on its way
        return handled, stage1

    handled, _ = _until(accounted, "a round of actions accounted for", 60)
    assert handled["0"] >= 1
    worker.stop()


def _windows(ts_ms: list[int], size_ms: int, step_ms: int) -> list[list[int]]:
    """The starts of the hopping (or, step == size, tumbling) windows holding each timestamp."""
    return [[s for s in range((t // step_ms) * step_ms, t - size_ms, -step_ms) if s <= t < s + size_ms] for t in ts_ms]


def _counted(ts_ms: list[int], size_ms: int, step_ms: int) -> tuple[list[int], list[int]]:
    """What ``table['counter'] += 1`` per event leaves in reach of each event: the count in the
    latest window holding its timestamp (``current()``, ``value()``), and in the window of its
    timestamp minus 30 s (``delta(30)``)."""
    counts: dict[int, int] = {}
    current, delta = [], []
    for t in ts_ms:
        for start in _windows([t], size_ms, step_ms)[0]:
            counts[start] = counts.get(start, 0) + 1
        current.append(counts[(t // step_ms) * step_ms])
        before = t - 30_000
        delta.append(counts.get((before // step_ms) * step_ms, 0))
    return current, delta


def _check_counter_lines(worker: Run, broker: Any, topic: str, size_ms: int, step_ms: int, label: str) -> None:
    """The example's lines for each event, against the counts the events sent imply."""
    current = [int(m.group(1)) for m in _printed(worker, rf"^current\(\) should {label}: (\d+)$")]
    value = [int(m.group(1)) for m in _printed(worker, rf"^value\(\) should {label}: (\d+)$")]
    delta = [int(m.group(1)) for m in _printed(worker, r"^delta\(30\) should .*: (\d+)$")]
    now = [int(m.group(1)) for m in _printed(worker, rf"^now\(\) should {label}: (\d+)$")]
    sent = [ts for _, _, _, ts in _records(broker, topic)]
    expected_current, expected_delta = _counted(sent, size_ms, step_ms)
    n = len(current)
    assert n >= 3 and current == expected_current[:n], (current, expected_current)
    assert value == current  # relative to the event's time, as current()
    assert delta == expected_delta[:n]
    # now() is the earliest window holding the wall clock as the line was printed: the event's
    # (for hopping windows, the one before it while the clock is in the event's step), or a
    # later one, still empty.
    for i, got in enumerate(now):
        allowed = {current[i], 0}
        if step_ms < size_ms:
            before = (sent[i] // step_ms) * step_ms - step_ms
            allowed.add(sum(1 for u in sent[: i + 1] if before <= u < before + size_ms))
        assert got in allowed, (i, got, allowed)


def test_windowing_tumbling(example: Callable[[str], Example]) -> None:
    ex = example("windowing/tumbling.py")
    _declares(ex)
    worker = ex.worker()
    # Its 2 s timer sends; each event adds 1 to its 10 s window.
    worker.wait_for(r"^current\(\) should go from 1 to 5: \d+$", timeout=60, count=3)
    worker.stop()
    _check_counter_lines(worker, ex.broker, "tumbling_topic", 10_000, 10_000, "go from 1 to 5")


def test_windowing_hopping(example: Callable[[str], Example]) -> None:
    ex = example("windowing/hopping.py")
    _declares(ex)
    worker = ex.worker()
    worker.wait_for(r"^current\(\) should have values between 1-3: \d+$", timeout=60, count=3)
    worker.stop()
    _check_counter_lines(worker, ex.broker, "hopping_topic", 10_000, 5_000, "have values between 1-3")


def test_windowing_hopping_2(example: Callable[[str], Example]) -> None:
    ex = example("windowing/hopping_2.py")
    _declares(ex)
    worker = ex.worker()
    # Its 0.1 s timer sends RawModel(value=1, date=now in whole seconds); the agent appends each
    # event to the list in hopping(6, 3) windows of `date`, its value one more than the list's
    # last; on_window_close prints how many events the closed window's list holds.
    worker.wait_for(r"^processing window:\d+ events,timestamp ", timeout=60, count=2)
    worker.stop()
    dates = [value["date"] for value in _values(ex.broker, "raw-event")]
    lists: dict[int, list[int]] = {}
    values = []
    for date in dates:  # the agent's steps, in plain Python
        latest = (date // 3) * 3
        current = list(lists.get(latest, []))
        values.append(current[-1] + 1 if current else 1)
        current.append(values[-1])
        for start in (latest, latest - 3):
            if start <= date < start + 6:
                lists[start] = current
    received = [int(float(m.group(1))) for m in _printed(worker, r"^Receive message : .*RawModel.*value=([\d.]+)")]
    assert received == values[: len(received)] and len(received) >= 10
    closed = [(float(m.group(2)), int(m.group(1))) for m in _printed(worker, r"^processing window:(\d+) events,timestamp ([\d.]+)$")]
    assert closed == [(float(start), len(lists[start])) for start, _ in closed] and closed
    assert all(start + 6 <= max(dates) for start, _ in closed)  # closed by stream time: a later date came


def test_windowed_aggregation(example: Callable[[str], Example]) -> None:
    ex = example("windowed_aggregation.py")
    _declares(ex)
    worker = ex.worker()
    # Its 0.1 s timer sends RawModel(random value, date=now in whole seconds); the agent keeps
    # the events in tumbling(10) windows of `date`; on_window_close prints the closed window's
    # count and mean and sends them to agg-event.
    worker.wait_for(r"^processing window:\d+ events,mean: \d\.\d\d,timestamp ", timeout=60)
    worker.stop()
    sent = _values(ex.broker, "raw-event")  # (the topic hopping_2 sent to, too: this app reads it all)
    closed = [m.groups() for m in _printed(worker, r"^processing window:(\d+) events,mean: (\d\.\d\d),timestamp ([\d.]+)$")]
    sunk = _values(ex.broker, "agg-event")
    assert closed and len(sunk) >= len(closed)
    for (count, mean, start), agg in zip(closed, sunk, strict=False):
        window = [v["value"] for v in sent if float(start) <= v["date"] < float(start) + 10]
        assert int(count) == len(window) and mean == f"{sum(window) / len(window):.2f}", (count, mean, start)
        assert agg["count"] == len(window) and agg["mean"] == pytest.approx(sum(window) / len(window), rel=1e-12)
