"""A ``streamkit broker`` subprocess and a raw wire client, for every test that needs a broker.

``BrokerProcess`` runs ``streamkit broker --port 0`` (the installed console script, as users do) (or a fixed port, to
restart on the same one), waits for its "listening on HOST:PORT" line and stops it with
SIGTERM (SIGKILL if it does not exit in time). Its stderr goes to a file that is shown when
a test fails, so a broker-side traceback is never lost. ``assert_stops_cleanly`` is the check
every broker fixture makes at teardown: SIGTERM ends it with exit code 0 and no traceback.

``WireClient`` is a minimal blocking Kafka client on aiokafka's protocol structs: requests are
encoded and responses decoded by aiokafka's classes, not by our codec, so protocol tests check
the server against an independent implementation of the wire format.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

_LISTENING = re.compile(r"streamkit broker listening on (\S+):(\d+) \(data: (.*)\)")
_LISTENER = re.compile(r"(\w+)://(\S*):(\d+)")
START_TIMEOUT_S = 30
STREAMKIT = Path(sys.executable).parent / "streamkit"  # the console script of this venv
STOP_TIMEOUT_S = 30


class BrokerProcess:
    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.args = list(args)
        self.host = "127.0.0.1"
        self.port = 0
        self.listeners: dict[str, int] = {}  # listener name -> port, with --listener
        self.proc: subprocess.Popen[str] | None = None
        self.stderr_path = data_dir.parent / f"{data_dir.name}-broker.stderr"
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, *, same_port: bool = True) -> BrokerProcess:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        port = self.port if same_port else 0
        cmd = [
            str(STREAMKIT), "broker",
            "--data-dir", str(self.data_dir), "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "info",
            # Tests stamp records in 2023 (T0): a time retention would delete such partitions
            # whole at a retention check, under whichever test runs then (as on Kafka, whose
            # fixture has the same default). Retention is tested with topic settings.
            "--override", "log.retention.ms=-1", *self.args,
        ]
        stderr = open(self.stderr_path, "a")  # noqa: SIM115 - the child keeps it
        stderr.write(f"----- start {self.starts} -----\n")
        stderr.flush()
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        stderr.close()
        self.starts += 1
        line = _read_line(self.proc, START_TIMEOUT_S)
        match = _LISTENING.search(line or "")
        if match is None:
            self.kill()
            raise RuntimeError(f"broker did not start: {line!r}\n{self.stderr()}")
        self.host, self.port = match.group(1), int(match.group(2))
        _, _, listeners = (line or "").partition("; listeners ")
        self.listeners = {name: int(port) for name, _, port in _LISTENER.findall(listeners)}
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stop the broker; return its exit code."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return proc.returncode if proc is not None else 0
        proc.send_signal(sig)
        try:
            return proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
            raise RuntimeError(f"broker ignored signal {sig}\n{self.stderr()}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text()
        except FileNotFoundError:
            return ""


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    """The first stdout line of ``proc``, or None after ``timeout_s``."""
    out: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        out.append(proc.stdout.readline())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    return out[0] if out else None


def assert_stops_cleanly(broker: BrokerProcess) -> None:
    """Stop ``broker`` with SIGTERM: it must exit with 0 and have logged no traceback."""
    code = broker.stop()
    assert code == 0, f"broker exited with {code}\n{broker.stderr()}"
    assert "Traceback" not in broker.stderr(), broker.stderr()


_SIZE = struct.Struct(">i")


class WireClient:
    def __init__(self, host: str, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, payload: bytes) -> None:
        self.sock.sendall(payload)

    def send(self, request: Any, *, client_id: str = "wire-test") -> int:
        """Send an aiokafka request struct with a v1 header; return its correlation id."""
        self.correlation_id += 1
        cid = client_id.encode()
        header = struct.pack(">hhih", request.API_KEY, request.API_VERSION, self.correlation_id, len(cid)) + cid
        body = header + request.encode()
        self.sock.sendall(_SIZE.pack(len(body)) + body)
        return self.correlation_id

    def recv_frame(self) -> bytes:
        size = _SIZE.unpack(self._read(4))[0]
        return self._read(size)

    def recv(self, request: Any) -> tuple[int, Any]:
        """(correlation id, decoded response) for a request of ``request``'s type."""
        frame = self.recv_frame()
        correlation_id = _SIZE.unpack_from(frame)[0]
        return correlation_id, request.RESPONSE_TYPE.decode(frame[4:])

    def call(self, request: Any) -> Any:
        sent = self.send(request)
        got, response = self.recv(request)
        assert got == sent, f"correlation id {got}, expected {sent}"
        return response

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """True when the broker closes the connection within ``timeout_s``."""
        self.sock.settimeout(timeout_s)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
