"""Worker subprocesses and ports, as the tests that start processes share them.

Following a ``streamkit worker`` subprocess's log from a test: wait for a line (or for its
assignment), then keep what it wrote after it was stopped or killed (the crash, chaos and
restart tests share these); stopping one with a signal; a free loopback port for a server a
test starts.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess


def interruptible() -> None:
    """``preexec_fn`` of a process a test stops with Ctrl-C (SIGINT): a shell that starts a
    job in the background (``make test &``, nohup, some CI runners) sets SIGINT to ignored,
    the child inherits that, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def wait_for_line(proc: subprocess.Popen[str], pattern: str, seen: list[str], timeout: float = 60) -> None:
    """Read the worker's stderr into ``seen`` until a line matches ``pattern``; fails with the
    last lines when the worker exits first or ``timeout`` seconds pass."""
    assert proc.stderr is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), deadline - loop.time())
        if not line:
            raise AssertionError(f"worker exited before {pattern!r}:\n{''.join(seen[-30:])}")
        seen.append(line)
        if re.search(pattern, line):
            return
    raise AssertionError(f"no {pattern!r} in time:\n{''.join(seen[-30:])}")


def drain(proc: subprocess.Popen[str], seen: list[str]) -> None:
    """The rest of a stopped worker's stderr into ``seen``."""
    assert proc.stderr is not None
    seen.extend(proc.stderr.readlines())
    proc.stderr.close()


async def wait_until_assigned(proc: subprocess.Popen[str], timeout_s: float) -> None:
    """Until the worker logs its assignment: it owns the log then, so the test's own clients
    reach it through the worker instead of opening (and locking) the directory. Each line
    must come within ``timeout_s``."""
    assert proc.stderr is not None
    seen: list[str] = []
    while not any("assigned " in line for line in seen[-1:]):
        line = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), timeout_s)
        if not line:
            raise AssertionError(f"the worker exited ({proc.wait()}) before its assignment:\n{''.join(seen)[-3000:]}")
        seen.append(line)


def finish(proc: subprocess.Popen[str], sig: signal.Signals, timeout_s: float) -> None:
    """Send ``sig`` and wait for the worker (killed if it outlives ``timeout_s``); read and close
    its stderr. A worker stopped with SIGTERM must exit with 0."""
    proc.send_signal(sig)
    try:
        code = proc.wait(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    rest = proc.stderr.read()
    proc.stderr.close()
    if sig == signal.SIGTERM:
        assert code == 0, rest[-3000:]


def free_port() -> int:
    """A loopback port nobody listens on (bound by the OS, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
