"""Start-up of the ``streamkit`` command line beside a bare ``python -c pass``.

Each case is a new process of this Python, timed from start to exit (wall clock, and the
CPU time it used): ``python -c pass``; ``import streamkit``; and ``python -m streamkit.cli``
with ``--help``, ``--version``, ``topics list`` and ``produce`` (one line) on an embedded log
(a data directory in a temporary directory, one topic). The runs are interleaved (one of each
case per round), so a load that comes and goes on a shared machine hits every case alike; the
figures are medians.

``--tree LABEL=PATH`` (repeatable) runs the streamkit cases with ``PYTHONPATH=PATH``, to set
checkouts side by side in one run (default: the checkout this script is in):

    .venv/bin/python benchmarks/cli_startup.py --runs 10 --tree before=../main --tree after=.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


@dataclass
class Case:
    label: str
    argv: list[str]
    pythonpath: str | None = None
    stdin: bytes = b""
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


def _run(case: Case, cwd: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMKIT_DATA_DIR", "STREAMKIT_BOOTSTRAP")}
    env.pop("PYTHONPATH", None)
    if case.pythonpath is not None:
        env["PYTHONPATH"] = case.pythonpath
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(case.argv, input=case.stdin, capture_output=True, cwd=cwd, env=env, timeout=120)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{case.label}: exit code {proc.returncode}: {proc.stderr.decode().strip()}")
    case.wall_ms.append(wall * 1000)
    case.cpu_ms.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)


def _tree(spec: str) -> tuple[str, str]:
    label, sep, path = spec.partition("=")
    if not sep or not label or not Path(path, "streamkit", "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"expected LABEL=PATH of a streamkit checkout, got {spec!r}")
    return label, str(Path(path).resolve())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--tree", type=_tree, action="append", metavar="LABEL=PATH",
                        help="a checkout to run the streamkit cases from (repeatable)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    trees: list[tuple[str, str]] = args.tree or [("this", str(HERE))]
    python = sys.executable

    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        cwd = Path(tmp)
        data = str(cwd / "data")
        cli = [python, "-m", "streamkit.cli"]
        setup = subprocess.run([*cli, "topics", "create", "t", "--data-dir", data], capture_output=True,
                               env={**os.environ, "PYTHONPATH": trees[0][1]}, cwd=cwd)
        if setup.returncode != 0:
            sys.exit(f"setup: {setup.stderr.decode().strip()}")
        cases = [Case("python -c pass", [python, "-c", "pass"])]
        for label, path in trees:
            cases += [
                Case(f"{label}: import streamkit", [python, "-c", "import streamkit"], path),
                Case(f"{label}: streamkit --help", [*cli, "--help"], path),
                Case(f"{label}: streamkit --version", [*cli, "--version"], path),
                Case(f"{label}: streamkit topics list", [*cli, "topics", "list", "--data-dir", data], path),
                Case(f"{label}: streamkit produce t", [*cli, "produce", "t", "--data-dir", data], path, b"x\n"),
            ]
        for case in cases:  # one unmeasured run each: compiled bytecode and the page cache
            _run(case, cwd)
            case.wall_ms.clear()
            case.cpu_ms.clear()
        for _ in range(args.runs):
            for case in cases:
                _run(case, cwd)

    base = statistics.median(cases[0].wall_ms)
    width = max(len(c.label) for c in cases)
    print(f"medians of {args.runs} interleaved runs, {python}")
    print(f"{'case':<{width}}  {'wall ms':>8}  {'x pass':>7}  {'CPU ms':>7}")
    for case in cases:
        wall = statistics.median(case.wall_ms)
        print(f"{case.label:<{width}}  {wall:8.1f}  {wall / base:7.1f}  {statistics.median(case.cpu_ms):7.1f}")


if __name__ == "__main__":
    main()
