"""Kafka's own performance tools against ``streamkit broker`` and against Apache Kafka (issue 26).

Per broker (``--broker streamkit,kafka``, started by ``kstreams_peer.open_broker``) and per
run, a new 4-partition topic; Apache Kafka 4.4's ``ProducerPerformance`` (what
``kafka-producer-perf-test.sh`` runs) writes ``--records`` records of ``--record-size`` bytes
as fast as it can (``--acks``: ``all`` and ``1`` by default, each its own rows), then ``ConsumerPerformance`` (``kafka-consumer-perf-test.sh``)
reads them back in a new group. Both are the tools' own figures (records/s, MB/s, latency
percentiles; the consumer's rate over its fetch time, the group join left out); beside them the
broker's CPU-seconds over each phase, from /proc, so the broker's cost per record shows too.
Medians of ``--repeat`` runs per acks setting after ``--warmup`` runs per broker that are
printed but not counted (a fresh JVM's broker speeds up threefold over its first runs as its
code is compiled); ratios streamkit broker / Apache Kafka from the same run, per acks setting.

    python benchmarks/kafka_perf.py                                  # 2M records of 100 B, 3 runs
    python benchmarks/kafka_perf.py --records 200000 --repeat 1      # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from engine_bench import Children, create_topics, delete_topic, machine_note
from kstreams_peer import AnyBroker, classpath, close_broker, open_broker, parse_brokers

TOOLS = "org.apache.kafka.tools."
HEAP = "-Xmx512m"
_PRODUCED = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


@dataclass
class Perf:
    produce_rate: float = 0.0  # records/s, the tool's
    produce_mb_s: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    produce_broker_cpu_s: float = 0.0
    consume_rate: float = 0.0  # records/s over the fetch time, the tool's fetch.nMsg.sec
    consume_mb_s: float = 0.0
    consume_broker_cpu_s: float = 0.0


def tool(main: str, *args: str) -> str:
    """Run one of Kafka's tools to its end: its stdout; a failure raises with its stderr."""
    done = subprocess.run(["java", HEAP, "-cp", classpath("kafka"), TOOLS + main, *args],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{main} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return done.stdout


def one_run(broker: AnyBroker, topic: str, n: int, size: int, acks: str) -> Perf:
    perf = Perf()
    asyncio.run(create_topics(broker.bootstrap, [topic]))
    cpu = broker.cpu_s()
    out = tool("ProducerPerformance", "--topic", topic, "--num-records", str(n), "--record-size", str(size),
               "--throughput", "-1", "--command-property", f"bootstrap.servers={broker.bootstrap}", f"acks={acks}")
    perf.produce_broker_cpu_s = broker.cpu_s() - cpu
    match = _PRODUCED.search(out)
    if match is None or int(match.group(1)) != n:
        raise RuntimeError(f"ProducerPerformance did not send {n} records:\n{out[-2000:]}")
    perf.produce_rate, perf.produce_mb_s = float(match.group(2)), float(match.group(3))
    perf.p50_ms, perf.p99_ms = float(match.group(6)), float(match.group(8))
    cpu = broker.cpu_s()
    out = tool("ConsumerPerformance", "--bootstrap-server", broker.bootstrap, "--topic", topic,
               "--num-records", str(n), "--timeout", "60000", "--group", f"perf-{topic}")
    perf.consume_broker_cpu_s = broker.cpu_s() - cpu
    fields = [f.strip() for f in out.strip().splitlines()[-1].split(",")]
    # start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s, fetch records/s
    if len(fields) < 10 or int(fields[4]) != n:
        raise RuntimeError(f"ConsumerPerformance did not read {n} records:\n{out[-2000:]}")
    perf.consume_mb_s, perf.consume_rate = float(fields[8]), float(fields[9])
    asyncio.run(delete_topic(broker.bootstrap, topic))
    return perf


def median(runs: list[Perf], name: str) -> float:
    return statistics.median(float(getattr(r, name)) for r in runs)


def report(results: dict[tuple[str, str], list[Perf]], n: int) -> None:
    print(f"\nmedians ({n:,} records a run); broker CPU = the broker process's CPU-seconds over the phase:")
    print(f"  {'broker':<10} {'acks':>4} {'produce rec/s':>14} {'MB/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'broker CPU-s':>13}"
          f" {'consume rec/s':>14} {'MB/s':>7} {'broker CPU-s':>13}")
    for (kind, acks), runs in results.items():
        print(f"  {kind:<10} {acks:>4} {median(runs, 'produce_rate'):>14,.0f} {median(runs, 'produce_mb_s'):>7.1f}"
              f" {median(runs, 'p50_ms'):>7.0f} {median(runs, 'p99_ms'):>7.0f}"
              f" {median(runs, 'produce_broker_cpu_s'):>13.1f} {median(runs, 'consume_rate'):>14,.0f}"
              f" {median(runs, 'consume_mb_s'):>7.1f} {median(runs, 'consume_broker_cpu_s'):>13.1f}")
    for acks in dict.fromkeys(a for _, a in results):
        if ("streamkit", acks) not in results or ("kafka", acks) not in results:
            continue
        s, k = results["streamkit", acks], results["kafka", acks]
        print(f"\n  streamkit broker / Apache Kafka, acks={acks}: produce "
              f"{median(s, 'produce_rate') / median(k, 'produce_rate'):.0%}, consume "
              f"{median(s, 'consume_rate') / median(k, 'consume_rate'):.0%}; broker CPU-s per record, produce "
              f"{median(s, 'produce_broker_cpu_s') / median(k, 'produce_broker_cpu_s'):.1f}x, consume "
              f"{median(s, 'consume_broker_cpu_s') / max(median(k, 'consume_broker_cpu_s'), 0.01):.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000, help="records produced and consumed per run")
    parser.add_argument("--record-size", type=int, default=100, help="bytes per record value")
    parser.add_argument("--repeat", type=int, default=3, help="runs per broker (the median is reported)")
    parser.add_argument("--warmup", type=int, default=1, help="runs per broker before those, not counted")
    parser.add_argument("--broker", default="streamkit,kafka", help="streamkit, kafka (Apache Kafka) or both")
    parser.add_argument("--acks", default="all,1", help="the producer's acks settings, each measured (all, 1, 0)")
    parser.add_argument("--dir", type=Path, default=None, help="where the temp dir goes (default: system temp)")
    args = parser.parse_args()
    for name in ("records", "record_size", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    try:
        kinds = parse_brokers(args.broker)
    except ValueError as exc:
        parser.error(str(exc))
    ackses = [a.strip() for a in args.acks.split(",") if a.strip()]
    if not ackses or set(ackses) - {"all", "1", "0", "-1"}:
        parser.error(f"--acks takes all, 1, 0 or -1, comma-separated, not {args.acks!r}")
    children = Children()
    base = Path(tempfile.mkdtemp(prefix="kafka-perf-", dir=args.dir))
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict[tuple[str, str], list[Perf]] = {}
    try:
        print(f"{args.records:,} records of {args.record_size} B, acks {', '.join(ackses)}; {machine_note()}; in {base}")
        for kind in kinds:
            broker = open_broker(kind, children, base / f"broker-{kind}")
            runs = [(ackses[0], True)] * args.warmup + [(acks, False) for acks in ackses for _ in range(args.repeat)]
            for i, (acks, warmup) in enumerate(runs):
                perf = one_run(broker, f"perf-{i}", args.records, args.record_size, acks)
                if not warmup:
                    results.setdefault((kind, acks), []).append(perf)
                print(f"  {kind:<10} acks={acks:<3} {'(warm-up) ' if warmup else ''}produce {perf.produce_rate:>10,.0f} rec/s "
                      f"(p99 {perf.p99_ms:.0f} ms, broker CPU {perf.produce_broker_cpu_s:.1f} s)  consume "
                      f"{perf.consume_rate:>10,.0f} rec/s (broker CPU {perf.consume_broker_cpu_s:.1f} s)", flush=True)
            close_broker(broker, children)
    finally:
        signal.signal(signal.SIGTERM, previous)
        children.stop_all()
        shutil.rmtree(base, ignore_errors=True)
    report(results, args.records)


if __name__ == "__main__":
    main()
