"""Committed consumer-group offsets, stored durably in the internal topic ``__consumer_offsets``.

Like Kafka, the store is itself a compacted log: each commit appends one batch of records
keyed by (group, topic, partition) and is fsynced before ``commit`` returns, so an
acknowledged commit survives a crash. On open the topic is read once into memory; lookups
never touch the disk.

Record layout (JSON, via msgspec): key ``["group", "topic", partition]``; value
``{"offset": int, "metadata": str, "commit_timestamp_ms": int}``, or null to forget a
committed offset. The metadata is the committer's string (the runtime keeps a partition's
stream time there), stored and returned as given; the store does not limit it: the group and
transaction coordinators refuse one longer than ``offset.metadata.max.bytes`` before it gets
here. Every value this module ever wrote has the field; one without it reads as "".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import msgspec

from streamkit._core.clock import Clock
from streamkit._core.types import TopicPartition
from streamkit.log.partition import Partition
from streamkit.log.records import NewRecord, decode_batches, iter_batches

OFFSETS_TOPIC = "__consumer_offsets"
logger = logging.getLogger(__name__)


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str
    commit_timestamp_ms: int


class _Value(msgspec.Struct, kw_only=True):
    offset: int
    # Always written; a value without it reads as "" (no metadata) rather than being
    # skipped, which would lose its offset.
    metadata: str = ""
    commit_timestamp_ms: int


_encode = msgspec.json.Encoder().encode
_decode_key = msgspec.json.Decoder(tuple[str, str, int]).decode
_decode_value = msgspec.json.Decoder(_Value).decode


class GroupOffsets:
    """group -> TopicPartition -> OffsetAndMetadata, backed by one partition of the log."""

    def __init__(self, partition: Partition, clock: Clock) -> None:
        self._partition = partition
        self._clock = clock
        self._offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self._lock = threading.Lock()
        self.skipped = 0
        self._load()

    def _load(self) -> None:
        offset = self._partition.log_start_offset
        end = self._partition.high_watermark
        while offset < end:
            data = self._partition.read(offset, 4 * 1024 * 1024)
            if not data:
                break
            for _pos, header in iter_batches(data):
                # Past every batch, control batches (transaction markers) included: a read
                # that ends in one must not be read again and again.
                offset = header.next_offset
            for _header, records in decode_batches(data):
                for record in records:
                    if record.key is None:
                        continue
                    try:
                        group, topic, part = _decode_key(record.key)
                        v = None if record.value is None else _decode_value(record.value)
                    except msgspec.DecodeError as exc:
                        # Not ours (nothing we write looks like this): report it, keep the rest.
                        self.skipped += 1
                        logger.warning(
                            "%s offset %d is not a committed offset and was skipped: %s",
                            self._partition.tp, record.offset, exc,
                        )
                        continue
                    tp = TopicPartition(topic, part)
                    if v is None:
                        self._offsets.get(group, {}).pop(tp, None)
                    else:
                        self._offsets.setdefault(group, {})[tp] = OffsetAndMetadata(
                            v.offset, v.metadata, v.commit_timestamp_ms
                        )

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str]]) -> None:
        """Store ``offsets`` for ``group_id``; durable (fsynced) when this returns."""
        if not offsets:
            return
        now = self._clock.now_ms()
        records = [
            NewRecord(
                _encode((group_id, tp.topic, tp.partition)),
                _encode(_Value(offset=offset, metadata=metadata, commit_timestamp_ms=now)),
                now,
            )
            for tp, (offset, metadata) in offsets.items()
        ]
        with self._lock:
            self._partition.append_records(records)
            self._partition.flush()
            group = self._offsets.setdefault(group_id, {})
            for tp, (offset, metadata) in offsets.items():
                group[tp] = OffsetAndMetadata(offset, metadata, now)

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, tuple[int, str]]:
        """Committed (offset, metadata) per partition; all of the group's when ``partitions`` is None.

        Partitions without a commit are left out.
        """
        group = self._offsets.get(group_id, {})
        if partitions is None:
            return {tp: (om.offset, om.metadata) for tp, om in group.items()}
        return {tp: (group[tp].offset, group[tp].metadata) for tp in partitions if tp in group}

    def fetch_detailed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return dict(self._offsets.get(group_id, {}))

    def groups(self) -> list[str]:
        return sorted(g for g, offsets in self._offsets.items() if offsets)

    def delete_group(self, group_id: str) -> None:
        """Forget every committed offset of ``group_id`` (tombstones, compacted away later)."""
        with self._lock:
            group = self._offsets.pop(group_id, {})
            if not group:
                return
            now = self._clock.now_ms()
            records = [
                NewRecord(_encode((group_id, tp.topic, tp.partition)), None, now) for tp in group
            ]
            self._partition.append_records(records)
            self._partition.flush()

    def forget_topic(self, topic: str) -> None:
        """Drop commits for a deleted topic, so a re-created topic starts clean."""
        with self._lock:
            records = []
            now = self._clock.now_ms()
            for group_id, group in self._offsets.items():
                for tp in [tp for tp in group if tp.topic == topic]:
                    del group[tp]
                    records.append(NewRecord(_encode((group_id, tp.topic, tp.partition)), None, now))
            if records:
                self._partition.append_records(records)
                self._partition.flush()
