"""The embedded transactional producer (exactly-once): ``EmbeddedTransactionalProducer``.

It uses the log's own machinery in-process: the transaction coordinator and producer state
the client hands out (``client.py``). Transactional batches (producer id, epoch, sequence) are
appended through ``ProducerStates`` as the wire protocol's produce does, so the partitions'
last stable offsets and aborted-transaction lists follow. The coordinator answers with
``TxnErrorCode``s (``log/txn``); an epoch or producer-id refusal means this instance was
fenced by a newer one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING

from streamkit._core.types import TopicPartition
from streamkit._core.waiting import drain
from streamkit.log.errors import LogError
from streamkit.log.producers import InvalidProducerEpochError, ProducerStates
from streamkit.log.records import check_batch
from streamkit.log.txn import TransactionCoordinator, TxnErrorCode
from streamkit.transport.base import (
    Header,
    ProducerFencedError,
    TransactionAbortedError,
    TransportError,
    metadata_too_large,
    with_metadata,
)
from streamkit.transport.embedded.producer import BufferedBatch, EmbeddedProducer, refused

if TYPE_CHECKING:
    from streamkit.transport.embedded.client import EmbeddedLogClient

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
_SEQUENCE_MODULUS = 1 << 31
_FENCES = (TxnErrorCode.INVALID_PRODUCER_EPOCH, TxnErrorCode.INVALID_PRODUCER_ID_MAPPING)


class EmbeddedTransactionalProducer(EmbeddedProducer):
    """A transactional producer over the log in this process (``TransactionalProducer``).

    Every record sent belongs to the open transaction; ``commit_transaction`` appends what is
    buffered, adds the consumer group's offsets to the transaction and commits it: the
    coordinator writes COMMIT markers to every partition the transaction touched and applies
    the offsets, durably decided first (``log/txn/coordinator.py``). Batches are appended in the
    order they were sealed, one after another, each after its partitions joined the
    transaction (one coordinator call per seal for the partitions new to it).
    """

    def __init__(self, client: EmbeddedLogClient, transactional_id: str, timeout_ms: int) -> None:
        super().__init__(client)
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._producer_id = -1
        self._epoch = -1
        self._sequences: dict[TopicPartition, int] = {}
        self._in_txn: set[TopicPartition] = set()
        # Offsets were added to the open transaction (AddOffsetsToTxn): it is open at the
        # coordinator even without a record, so an abort must end it there.
        self._offsets_added = False
        self._tail: asyncio.Future[None] | None = None
        self._coordinator: TransactionCoordinator | None = None
        self._states: ProducerStates | None = None
        self.commits = 0
        self.aborts = 0
        self._fenced = False  # a newer epoch exists: abort_transaction takes one too
        self.fenced = False  # the log refused this producer once for a newer instance (sticky)
        self._lost: TransportError | None = None  # a batch of the open transaction failed

    def _fence(self) -> None:
        self._fenced = self.fenced = True

    def _fail(self, batch: BufferedBatch, error: TransportError) -> None:
        # The transaction lost records: it must not commit, whoever's flush reports the failure
        # (an aligned task flushes the producers of the others). An abort forgets it.
        if self._lost is None:
            self._lost = error
        super()._fail(batch, error)

    def _txn_error(self, error: TxnErrorCode, what: str) -> TransportError:
        if error in _FENCES:
            self._fence()
            return ProducerFencedError(f"{what}: the producer was fenced ({error.name})")
        return TransactionAbortedError(f"{what}: {error.name}")

    @property
    def transaction_open(self) -> bool:
        return bool(self._in_txn) or self._offsets_added

    async def start(self) -> None:
        self._coordinator = await self._client.transaction_coordinator()
        self._states = await self._client.producer_states()
        await self._init_id()

    async def _init_id(self) -> None:
        assert self._coordinator is not None
        error, pid, epoch = await self._coordinator.init_producer_id(self.transactional_id, self.timeout_ms)
        if error is not TxnErrorCode.NONE:
            raise TransportError(f"cannot start transactional producer {self.transactional_id!r}: {error.name}")
        self._producer_id, self._epoch = pid, epoch
        self._sequences.clear()
        self._in_txn.clear()
        self._offsets_added = False

    def send_nowait(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Sequence[Header] = (),
    ) -> Awaitable[None] | None:
        added, _index = self._add(topic, partition, key, value, headers, timestamp_ms)
        if not added.full():
            return None
        tp = TopicPartition(topic, partition)
        return self._seal([(tp, self._buffers.pop(tp))])

    async def _append(self, tp: TopicPartition, batch: BufferedBatch) -> None:
        await self._seal([(tp, batch)])

    def _flush_soon(self) -> None:
        self._scheduled = False
        buffers, self._buffers = self._buffers, {}
        if buffers:
            self._seal(list(buffers.items()))

    def _seal(self, batches: list[tuple[TopicPartition, BufferedBatch]]) -> asyncio.Future[None]:
        """Queue ``batches`` for appending after every batch sealed before them."""
        previous = self._tail
        for _tp, batch in batches:
            self._inflight.add(batch.future)
        task = asyncio.ensure_future(self._append_after(previous, batches))
        self._tail = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _append_after(
        self, previous: asyncio.Future[None] | None, batches: list[tuple[TopicPartition, BufferedBatch]]
    ) -> None:
        try:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            await self._append_transactional(batches)
        finally:
            for _tp, batch in batches:
                self._inflight.discard(batch.future)
                if not batch.future.done():
                    self._fail(batch, TransactionAbortedError("the transaction ended before this batch was appended"))

    async def _append_transactional(self, batches: list[tuple[TopicPartition, BufferedBatch]]) -> None:
        coordinator, states = self._coordinator, self._states
        if coordinator is None or states is None:
            raise TransportError("the transactional producer is not started")
        new = [tp for tp in dict.fromkeys(tp for tp, _b in batches) if tp not in self._in_txn]
        if new:
            errors = await coordinator.add_partitions(self.transactional_id, self._producer_id, self._epoch, new)
            bad = {tp: e for tp, e in errors.items() if e is not TxnErrorCode.NONE}
            if bad:
                error = self._txn_error(next(iter(bad.values())), f"cannot add {', '.join(map(str, bad))} to the transaction")
                for _tp, batch in batches:
                    self._fail(batch, error)
                return
            self._in_txn.update(new)
        for tp, batch in batches:
            partition = self._partition(tp, batch)
            if partition is None:
                continue
            sequence = self._sequences.get(tp, 0)
            try:
                data = batch.builder.build(
                    producer_id=self._producer_id, producer_epoch=self._epoch,
                    base_sequence=sequence, transactional=True,
                )
                header = check_batch(data, verify_crc=False)
                if partition.config.flush_messages:
                    result = await asyncio.to_thread(states.append, partition, header, data, crc_checked=True)
                else:
                    result = states.append(partition, header, data, crc_checked=True)
            except InvalidProducerEpochError as exc:
                self._fence()
                self._fail(batch, ProducerFencedError(f"append to {tp} refused, the producer was fenced: {exc}"))
                continue
            except LogError as exc:
                self._fail(batch, refused(f"append to {tp} failed", exc))
                continue
            self._sequences[tp] = (sequence + len(batch.builder)) % _SEQUENCE_MODULUS
            batch.future.set_result(result.base_offset)

    async def flush(self) -> None:
        if self._buffers:
            buffers, self._buffers = self._buffers, {}
            self._seal(list(buffers.items()))
        await drain(self._tasks, self._inflight)
        if self._failures:
            first, self._failures = self._failures[0], []
            raise first

    async def commit_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group_id: str,
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """Append what is buffered, then commit it with ``offsets`` (and their metadata) for
        ``group_id``."""
        entries = with_metadata(offsets, metadata)
        await self.flush()
        if self._lost is not None:
            lost = self._lost
            if isinstance(lost, ProducerFencedError):
                raise ProducerFencedError(f"a send of the transaction was fenced: {lost}") from lost
            raise TransactionAbortedError(f"a send of the transaction failed: {lost}") from lost
        coordinator = self._coordinator
        assert coordinator is not None
        if not self._in_txn and not offsets:
            return
        tid, pid, epoch = self.transactional_id, self._producer_id, self._epoch
        if entries:
            error = await coordinator.add_offsets(tid, pid, epoch, group_id)
            if error is TxnErrorCode.NONE:
                self._offsets_added = True
                errors = coordinator.txn_offset_commit(tid, pid, epoch, group_id, entries)
                refused = {tp: entries[tp][1] for tp, e in errors.items() if e is TxnErrorCode.OFFSET_METADATA_TOO_LARGE}
                if refused:
                    # The others' offsets are in the transaction; it must be aborted, as it
                    # would be after Kafka's TxnOffsetCommit answered this.
                    raise metadata_too_large(refused, "the transaction did not commit")
                error = next((e for e in errors.values() if e is not TxnErrorCode.NONE), TxnErrorCode.NONE)
            if error is not TxnErrorCode.NONE:
                raise self._txn_error(error, "cannot add the offsets to the transaction")
        end = asyncio.ensure_future(coordinator.end_txn(tid, pid, epoch, True))
        try:
            error = await asyncio.shield(end)
        except asyncio.CancelledError:
            # A stop cancelled this commit: the coordinator ends the transaction all the same
            # (its ``_to_the_end``). Learn how, so that a commit after this one (the stop's
            # last) does not take the partitions for still in a transaction.
            await asyncio.wait([end])
            if not end.cancelled() and end.exception() is None and end.result() is TxnErrorCode.NONE:
                self._committed()
            raise
        if error is not TxnErrorCode.NONE:
            raise self._txn_error(error, "the transaction did not commit")
        self._committed()

    def _committed(self) -> None:
        self._in_txn.clear()
        self._offsets_added = False
        self.commits += 1

    async def abort_transaction(self) -> None:
        """Drop what is buffered and abort the open transaction. After a fence (the
        coordinator aborted it and bumped the epoch) this takes a new epoch, so the producer
        can go on."""
        await self._abort()
        if self._fenced:
            # Fenced: the coordinator aborted our transaction already; a new epoch goes on
            # (and fences the instance that fenced us: one worker owns the embedded log).
            await self._init_id()
            self._fenced = False

    async def _abort(self) -> None:
        buffers, self._buffers = self._buffers, {}
        for batch in buffers.values():
            self._fail(batch, TransactionAbortedError("the transaction was aborted"))
        await drain(self._tasks, self._inflight)
        self._failures.clear()
        coordinator = self._coordinator
        assert coordinator is not None
        if (self._in_txn or self._offsets_added) and not self._fenced:
            error = await coordinator.end_txn(self.transactional_id, self._producer_id, self._epoch, False)
            if error in _FENCES:
                self._fence()
            else:
                self._fenced = error is not TxnErrorCode.NONE
        self._in_txn.clear()
        self._offsets_added = False
        self._lost = None
        self.aborts += 1

    async def aclose(self) -> None:
        """Abort what was not committed: only ``commit_transaction`` makes records visible.
        A fenced producer ends as it is (a new epoch would fence the newer instance)."""
        if self._coordinator is not None and (self._in_txn or self._offsets_added or self._buffers or any(not t.done() for t in self._tasks)):
            await self._abort()
