"""What event-time alignment costs (issue 22): issue 22's windowed count catching up on history
with alignment off and on, on the same preloaded input, in the same run.

The input is issue 22's case (``tests/runtime/pageviews.py``, ``page_views``): ``--events``
page views (1,000,000 by default) in 4 partitions, each partition in arrival order, out of
order by up to 20 s, 2% late by one to five minutes, 60 users, spread over ``--minutes``. The
default keeps the issue's density: its tests put 4,000 views in 80 minutes (50 a minute, one
every 4.8 s per partition), so ``--minutes`` defaults to ``--events / 50`` (20,000 minutes for
1M). The density sets how finely the partitions' records interleave in the timestamp-merged
order: at 4.8 s apart (less than the 20 s disorder, more than the drifts below) the merge
switches partition at almost every record; with denser input (``--minutes 4000``: 5x denser;
``--minutes 80``: 250x) a partition hands out longer runs (its records behind its own stream
time share one key) and a drift of 1 or 5 s lets it run further before it waits.

The app is the issue's: ``app.stream(views).group_by(user).window(Tumbling(60, grace=5))
.count(...)``, ``to_stream(emit="close").to(closed)``, late records to ``<app>-late``. Modes (``--modes``):
``off`` (``max_task_drift_ms=None``, the baseline of the ratios), ``0`` (the default: the
timestamp-merged order), ``1000`` and ``5000``. Each run is a fresh consumer group, state dir
and output topics, on the same input topic of one ``streamkit broker`` subprocess (127.0.0.1,
a free port; ``--log embedded``: one ``file://`` data dir instead, no broker); the modes take
turns run by run (round 1: off, 0, 1000, 5000; round 2: ...), so a change of the machine's load
falls on all of them.

A run's clock starts when the ``Worker`` starts and stops when every input record is processed
(the source tasks' commit positions reach the end), the worker settled three times in a row
(the repartition topic processed to its end) and a final commit returned. Loading is not timed.
Per run: events/s end to end, events per CPU-second of the worker's process (the broker's CPU
seconds beside it), the late records and closed windows (the two output topics' records,
counted from their offsets once the worker stopped), and the aligners' ``waits`` (from
``worker.alignment()``: the re-key's source tasks, then the windowed tasks). With ``--check``
(default on) the model of ``tests/runtime/pageviews.py`` (``expected``: the windowed task fed
the merged order) gives the late records and closed windows a drift of 0 must write; a run of
mode 0 that writes others gets a note.

    python benchmarks/alignment_bench.py                                    # 1M, 3 rounds
    python benchmarks/alignment_bench.py --events 300000 --repeat 3
    python benchmarks/alignment_bench.py --events 300000 --minutes 1200 --repeat 1   # coarser
    python benchmarks/alignment_bench.py --events 50000 --modes off,0 --repeat 1 --profile

Run it with the repository on ``PYTHONPATH`` (it imports ``tests.runtime.pageviews``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine_bench import (
    PARTITIONS,
    POLL_S,
    Broker,
    Children,
    Medians,
    Progress,
    Run,
    machine_note,
    poll_until_done,
    profiled,
)

import streamkit as sk
from streamkit._core.partitioner import partition_for_key
from streamkit._core.types import TopicPartition
from streamkit.runtime import Worker
from streamkit.transport import open_log_client
from streamkit.windows import Tumbling

try:  # issue 22's input and model, as its tests have them
    from tests.runtime.pageviews import GRACE_MS, SIZE_MS, Views, expected, merged, page_views
except ModuleNotFoundError as exc:
    sys.exit(f"alignment_bench.py: cannot import {exc.name} (run it with the repository root on PYTHONPATH)")

HERE = Path(__file__).resolve().parent
IN_TOPIC = "views"
ISSUE_EVENTS_PER_MINUTE = 50  # tests/runtime/test_alignment.py: 4,000 views in 80 minutes
MODES: dict[str, int | None] = {"off": None, "0": 0, "1000": 1000, "5000": 5000}
SETTLED_STREAK = 3


@dataclass
class AlignRun(Run):
    late: int = 0
    closed: int = 0
    waits: list[int] = field(default_factory=list)
    load: float = 0.0  # 1-minute load average at the end of the run


# -- the input ---------------------------------------------------------------------------------


async def preload(url: str, views: Views) -> None:
    """The views into ``IN_TOPIC``, each partition in its arrival order, as the issue's tests
    load them (key: the user, value ``{"user": ...}``, the view's timestamp)."""
    client = open_log_client(url)
    await client.start()
    try:
        await client.ensure_topic(IN_TOPIC, PARTITIONS)
        producer = client.producer()
        await producer.start()
        for p, part in enumerate(views):
            for user, ts in part:
                wait = producer.send_nowait(IN_TOPIC, p, user.encode(), json.dumps({"user": user}).encode(), ts)
                if wait is not None:
                    await wait
        await producer.flush()
        await producer.aclose()
    finally:
        await client.aclose()


def model_counts(views: Views) -> tuple[int, int]:
    """The late records and closed windows of ``tests.runtime.pageviews.expected`` (a windowed
    task per repartition partition fed the merged order), counted in one pass: its reference
    model recomputes every window after each record, too slow for a million. ``--check-model``
    compares the two on a small input."""
    partition_of: dict[str, int] = {}
    stream_time: dict[int, int] = {}
    windows: dict[tuple[str, int], int] = {}  # (user, start) -> its repartition partition
    late = 0
    for _p, user, ts in merged(views):
        q = partition_of.get(user)
        if q is None:
            q = partition_of[user] = partition_for_key(json.dumps(user).encode(), PARTITIONS)
        now = max(stream_time.get(q, ts), ts)
        stream_time[q] = now
        start = ts - ts % SIZE_MS
        if now >= start + SIZE_MS + GRACE_MS:
            late += 1
        else:
            windows[(user, start)] = q
    closed = sum(1 for (_user, start), q in windows.items() if stream_time[q] >= start + SIZE_MS + GRACE_MS)
    return late, closed


def bench_app(app_id: str, url: str, closed_topic: str, drift_ms: int | None) -> sk.App:
    """``tests.runtime.pageviews.make_app``'s topology on the shared input topic."""
    app = sk.App(app_id, broker=url, max_task_drift_ms=drift_ms)
    views = app.topic(IN_TOPIC, key_type=str, value_type=dict, partitions=PARTITIONS)
    closed = app.topic(closed_topic, key_type=str, value_type=dict, partitions=1)
    table = (
        app.stream(views)
        .group_by(lambda v: v["user"])
        .window(Tumbling(SIZE_MS / 1000, grace=GRACE_MS / 1000))
        .count("per_minute", key_type=str, value_type=int)
    )
    table.to_stream(emit="close").to(closed)
    return app


# -- one run -----------------------------------------------------------------------------------


def source_processed(worker: Worker) -> int:
    """Input records processed so far: the source tasks' commit positions (from offset 0)."""
    total = 0
    for task in worker.tasks.values():
        for tp, inbox in task.inboxes.items():
            if tp.topic == IN_TOPIC:
                total += inbox.commit_position() or 0
    return total


async def records_in(url: str, topic: str) -> int:
    """How many records ``topic`` holds (0 if it was never created)."""
    client = open_log_client(url)
    await client.start()
    try:
        partitions = await client.partition_count(topic) or 0
        reader = client.reader()
        try:
            total = 0
            for p in range(partitions):
                start, end = await reader.bounds(TopicPartition(topic, p))
                total += end - start
            return total
        finally:
            await reader.aclose()
    finally:
        await client.aclose()


async def run_worker(mode: str, tag: str, url: str, n: int, broker: Broker | None, state_dir: Path) -> AlignRun:
    run = AlignRun(mode, n)
    app = bench_app(f"bench-{tag}", url, f"closed-{tag}", MODES[mode])
    gc_default = gc.get_threshold()
    gc.set_threshold(700, 10, 100)  # what `streamkit worker` sets (cli/apps.py), as window_bench does
    broker_cpu = broker.cpu_s() if broker else 0.0
    cpu = time.process_time()
    progress = Progress(n)
    worker = Worker(app, state_dir=str(state_dir))
    try:
        await worker.start()

        async def count() -> int:
            return source_processed(worker)

        await poll_until_done(progress, count, broker.check_alive if broker else lambda: None)
        streak = 0
        while streak < SETTLED_STREAK:  # a high watermark read over the wire may lag a moment
            streak = streak + 1 if await worker.settle() else 0
            await asyncio.sleep(POLL_S)
        committed = await worker.commit()
        run.total_s = time.perf_counter() - progress.started
        run.cpu_s = time.process_time() - cpu
        if broker is not None:
            run.broker_cpu_s = broker.cpu_s() - broker_cpu
        run.load = os.getloadavg()[0]
        run.waits = [group["waits"] for group in worker.alignment()]
        positions = {**worker.committed, **committed}
        done = sum(positions.get(TopicPartition(IN_TOPIC, p), 0) for p in range(PARTITIONS))
        lag = sum(worker.lag().values())
        if done != n or lag:
            run.note = f"committed {done} of {n} input offsets, {lag} records not processed"
    finally:
        await worker.stop()
        gc.set_threshold(*gc_default)
    run.late = await records_in(url, f"bench-{tag}-late")
    run.closed = await records_in(url, f"closed-{tag}")
    run.out_records = run.closed
    return run


# -- main ----------------------------------------------------------------------------------------


def line(run: AlignRun) -> str:
    broker = "" if run.broker_cpu_s is None else f"  broker CPU {run.broker_cpu_s:6.1f} s"
    note = f"  [{run.note}]" if run.note else ""
    return (f"  {run.variant:<5} {run.total_rate:>9,.0f} ev/s ({run.total_s:6.1f} s)  {run.cpu_rate:>9,.0f} ev/CPU-s "
            f"(CPU {run.cpu_s:6.1f} s){broker}  late {run.late:>8,}  closed {run.closed:>8,}  "
            f"waits {'/'.join(f'{w:,}' for w in run.waits) or '-'}  load {run.load:.1f}{note}")


def report(results: dict[str, list[AlignRun]], want: tuple[int, int] | None) -> None:
    medians = {m: Medians.of(list[Run](runs)) for m, runs in results.items() if runs}
    base = medians.get("off")
    print("\nmedians; ev/CPU-s = input records per CPU second of the worker's process; ratios against off:")
    print(f"  {'max_task_drift_ms':<18} {'end-to-end ev/s':>16} {'ev/CPU-s':>10} {'e2e ratio':>10} {'CPU ratio':>10} "
          f"{'late':>9} {'closed':>9} {'waits (source/windowed)':>24}")
    for mode, med in medians.items():
        runs = results[mode]
        ratios = ["-", "-"] if base is None or not base.total or not base.per_cpu else [
            f"{med.total / base.total:.0%}", f"{med.per_cpu / base.per_cpu:.0%}"]
        late = "/".join(f"{r.late:,}" for r in runs) if len({r.late for r in runs}) > 1 else f"{runs[0].late:,}"
        closed = "/".join(f"{r.closed:,}" for r in runs) if len({r.closed for r in runs}) > 1 else f"{runs[0].closed:,}"
        waits = sorted(runs, key=lambda r: r.total_rate)[len(runs) // 2].waits
        label = "None (off)" if mode == "off" else mode
        print(f"  {label:<18} {med.total:>16,.0f} {med.per_cpu:>10,.0f} {ratios[0]:>10} {ratios[1]:>10} "
              f"{late:>9} {closed:>9} {'/'.join(f'{w:,}' for w in waits) or '-':>24}")
    print("  runs (end-to-end ev/s): " + "; ".join(
        f"{m}: " + ", ".join(f"{r.total_rate:,.0f}" for r in runs) for m, runs in results.items()))
    if want is not None:
        print(f"  the model (the merged order, what drift 0 must give): late {want[0]:,}, closed {want[1]:,}")
    notes = [(r.variant, r.note) for runs in results.values() for r in runs if r.note]
    if notes:
        print("\nruns with notes:")
        for mode, note in notes:
            print(f"  {mode}: {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="page views (split over 4 partitions)")
    parser.add_argument("--minutes", type=int, default=None,
                        help=f"the span of event time (default: --events / {ISSUE_EVENTS_PER_MINUTE}, the issue's density)")
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (each mode once per round; medians reported)")
    parser.add_argument("--log", choices=("broker", "embedded"), default="broker",
                        help="a streamkit broker subprocess (kafka://) or the embedded log (file://)")
    parser.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="compute the model's late records and closed windows (untimed) and hold mode 0 to them")
    parser.add_argument("--check-model", action="store_true",
                        help="only compare --check's one-pass count with the tests' reference model (small --events)")
    parser.add_argument("--profile", action="store_true", help="cProfile the runs (slows them)")
    parser.add_argument("--profile-dir", type=Path, default=HERE / ".data" / "profiles")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp dir goes (default: system temp)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        parser.error(f"unknown modes {unknown}: use a subset of {','.join(MODES)}")
    if args.events < PARTITIONS:
        parser.error(f"--events must be at least {PARTITIONS}")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    minutes = args.minutes if args.minutes is not None else max(1, args.events // ISSUE_EVENTS_PER_MINUTE)
    if minutes < 1:
        parser.error("--minutes must be at least 1")

    # The off mode's late records make the table's lateness warning fire once per run: the
    # late counts below say it.
    logging.getLogger("streamkit.windows.lateness").setLevel(logging.ERROR)
    started = time.perf_counter()
    views = page_views(args.events, args.seed, minutes=minutes)
    n = sum(len(part) for part in views)
    want: tuple[int, int] | None = None
    if args.check:
        want = model_counts(views)
    if args.check_model:
        late, closed = expected(views)
        if (len(late), len(closed)) != want:
            sys.exit(f"model_counts gives {want}, tests.runtime.pageviews.expected {(len(late), len(closed))}")
        print(f"model_counts agrees with tests.runtime.pageviews.expected: {want}")
        return
    prepared = time.perf_counter() - started
    children = Children()
    base = Path(tempfile.mkdtemp(prefix="alignment-bench-", dir=args.dir))
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict[str, list[AlignRun]] = {m: [] for m in modes}
    try:
        per_partition_s = minutes * 60 / (n / PARTITIONS)
        print(f"{n:,} page views over {minutes:,} minutes ({n / minutes:,.0f} a minute, one every "
              f"{per_partition_s:.2f} s per partition), {PARTITIONS} partitions, seed {args.seed}; "
              f"modes {','.join(modes)} x {args.repeat}; log {args.log}; {machine_note()}; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; in {base}")
        if want is not None:
            print(f"  the model: {want[0]:,} late records, {want[1]:,} closed windows (input and model in {prepared:.1f} s)")
        broker: Broker | None = None
        if args.log == "broker":
            broker = Broker(children, base / "broker")
            url = broker.url
        else:
            url = f"file://{base / 'log'}"
        started = time.perf_counter()
        asyncio.run(preload(url, views))
        where = f"broker on {broker.bootstrap}" if broker else url
        print(f"  {where}; loaded the input in {time.perf_counter() - started:.1f} s", flush=True)
        del views
        for i in range(args.repeat):
            for mode in modes:
                tag = f"{'off' if mode == 'off' else 'd' + mode}-{i}"
                gc.collect()
                with profiled(args.profile, tag, args.profile_dir, 30, "alignment"):
                    run = asyncio.run(run_worker(mode, tag, url, n, broker, base / "state" / tag))
                if mode == "0" and want is not None and (run.late, run.closed) != want:
                    run.note = "; ".join(x for x in (run.note, f"the model has {want[0]:,} late, {want[1]:,} closed") if x)
                shutil.rmtree(base / "state" / tag, ignore_errors=True)
                results[mode].append(run)
                print(line(run), flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
        children.stop_all()
        shutil.rmtree(base, ignore_errors=True)
    report(results, want)


if __name__ == "__main__":
    main()
