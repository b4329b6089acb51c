"""Throughput of ``streamkit broker`` beside the in-process log, the raw disk and loopback TCP.

All measurements move the same records (``--records`` of ``--record-bytes`` each):

1. raw disk: the same number of bytes written to a file in 1 MiB chunks (then fsync) and read
   back; loopback TCP: as many bytes through a socket between two threads, from memory
   (``sendall``) and from a cached file (``sendfile``): the machine's ceilings;
2. in-process log, batches: ``Partition.append`` of batches of about ``--batch-bytes`` (built
   beforehand, as a producer sends them), then ``Partition.read`` of everything in 1 MiB reads;
3. in-process log, records: the same records encoded one by one (``BatchBuilder``) and
   appended, then read back and decoded (``decode_batches``): the bare codec and log;
4. in-process transport: the embedded transport's producer (``send_nowait`` per record) and
   consumer (``getmany``, each value looked at): what an app on the embedded log gets;
5. through the wire, batches: the prebuilt batches sent as Produce requests (acks=1, 5 in
   flight) over one socket, then fetched back with Fetch requests: the broker's own cost;
6. through the wire, confluent-kafka (librdkafka): a producer with acks=1, ``linger.ms`` and
   ``batch.size``, timed until ``flush`` returns; then a consumer reading every record back,
   timed from its first record to its last.

7. ``--durable-cost`` (alone): what ``streamkit broker --durable`` costs. Producers that wait
   for each ack (acks=all, one request of ``--durable-batch`` records in flight each), 1 and 16
   of them (``--durable-producers``), against a default broker and a ``--durable`` one; the
   requests each fsync covered (group commit) come from the broker's log. Then confluent-kafka
   with big batches (acks=all) against both.

For each wire phase the broker's CPU seconds (from /proc) are printed too, which tells whether
the broker or the client was the bottleneck. ``--repeat N`` runs everything N times and
reports medians (the machine is noisy), with the range of each ratio.

Goals (issue 3): produce through the wire >= 60% of the in-process append rate, consume >= 60%
of the in-process read rate. Read per record, as an app sees them, they compare a real Kafka
client over the wire with the embedded transport in-process (4 and 6); the batch-level
ratios (2 and 5) show the broker's own cost. Run small with ``--size-mb 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aiokafka.protocol.fetch import FetchRequest_v11
from aiokafka.protocol.metadata import MetadataRequest_v5
from aiokafka.protocol.produce import ProduceRequest_v7
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streamkit.log.manager import LogManager
from streamkit.log.records import BatchBuilder, decode_batches, iter_batches
from streamkit.transport.embedded.client import EmbeddedLogClient

MIB = 1024 * 1024
TOPIC = "bench"
STREAMKIT = Path(sys.executable).parent / "streamkit"  # the installed console script, as users run it


@dataclass
class Rate:
    name: str
    records: int
    nbytes: int
    seconds: float
    broker_cpu_s: float | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e6

    def line(self) -> str:
        records = f"{self.records_per_s:>12,.0f} rec/s" if self.records else " " * 18
        cpu = "" if self.broker_cpu_s is None else f"  broker CPU {self.broker_cpu_s:5.2f} s"
        return f"{self.name:<40} {records} {self.mb_per_s:>9,.1f} MB/s {self.seconds:>7.2f} s{cpu}"


def values(count: int, size: int) -> list[bytes]:
    pad = b"x" * size
    return [(b"%012d" % i + pad)[:size] for i in range(count)]


def settle() -> None:
    """Write back dirty pages first, so one phase's writes do not slow down the next."""
    os.sync()
    time.sleep(0.5)


def raw_disk(directory: Path, nbytes: int) -> tuple[Rate, Rate]:
    chunk = os.urandom(MIB)
    settle()
    path = directory / "raw.bin"
    started = time.perf_counter()
    written = 0
    with open(path, "wb") as f:
        while written < nbytes:
            f.write(chunk)
            written += len(chunk)
        f.flush()
        os.fsync(f.fileno())
    write = Rate("raw disk write + fsync", 0, written, time.perf_counter() - started)
    started = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(MIB):
            pass
    read = Rate("raw disk read (page cache)", 0, written, time.perf_counter() - started)
    path.unlink()
    return write, read


