"""Helpers of the Spark tests: topics written straight into a log, and read back as the truth.

The ``spark`` fixture (ONE local SparkSession for the whole test session) is in
``tests/conftest.py``, shared with the Spark tests outside this directory. The tests are
skipped only when the ``spark`` extra is not installed (``tests/conftest.py`` skips this
directory's modules then, without importing them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streamkit.log.manager import LogManager
from streamkit.log.records import NewRecord, Record


def make_topic(
    data_dir: Path,
    topic: str,
    partitions: int,
    records_per_partition: int,
    *,
    config: dict[str, str] | None = None,
    batch: int = 7,
    codec: int = 0,
    ts0: int = 1_700_000_000_000,
) -> None:
    """A topic whose records say where they are: key ``k<p>-<i>`` (every third one null),
    value ``v<p>-<i>`` (every fifth one null), headers on every other record, timestamps
    ``ts0 + i * 10``, appended in batches of ``batch``."""
    with LogManager(data_dir, background=False) as log:
        log.create_topic(topic, partitions, config or {})
        for p in range(partitions):
            part = log.partition(topic, p)
            pending: list[NewRecord] = []
            for i in range(records_per_partition):
                key = None if i % 3 == 2 else f"k{p}-{i}".encode()
                value = None if i % 5 == 4 else f"v{p}-{i}".encode() * (1 + i % 4)
                headers = [("n", str(i).encode()), ("empty", None)] if i % 2 else []
                pending.append(NewRecord(key, value, ts0 + i * 10, headers))
                if len(pending) == batch:
                    part.append_records(pending, compression_codec=codec)
                    pending = []
            if pending:
                part.append_records(pending, compression_codec=codec)


def log_records(data_dir: Path, topic: str) -> dict[int, list[Record]]:
    """Every record of every partition, read through the log itself (the truth)."""
    from streamkit.log.records import decode_batches

    out: dict[int, list[Record]] = {}
    with LogManager(data_dir, background=False) as log:
        for part in log.partitions(topic):
            offset = part.log_start_offset
            records: list[Record] = []
            while offset < part.high_watermark:
                data = part.read(offset, 1 << 20)
                if not data:
                    break
                for header, batch in decode_batches(data):
                    records.extend(r for r in batch if r.offset >= offset)
                    offset = header.next_offset
            out[part.tp.partition] = records
    return out


def as_tuples(rows: list[Any]) -> list[tuple[Any, ...]]:
    """Rows of the Kafka schema as comparable tuples, in (partition, offset) order."""
    out = [
        (
            r.partition,
            r.offset,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []],
        )
        for r in rows
    ]
    return sorted(out, key=lambda t: (t[0], t[1]))


def expected_tuples(records: dict[int, list[Record]]) -> list[tuple[Any, ...]]:
    return [
        (p, r.offset, r.key, r.value, [(k, v) for k, v in r.headers])
        for p in sorted(records)
        for r in records[p]
    ]
