"""Throughput of ``streamkit broker`` beside the in-process log and the raw disk, in one run.

All measurements move the same records (``--records`` of ``--record-bytes`` each):

1. raw disk: the same number of bytes written to a file in 1 MiB chunks (then fsync) and read
   back;
2. in-process log, batches: ``Partition.append`` of batches of about ``--batch-bytes`` (built
   beforehand, as a producer sends them), then ``Partition.read`` of everything in 1 MiB reads;
3. in-process log, records: the same records encoded into those batches and appended
   (``build_batch`` + ``append``), then read back and decoded (``decode_batches``): what an
   embedded producer and consumer do per record;
4. through the wire, batches: the prebuilt batches sent as Produce requests (acks=1, 5 in
   flight) over one socket, then fetched back with Fetch requests: the broker's own cost;
5. through the wire, confluent-kafka (librdkafka): a producer with acks=1, ``linger.ms`` and
   ``batch.size``, timed until ``flush`` returns; then a consumer reading every record back,
   timed from its first record to its last.

For each wire phase the broker's CPU seconds (from /proc) are printed too, which tells whether
the broker or the client was the bottleneck.

Goals (issue 3): produce through the wire >= 60% of the in-process append rate, consume >= 60%
of the in-process read rate. Run small with ``--size-mb 20``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aiokafka.protocol.fetch import FetchRequest_v11
from aiokafka.protocol.metadata import MetadataRequest_v5
from aiokafka.protocol.produce import ProduceRequest_v7
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord, build_batch, decode_batches, iter_batches

MIB = 1024 * 1024
TOPIC = "bench"


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
    return build_batch([NewRecord(None, value, now_ms) for value in group])


def in_process(directory: Path, groups: list[list[bytes]], batches: list[bytes]) -> list[Rate]:
    count = sum(len(g) for g in groups)
    value_bytes = sum(len(v) for g in groups for v in g)
    nbytes = sum(len(b) for b in batches)
    out = []
    with LogManager(directory / "inproc", background=False) as log:
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


def read_all(partition: object) -> int:
    offset, end, got = 0, partition.high_watermark, 0  # type: ignore[attr-defined]
    while offset < end:
        data = partition.read(offset, MIB)  # type: ignore[attr-defined]
        for _pos, header in iter_batches(data):
            got += header.records_count
            offset = header.next_offset
    return got


class BrokerProc:
    def __init__(self, data_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamkit.cli.broker", "--data-dir", str(data_dir), "--port", "0"],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = re.search(r"listening on (\S+):(\d+) \(", line)
        if match is None:
            self.proc.kill()
            raise SystemExit(f"broker did not start: {line!r}")
        self.host, self.port = match.group(1), int(match.group(2))
        self.bootstrap = f"{self.host}:{self.port}"

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


def confluent_produce(broker: BrokerProc, records: list[bytes], args: argparse.Namespace) -> Rate:
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": args.linger_ms,
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
    return Rate("wire produce, confluent-kafka acks=1", len(records), sum(map(len, records)), seconds,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--records", type=int, help="records to send (default: from --size-mb)")
    size.add_argument("--size-mb", type=float, default=200.0, help="MB of record values to send")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000, help="producer batch.size")
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to put the data (default: a temp dir)")
    args = parser.parse_args()
    count = args.records or int(args.size_mb * 1e6 / args.record_bytes)
    base = Path(tempfile.mkdtemp(prefix="broker-bench-", dir=args.dir))
    try:
        print(f"{count:,} records of {args.record_bytes} bytes ({count * args.record_bytes / 1e6:,.0f} MB), "
              f"batch.size={args.batch_bytes}, linger.ms={args.linger_ms}, {os.cpu_count()} CPUs, in {base}")
        records = values(count, args.record_bytes)
        disk_write, disk_read = raw_disk(base, count * args.record_bytes)
        groups = chunks(records, args.batch_bytes)
        now_ms = int(time.time() * 1000)
        batches = [encode(g, now_ms) for g in groups]
        append, read, append_records, read_records = in_process(base, groups, batches)
        broker = BrokerProc(base / "broker")
        try:
            raw_produce, raw_fetch = wire_batches(broker, batches, count)
            produce = confluent_produce(broker, records, args)
            consume = confluent_consume(broker, count, args.record_bytes)
        finally:
            broker.stop()
        for rate in (disk_write, disk_read, append, read, append_records, read_records,
                     raw_produce, raw_fetch, produce, consume):
            print(rate.line())
        print("\nThe broker's own cost: prebuilt batches over one socket vs the same batches in-process")
        ratio("wire produce of batches / in-process append (batches)", raw_produce, append, goal=0.6)
        ratio("wire fetch of batches / in-process read (batches)", raw_fetch, read, goal=0.6)
        print("\nLike for like, per record: the real client vs the in-process codec + log")
        ratio("confluent produce / in-process encode + append", produce, append_records, goal=0.6)
        ratio("confluent consume / in-process read + decode", consume, read_records, goal=0.6)
        print("\nThe real client vs in-process batches (includes the client's per-record work)")
        ratio("confluent produce / in-process append (batches)", produce, append, goal=0.6)
        ratio("confluent consume / in-process read (batches)", consume, read, goal=0.6)
        print("\nThe log vs the raw disk")
        ratio("in-process append (batches) / raw disk write", append, disk_write, by_bytes=True)
        ratio("in-process read (batches) / raw disk read", read, disk_read, by_bytes=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def ratio(what: str, num: Rate, den: Rate, *, goal: float | None = None, by_bytes: bool = False) -> None:
    value = num.mb_per_s / den.mb_per_s if by_bytes else num.records_per_s / den.records_per_s
    verdict = ""
    if goal is not None:
        verdict = f"  goal >= {goal:.0%}: {'met' if value >= goal else 'MISSED'}"
    print(f"{what:<58} {value:7.1%}{verdict}")


if __name__ == "__main__":
    main()