def chunks(records: list[bytes], batch_bytes: int) -> list[list[bytes]]:
    per_batch = max(1, batch_bytes // (len(records[0]) + 8))
    return [records[i : i + per_batch] for i in range(0, len(records), per_batch)]


def encode(group: list[bytes], now_ms: int) -> bytes:
    """One batch encoded record by record, as the embedded producer does (``BatchBuilder``)."""
    builder = BatchBuilder()
    for value in group:
        builder.append(None, value, now_ms)
    return builder.build()


def in_process(directory: Path, groups: list[list[bytes]], batches: list[bytes]) -> list[Rate]:
    count = sum(len(g) for g in groups)
    value_bytes = sum(len(v) for g in groups for v in g)
    nbytes = sum(len(b) for b in batches)
    out = []
    # The same log settings the broker runs with (and the embedded transport): the upkeep
    # thread flushes every flush.ms=1000, which also costs the appending thread.
    with LogManager(directory / "inproc") as log:
        log.create_topic(TOPIC, 1)
        log.create_topic(TOPIC + "-records", 1)
        partition = log.partition(TOPIC, 0)
        settle()
        started = time.perf_counter()
        for data in batches:
            partition.append(data)
        out.append(Rate("in-process append (batches)", count, nbytes, time.perf_counter() - started))
        started = time.perf_counter()
        got = read_all(partition)
        out.append(Rate("in-process read (batches)", got, nbytes, time.perf_counter() - started))
        encoded = log.partition(TOPIC + "-records", 0)
        now_ms = int(time.time() * 1000)
        settle()
        started = time.perf_counter()
        for group in groups:
            encoded.append(encode(group, now_ms), verify_crc=False)
        out.append(Rate("in-process encode + append (records)", count, value_bytes, time.perf_counter() - started))
        started = time.perf_counter()
        decoded = 0
        offset, end = 0, encoded.high_watermark
        while offset < end:
            data = encoded.read(offset, MIB)
            for header, records in decode_batches(data):
                decoded += len(records)
                offset = header.next_offset
        out.append(Rate("in-process read + decode (records)", decoded, value_bytes, time.perf_counter() - started))
    return out


async def _embedded(directory: Path, records: list[bytes], now_ms: int) -> tuple[Rate, Rate]:
    client = EmbeddedLogClient(str(directory / "embedded"))
    await client.start()
    try:
        await client.ensure_topic(TOPIC, 1)
        producer = client.producer()
        await producer.start()
        settle()
        started = time.perf_counter()
        send = producer.send_nowait
        for value in records:
            wait = send(TOPIC, 0, None, value, now_ms)
            if wait is not None:
                await wait
        await producer.flush()
        produced = Rate("in-process producer (embedded transport)", len(records), sum(map(len, records)),
                        time.perf_counter() - started)

        class Quiet:
            async def on_partitions_revoked(self, revoked: object) -> None: ...
            async def on_partitions_assigned(self, assigned: object) -> None: ...

        consumer = client.consumer("bench")
        consumer.subscribe([TOPIC], Quiet())  # type: ignore[arg-type]
        await consumer.start()
        started = time.perf_counter()
        got = value_bytes = 0
        while got < len(records):
            for batch in (await consumer.getmany(1000, 100_000)).values():
                got += len(batch)
                for record in batch:  # what a reader does at least: look at each value
                    value_bytes += len(record.value or b"")
        consumed = Rate("in-process consumer (embedded transport)", got, value_bytes, time.perf_counter() - started)
        await consumer.aclose()
        return produced, consumed
    finally:
        await client.aclose()


def embedded(directory: Path, records: list[bytes]) -> tuple[Rate, Rate]:
    """What an app on the embedded log gets: the transport's producer and consumer, per record
    (the same log settings as the broker's, in this process)."""
    return asyncio.run(_embedded(directory, records, int(time.time() * 1000)))


def read_all(partition: object) -> int:
    offset, end, got = 0, partition.high_watermark, 0  # type: ignore[attr-defined]
    while offset < end:
        data = partition.read(offset, MIB)  # type: ignore[attr-defined]
        for _pos, header in iter_batches(data):
            got += header.records_count
            offset = header.next_offset
    return got


class BrokerProc:
    def __init__(self, data_dir: Path, *options: str) -> None:
        self.stderr_path = data_dir.with_name(data_dir.name + ".stderr")
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                [str(STREAMKIT), "broker", "--data-dir", str(data_dir), "--port", "0", "--log-level", "info",
                 *options],
                stdout=subprocess.PIPE, stderr=stderr, text=True,
            )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (\S+):(\d+) \(", line)
        if match is None:
            self.proc.kill()
            raise SystemExit(f"broker did not start: {line!r}")
        self.host, self.port = match.group(1), int(match.group(2))
        self.bootstrap = f"{self.host}:{self.port}"

    def fsync_rounds(self) -> tuple[int, int] | None:
        """(fsync rounds, produce requests) a stopped ``--durable`` broker logged."""
        match = re.search(r"durable: (\d+) fsync rounds for (\d+) produce requests", self.stderr_path.read_text())
        return None if match is None else (int(match.group(1)), int(match.group(2)))

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


class RawWire:
    """One socket; requests framed by hand around bodies encoded by aiokafka's structs."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.file = self.sock.makefile("rb", buffering=4 * MIB)
        self.correlation_id = 0

    def frame(self, request: object) -> bytes:
        self.correlation_id += 1
        header = struct.pack(">hhih", request.API_KEY, request.API_VERSION, self.correlation_id, 5) + b"bench"  # type: ignore[attr-defined]
        body = request.encode()  # type: ignore[attr-defined]
        return struct.pack(">i", len(header) + len(body)) + header + body

    def send(self, request: object) -> None:
        self.sock.sendall(self.frame(request))

    def recv(self) -> bytes:
        (size,) = struct.unpack(">i", self.file.read(4))
        return self.file.read(size)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def wire_batches(broker: BrokerProc, batches: list[bytes], count: int) -> tuple[Rate, Rate]:
    """Produce the prebuilt batches over one socket (5 in flight), then fetch them back.

    Request frames are encoded before the clock starts and fetch responses are sliced, not
    decoded, so the client spends little and the figures show what the broker can do.
    """
    topic = TOPIC + "-raw"
    wire = RawWire(broker.host, broker.port)
    nbytes = sum(len(b) for b in batches)
    wire.send(MetadataRequest_v5(topics=[topic], allow_auto_topic_creation=True))  # creates it
    wire.recv()
    frames = [
        wire.frame(ProduceRequest_v7(transactional_id=None, required_acks=1, timeout=30_000,
                                     topics=[(topic, [(0, data)])]))
        for data in batches
    ]
    settle()
    cpu = broker.cpu_s()
    started = time.perf_counter()
    in_flight = 0
    for frame in frames:
        if in_flight >= 5:
            check_produce(wire.recv())
            in_flight -= 1
        wire.sock.sendall(frame)
        in_flight += 1
    for _ in range(in_flight):
        check_produce(wire.recv())
    produce = Rate("wire produce, prebuilt batches", count, nbytes, time.perf_counter() - started,
                   broker.cpu_s() - cpu)
    # FetchResponse v11, one partition, isolation_level 0 (aborted_transactions null): the
    # records are the tail of the frame after a fixed-size prefix.
    records_at = 4 + 4 + 2 + 4 + 4 + 2 + len(topic) + 4 + 4 + 2 + 8 + 8 + 8 + 4 + 4 + 4
    cpu = broker.cpu_s()
    started = time.perf_counter()
    offset, got, fetched = 0, 0, 0
    while got < count:
        wire.send(FetchRequest_v11(
            replica_id=-1, max_wait_time=500, min_bytes=1, max_bytes=50 * MIB, isolation_level=0,
            session_id=0, session_epoch=-1, topics=[(topic, [(0, -1, offset, -1, 4 * MIB)])],
            forgotten_topics_data=[], rack_id="",
        ))
        records = memoryview(wire.recv())[records_at:]
        fetched += len(records)
        for _pos, header in iter_batches(records):
            if header.last_offset >= offset:
                got += header.records_count
                offset = header.next_offset
    fetch = Rate("wire fetch, batches", got, fetched, time.perf_counter() - started, broker.cpu_s() - cpu)
    wire.close()
    return produce, fetch


def check_produce(frame: bytes) -> None:
    response = ProduceRequest_v7.RESPONSE_TYPE.decode(frame[4:])
    error = response.topics[0][1][0][1]
    if error:
        raise SystemExit(f"produce failed with error {error}")


def confluent_produce(broker: BrokerProc, records: list[bytes], args: argparse.Namespace, acks: int | str = 1) -> Rate:
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "acks": acks, "linger.ms": args.linger_ms,
        "batch.size": args.batch_bytes, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000, "compression.type": "none",
        # batch.size alone does not fill a batch: librdkafka also stops at batch.num.messages
        # (10,000 by default, about 1 MB of these records); allow as many as batch.size holds.
        "batch.num.messages": max(10_000, args.batch_bytes // 50),
    })
    producer.produce(TOPIC, b"warm-up")
    if producer.flush(30):
        raise SystemExit("the warm-up record was not acknowledged")
    settle()
    cpu = broker.cpu_s()
    started = time.perf_counter()
    # No per-record delivery callback: it costs the Python client more than the broker spends.
    # Completeness is checked instead by the consumer reading every record back.
    produce = producer.produce
    poll = producer.poll
    for value in records:
        try:
            produce(TOPIC, value)
        except BufferError:
            poll(0.05)
            produce(TOPIC, value)
    left = producer.flush(300)
    seconds = time.perf_counter() - started
    if left:
        raise SystemExit(f"{left} records unacknowledged")
    return Rate(f"wire produce, confluent-kafka acks={acks}", len(records), sum(map(len, records)), seconds,
                broker.cpu_s() - cpu)


def confluent_consume(broker: BrokerProc, count: int, value_bytes: int) -> Rate:
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "bench", "enable.auto.commit": False,
        # librdkafka prefetches only up to queued.min.messages and then, by default (>= 2.4),
        # pauses fetching for fetch.queue.backoff.ms = 1 s: a fast reader waits on that, not on
        # the broker. A deeper prefetch and no pause let it run at the client's own speed.
        "queued.min.messages": 1_000_000,
        "fetch.queue.backoff.ms": 0,
        # Bigger fetches than the 1 MiB per partition default: fewer round trips, each one a
        # sendfile of verified segment bytes on our side; room for them in the prefetch queue.
        "max.partition.fetch.bytes": 8 * MIB,
        "fetch.max.bytes": 64 * MIB,
        "queued.max.messages.kbytes": 256 * 1024,
    })
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    want = count + 1  # and the warm-up record
    got = 0
    deadline = time.perf_counter() + 600
    while got == 0:  # the clock starts at the first record (after connecting and ListOffsets)
        got = sum(1 for m in consumer.consume(1, 1.0) if m.error() is None)
        if time.perf_counter() > deadline:
            raise SystemExit("no record arrived")
    cpu = broker.cpu_s()
    started = time.perf_counter()
    first = got
    while got < want:
        if time.perf_counter() > deadline:
            raise SystemExit(f"consumed only {got} of {want}")
        messages = consumer.consume(min(10_000, want - got), 1.0)  # the batch API
        got += sum(1 for m in messages if m.error() is None)
    seconds = time.perf_counter() - started
    consumer.close()
    return Rate("wire consume, confluent-kafka", got - first, (got - first) * value_bytes, seconds,
                broker.cpu_s() - cpu)


def durable_cost(base: Path, args: argparse.Namespace) -> None:
    """What ``--durable`` costs: producers that each wait for every ack (acks=all, one request
    in flight, ``--durable-batch`` records per request) against a default broker and a
    ``--durable`` one; then the same with confluent-kafka's big batches. Each phase runs
    ``--durable-seconds``; records/s and the mean time to an ack are printed."""
    value = b"x" * args.record_bytes
    batch = encode([value] * args.durable_batch, int(time.time() * 1000))
    print(f"--durable: {args.durable_batch} records of {args.record_bytes} B per request, acks=all, "
          f"one request in flight per producer, {args.durable_seconds:g} s per phase")
    rows = []
    for producers in args.durable_producers:
        for options in ((), ("--durable",)):
            name = "--durable" if options else "default"
            broker = BrokerProc(base / f"durable-{name}-{producers}", *options)
            try:
                count, seconds, latencies = _acked_producers(broker, batch, producers, args.durable_seconds)
            finally:
                broker.stop()
            records = count * args.durable_batch
            rows.append((producers, name, records / seconds, count / seconds,
                         statistics.mean(latencies) * 1000 if latencies else 0.0, broker.fsync_rounds()))
    print(f"{'producers':>9} {'broker':>10} {'records/s':>12} {'requests/s':>11} {'mean ack ms':>12} "
          f"{'requests per fsync':>19}")
    for producers, name, rps, qps, ms, rounds in rows:
        shared = "-" if rounds is None else f"{rounds[1] / max(rounds[0], 1):.1f}"
        print(f"{producers:>9} {name:>10} {rps:>12,.0f} {qps:>11,.0f} {ms:>12.2f} {shared:>19}")
    for options in ((), ("--durable",)):
        broker = BrokerProc(base / f"durable-confluent-{len(options)}", *options)
        try:
            count = max(1, int(args.durable_seconds * 200_000))
            records = [value] * count
            rate = confluent_produce(broker, records, args, acks="all")
        finally:
            broker.stop()
        print(f"confluent-kafka acks=all, batch.size={args.batch_bytes}, {'--durable' if options else 'default':>9}: "
              f"{rate.records_per_s:,.0f} rec/s")


def _acked_producers(broker: BrokerProc, batch: bytes, producers: int, seconds: float) -> tuple[int, float, list[float]]:
    """``producers`` threads, each one socket sending ``batch`` and waiting for its ack, for ``seconds``."""
    topic = f"{TOPIC}-acked"
    setup = RawWire(broker.host, broker.port)
    setup.send(MetadataRequest_v5(topics=[topic], allow_auto_topic_creation=True))  # creates it
    setup.recv()
    setup.close()
    latencies: list[float] = []
    counts = [0] * producers
    start = threading.Barrier(producers + 1)
    stop_at = [0.0]

    def run(i: int) -> None:
        wire = RawWire(broker.host, broker.port)
        frame = wire.frame(ProduceRequest_v7(transactional_id=None, required_acks=-1, timeout=30_000,
                                             topics=[(topic, [(0, batch)])]))
        own: list[float] = []
        start.wait()
        while time.perf_counter() < stop_at[0]:
            sent = time.perf_counter()
            wire.sock.sendall(frame)
            check_produce(wire.recv())
            own.append(time.perf_counter() - sent)
            counts[i] += 1
        wire.close()
        latencies.extend(own)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(producers)]
    for thread in threads:
        thread.start()
    settle()
    started = time.perf_counter()
    stop_at[0] = started + seconds
    start.wait()
    for thread in threads:
        thread.join()
    return sum(counts), time.perf_counter() - started, latencies


def loopback_tcp(nbytes: int) -> tuple[Rate, Rate]:
    """The machine's own ceiling for the wire: bytes through a loopback socket between two
    threads, from memory (sendall) and from a cached file (sendfile), read with recv_into."""
    chunk = os.urandom(4 * MIB)
    out = []
    for name, use_file in (("loopback TCP, sendall -> recv_into", False), ("loopback TCP, sendfile -> recv_into", True)):
        with tempfile.TemporaryFile() as f, socket.socket() as server:
            if use_file:
                for _ in range(0, nbytes, len(chunk)):
                    f.write(chunk)
                f.flush()
                f.seek(0)
                while f.read(4 * MIB):  # in the page cache, as a segment the broker serves
                    pass
            server.bind(("127.0.0.1", 0))
            server.listen()
            total = -(-nbytes // len(chunk)) * len(chunk)

            def receive(total: int = total) -> None:
                conn, _ = server.accept()
                with conn:
                    view, got = memoryview(bytearray(4 * MIB)), 0
                    while got < total:
                        n = conn.recv_into(view)
                        if not n:
                            break
                        got += n

            reader = threading.Thread(target=receive)
            reader.start()
            with socket.create_connection(server.getsockname()) as sock:
                started = time.perf_counter()
                sent = 0
                while sent < total:
                    if use_file:
                        sent += os.sendfile(sock.fileno(), f.fileno(), sent, total - sent)
                    else:
                        sock.sendall(chunk)
                        sent += len(chunk)
            reader.join()
            out.append(Rate(name, 0, total, time.perf_counter() - started))
    return out[0], out[1]


def one_run(base: Path, records: list[bytes], args: argparse.Namespace) -> dict[str, Rate]:
    count = len(records)
    disk_write, disk_read = raw_disk(base, count * args.record_bytes)
    tcp_send, tcp_sendfile = loopback_tcp(count * args.record_bytes)
    groups = chunks(records, args.batch_bytes)
    now_ms = int(time.time() * 1000)
    batches = [encode(g, now_ms) for g in groups]
    gc.freeze()  # (see main)
    append, read, append_records, read_records = in_process(base, groups, batches)
    embedded_produce, embedded_consume = embedded(base, records)
    # Free the in-process phases' files before the broker writes its own. On a VM, page-cache
    # pages the guest has not touched lately can cost many times more to fill than pages just
    # freed (the host backs them on first touch): the in-process phases write into pages the
    # raw-disk phase freed, so the broker gets the same chance.
    for name in ("inproc", "embedded"):
        shutil.rmtree(base / name, ignore_errors=True)
    broker = BrokerProc(base / "broker")
    try:
        raw_produce, raw_fetch = wire_batches(broker, batches, count)
        produce = confluent_produce(broker, records, args)
        consume = confluent_consume(broker, count, args.record_bytes)
    finally:
        broker.stop()
    rates = (disk_write, disk_read, tcp_send, tcp_sendfile, append, read, append_records, read_records,
             embedded_produce, embedded_consume, raw_produce, raw_fetch, produce, consume)
    return {rate.name: rate for rate in rates}


# (label, numerator, denominator, goal): the ratios printed, in groups.
RATIOS: list[tuple[str, list[tuple[str, str, str, float | None]]]] = [
    ("The goal (issue 3): what a Python app gets through the wire with a real Kafka client,\n"
     "against what it gets in-process from the embedded transport, per record of the same size", [
        ("confluent produce / in-process producer", "wire produce, confluent-kafka acks=1",
         "in-process producer (embedded transport)", 0.6),
        ("confluent consume / in-process consumer", "wire consume, confluent-kafka",
         "in-process consumer (embedded transport)", 0.6),
    ]),
    ("Per record, the real client vs the bare codec and log (no producer API around them)", [
        ("confluent produce / in-process encode + append", "wire produce, confluent-kafka acks=1",
         "in-process encode + append (records)", None),
        ("confluent consume / in-process read + decode", "wire consume, confluent-kafka",
         "in-process read + decode (records)", None),
    ]),
    ("The broker's own cost: prebuilt batches over one socket vs the same batches in-process", [
        ("wire produce of batches / in-process append (batches)", "wire produce, prebuilt batches",
         "in-process append (batches)", None),
        ("wire fetch of batches / in-process read (batches)", "wire fetch, batches", "in-process read (batches)", None),
    ]),
    ("The wire vs the machine's loopback TCP (bytes/s)", [
        ("wire fetch of batches / loopback sendfile", "wire fetch, batches", "loopback TCP, sendfile -> recv_into", None),
        ("wire fetch of batches / loopback sendall", "wire fetch, batches", "loopback TCP, sendall -> recv_into", None),
        ("wire produce of batches / loopback sendall", "wire produce, prebuilt batches",
         "loopback TCP, sendall -> recv_into", None),
    ]),
    ("The log vs the raw disk (bytes/s)", [
        ("in-process append (batches) / raw disk write", "in-process append (batches)", "raw disk write + fsync", None),
        ("in-process read (batches) / raw disk read", "in-process read (batches)", "raw disk read (page cache)", None),
    ]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--records", type=int, help="records to send (default: from --size-mb)")
    size.add_argument("--size-mb", type=float, default=200.0, help="MB of record values to send")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000, help="producer batch.size")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=1, help="runs of every phase; medians are reported")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the data (default: a temp dir)")
    parser.add_argument("--durable-cost", action="store_true",
                        help="only measure what 'streamkit broker --durable' costs (see durable_cost)")
    parser.add_argument("--durable-producers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16],
                        help="producer counts for --durable-cost, comma-separated")
    parser.add_argument("--durable-batch", type=int, default=10, help="records per request for --durable-cost")
    parser.add_argument("--durable-seconds", type=float, default=5.0, help="seconds per --durable-cost phase")
    args = parser.parse_args()
    if args.durable_cost:
        base = Path(tempfile.mkdtemp(prefix="broker-bench-", dir=args.dir))
        try:
            durable_cost(base, args)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return
    count = args.records or int(args.size_mb * 1e6 / args.record_bytes)
    print(f"{count:,} records of {args.record_bytes} bytes ({count * args.record_bytes / 1e6:,.0f} MB), "
          f"batch.size={args.batch_bytes}, linger.ms={args.linger_ms}, {os.cpu_count()} CPUs, "
          f"{args.repeat} run(s)")
    records = values(count, args.record_bytes)
    # The benchmark's own data (millions of values, then the prebuilt batches) is no part of
    # what is measured: moved out of the collector's sight, so that clients whose objects
    # the collector tracks (confluent's Messages) do not pay for scanning it. A consumer app
    # does not hold 3M values; this halved confluent's consume rate at 300 MB.
    gc.collect()
    gc.freeze()
    runs: list[dict[str, Rate]] = []
    for i in range(args.repeat):
        base = Path(tempfile.mkdtemp(prefix="broker-bench-", dir=args.dir))
        try:
            runs.append(one_run(base, records, args))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        if args.repeat > 1:
            print(f"run {i + 1}: " + ", ".join(
                f"{label.split(' / ')[0]} {_ratio(runs[-1], num, den):.0%}"
                for _title, rows in RATIOS[:1] for label, num, den, _goal in rows))
    print()
    for name in runs[0]:
        print(_median_rate([run[name] for run in runs]).line())
    for title, rows in RATIOS:
        print("\n" + title)
        for label, num, den, goal in rows:
            values_ = sorted(_ratio(run, num, den) for run in runs)
            value = statistics.median(values_)
            spread = f"  (runs {values_[0]:.0%}-{values_[-1]:.0%})" if len(runs) > 1 else ""
            verdict = "" if goal is None else f"  goal >= {goal:.0%}: {'met' if value >= goal else 'MISSED'}"
            print(f"{label:<58} {value:7.1%}{verdict}{spread}")


def _ratio(run: dict[str, Rate], num: str, den: str) -> float:
    a, b = run[num], run[den]
    if a.records and b.records:
        return a.records_per_s / b.records_per_s
    return a.mb_per_s / b.mb_per_s


def _median_rate(rates: list[Rate]) -> Rate:
    """The run with the median rate (so its seconds and broker CPU go with it)."""
    ordered = sorted(rates, key=lambda r: r.mb_per_s)
    return ordered[len(ordered) // 2]


if __name__ == "__main__":
    main()
