"""Following a ``streamkit worker`` subprocess's log from a test: wait for a line, then keep
what it wrote after it was stopped or killed (the crash and chaos tests share these)."""

from __future__ import annotations

import asyncio
import re
import signal
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
