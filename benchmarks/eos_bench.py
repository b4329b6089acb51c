"""Exactly-once vs at-least-once: the table_bench counting app under both guarantees.

The app is ``table_bench.py``'s: ``async for word in stream: counts[word] += 1`` over a
4-partition ``words`` topic (``--words`` distinct pseudo-words, each record's word picked by a
fixed stride), a RocksDB table with its changelog, on the embedded log (``file://`` in a temp
dir) or, with ``--transport broker``, through a ``streamkit broker`` subprocess (aiokafka:
each task's transactional producer, ``runtime/transactions.py``). Four variants, each on a
fresh copy of the pre-loaded input (on the broker: the one input topic, read by a fresh app id,
so a fresh group, changelog and transactional ids) and a fresh state dir:
``at_least_once`` and ``exactly_once``, each with ``commit_interval`` 0.1 s and 1 s (the
default). Under exactly-once every commit closes the sources' gate, waits for the tasks to
finish their record, sends the changes to the changelog inside the transaction, commits the
transaction with the offsets (coordinator state fsynced, markers written) and only then
writes the stores.

Timed: from the worker's start until every record is processed, ``settle()`` is true and a
final ``commit()`` returned. Each run is checked: the table must hold exactly the expected
count of every word (a run that does not gets a note). Runs are interleaved per repeat and
the median is reported.

    python benchmarks/eos_bench.py                          # 300k records, 3 repeats
    python benchmarks/eos_bench.py --records 100000 --repeat 1
    python benchmarks/eos_bench.py --transport broker --records 100000 --repeat 3

Goal: exactly-once >= 70% of at-least-once's events/s at the default commit interval (1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from engine_bench import PARTITIONS, Broker, Children, load_broker, load_embedded, machine_note
from table_bench import Words, compare, processed

import streamkit as sk
from streamkit.runtime import Worker
from streamkit.tables import Table

GUARANTEES = ("at_least_once", "exactly_once")
INTERVALS_S = (0.1, 1.0)
POLL_S = 0.01
RUN_TIMEOUT_S = 600.0


@dataclass
class Result:
    guarantee: str
    interval_s: float
    seconds: float
    commits: int
    note: str

    def rate(self, n: int) -> float:
        return n / self.seconds


def counting_app(app_id: str, url: str, guarantee: str, interval_s: float) -> tuple[sk.App, Table]:
    app = sk.App(app_id, broker=url, processing_guarantee=guarantee, commit_interval=interval_s)
    words = app.topic("words", key_type=str, value_type=str, partitions=PARTITIONS)
    counts = app.Table("counts", default=int, key_type=str, value_type=int)

    @app.agent(words)
    async def count(stream: sk.Stream) -> None:
        async for word in stream:
            counts[word] += 1

    return app, counts


async def run(
    url: str, app_id: str, state_dir: Path, guarantee: str, interval_s: float, n: int, expected: dict[bytes, int]
) -> Result:
    app, counts = counting_app(app_id, url, guarantee, interval_s)
    gc_default = gc.get_threshold()
    gc.set_threshold(700, 10, 100)  # what `streamkit worker` sets (cli/apps.py)
    worker = Worker(app, state_dir=str(state_dir))
    started = time.perf_counter()
    notes: list[str] = []
    try:
        await worker.start()
        while processed(worker) < n:
            if time.perf_counter() - started > RUN_TIMEOUT_S:
                raise TimeoutError(f"{guarantee} {interval_s}: {processed(worker)} of {n} after {RUN_TIMEOUT_S} s")
            await asyncio.sleep(POLL_S)
        while not await worker.settle():
            await asyncio.sleep(POLL_S)
        await worker.commit()
        seconds = time.perf_counter() - started
        done = sum(worker.committed.get(sk.TopicPartition("words", p), 0) for p in range(PARTITIONS))
        if done != n:
            notes.append(f"committed {done} of {n} input offsets")
        notes.append(compare({k.encode(): v for k, v in counts.items()}, expected, "table"))
        commits = worker.stats.commits
    finally:
        await worker.stop()
        gc.set_threshold(*gc_default)
    return Result(guarantee, interval_s, seconds, commits, "; ".join(x for x in notes if x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--words", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--transport", choices=("embedded", "broker"), default="embedded")
    args = parser.parse_args()
    n = args.records
    words = Words(args.words)
    expected = words.expected(n)
    print(machine_note())
    base = Path(tempfile.mkdtemp(prefix="eos-bench-"))
    children = Children()
    broker: Broker | None = None
    try:
        source = base / "input"
        if args.transport == "broker":
            broker = Broker(children, base / "broker")
            asyncio.run(load_broker(broker.bootstrap, "words", n, words.of, words.of))
        else:
            load_embedded(source, "words", n, words.of, words.of)
        results: dict[tuple[str, float], list[Result]] = {}
        for repeat in range(args.repeat):
            for interval_s in INTERVALS_S:
                for guarantee in GUARANTEES:
                    tag = f"{guarantee}-{interval_s}-{repeat}"
                    data_dir = base / tag
                    if broker is not None:
                        url, app_id = broker.url, f"bench-eos-{tag.replace('.', '_')}"
                    else:
                        shutil.copytree(source, data_dir)
                        url, app_id = f"file://{data_dir}", "bench-eos"
                    result = asyncio.run(run(url, app_id, base / f"state-{tag}", guarantee, interval_s, n, expected))
                    if broker is not None and (problem := broker.check_alive()):
                        raise RuntimeError(problem)
                    shutil.rmtree(data_dir, ignore_errors=True)
                    shutil.rmtree(base / f"state-{tag}", ignore_errors=True)
                    results.setdefault((guarantee, interval_s), []).append(result)
                    print(f"  {guarantee:14} commit_interval {interval_s:>4} s: {result.rate(n):>10,.0f} ev/s "
                          f"({result.seconds:.2f} s, {result.commits} commits){'  ' + result.note if result.note else ''}")
    finally:
        children.stop_all()
        shutil.rmtree(base, ignore_errors=True)
    print(f"\n{n:,} records, {args.words:,} words, {args.transport}, median of {args.repeat}")
    print("| commit interval | at-least-once | exactly-once | exactly-once / at-least-once |")
    print("|---|---|---|---|")
    for interval_s in INTERVALS_S:
        alos = statistics.median(r.rate(n) for r in results[("at_least_once", interval_s)])
        eos = statistics.median(r.rate(n) for r in results[("exactly_once", interval_s)])
        goal = " (goal >= 70%: " + ("met" if eos >= 0.7 * alos else "NOT met") + ")" if interval_s == 1.0 else ""
        print(f"| {interval_s} s | {alos:,.0f} ev/s | {eos:,.0f} ev/s | **{eos / alos:.0%}**{goal} |")
    notes = [r.note for rs in results.values() for r in rs if r.note]
    if notes:
        print("notes:", "; ".join(notes))


if __name__ == "__main__":
    main()
