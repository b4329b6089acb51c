"""The transaction coordinator's durable state: one small JSON file, rewritten atomically.

``<data>/.broker/transactions.json`` maps each transactional id to its producer id and
epoch, its timeout, the state of its current transaction, the partitions and groups in it
and, once a commit is decided (PrepareCommit), the group offsets that commit carries. It is
written (temporary file, fsync, rename) before the coordinator acts on a change, so after a
crash it says what was decided: an Ongoing transaction is aborted, a PrepareCommit or
PrepareAbort one is completed. Plain code: no event loop, no Kafka error codes.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

import msgspec

from streamkit._core.types import TopicPartition


class TxnState(StrEnum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


class TxnEntry(msgspec.Struct):
    """One transactional id. ``started_ms`` is when its current transaction began."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: list[tuple[str, int]] = msgspec.field(default_factory=list)
    groups: list[str] = msgspec.field(default_factory=list)
    started_ms: int = 0
    # group -> [(topic, partition, offset, metadata)]: decided offsets of a PrepareCommit
    commit_offsets: dict[str, list[tuple[str, int, int, str]]] = msgspec.field(default_factory=dict)

    def topic_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.partitions]

    def offsets_by_group(self) -> dict[str, dict[TopicPartition, tuple[int, str]]]:
        return {
            group: {TopicPartition(t, p): (offset, meta) for t, p, offset, meta in rows}
            for group, rows in self.commit_offsets.items()
        }

    @property
    def open(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


class _File(msgspec.Struct):
    transactions: list[TxnEntry]


class TxnLog:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ".broker" / "transactions.json"

    def load(self) -> dict[str, TxnEntry]:
        if not self.path.exists():
            return {}
        data = msgspec.json.decode(self.path.read_bytes(), type=_File)
        return {t.transactional_id: t for t in data.transactions}

    @staticmethod
    def encode(entries: dict[str, TxnEntry]) -> bytes:
        """The file's bytes for ``entries`` (encode on the owner's thread, write on any)."""
        return msgspec.json.encode(_File(list(entries.values())))

    def write(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
