"""A minimal transaction coordinator (KIP-98) for one node.

It keeps, per transactional id, the producer id and epoch and the current transaction's
partitions and groups (``txn_log.TxnEntry``), and ends transactions by writing COMMIT or
ABORT control batches (``records.control_batch``) to every partition in them, through
``ProducerStates`` so the partitions' last stable offsets and aborted-transaction lists
follow. Offsets sent with TxnOffsetCommit wait here and reach the group offset store only
when their transaction commits; one whose metadata is longer than
``offset_metadata_max_bytes`` (the group coordinator's limit, Kafka's
``offset.metadata.max.bytes``) is refused OFFSET_METADATA_TOO_LARGE for its partition and
never held. Requests answer with a ``TxnErrorCode`` (``errors.py``), which the wire server
copies into its responses.

Invariants:

* requests for one transactional id run one at a time (a lock per id), and each state
  change is in the transaction log file before it is acted on;
* InitProducerId fences: it aborts an open transaction and bumps the epoch, so the old
  producer instance's requests fail with INVALID_PRODUCER_EPOCH;
* a transaction open longer than its timeout is aborted (and its producer fenced) by
  ``expire``, which the broker calls periodically;
* ``recover`` (at start) finishes what a crash interrupted: Ongoing transactions abort,
  PrepareCommit/PrepareAbort ones complete.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from streamkit._core.clock import SYSTEM_CLOCK, Clock
from streamkit._core.types import TopicPartition
from streamkit.log.errors import LogError, UnknownTopicError
from streamkit.log.groups.messages import OFFSET_METADATA_MAX_BYTES, metadata_fits
from streamkit.log.manager import INTERNAL_TOPICS, LogManager
from streamkit.log.producers import ProducerIdAllocator, ProducerStates
from streamkit.log.records import BatchHeader, check_batch, control_batch
from streamkit.log.txn.errors import TxnErrorCode
from streamkit.log.txn.txn_log import TxnEntry, TxnLog, TxnState

logger = logging.getLogger(__name__)

RunBlocking = Callable[..., Awaitable[Any]]

MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
_MAX_EPOCH = 32_767
_T = TypeVar("_T")
# Kafka's transaction states this coordinator never enters (an id being expired, an epoch being
# fenced): a filter naming them is no unknown state, it matches nothing here.
_UNUSED_KAFKA_STATES = frozenset({"Dead", "PrepareEpochFence"})


class TransactionCoordinator:
    def __init__(
        self,
        log: LogManager,
        producers: ProducerStates,
        producer_ids: ProducerIdAllocator,
        run_blocking: RunBlocking,
        *,
        clock: Clock = SYSTEM_CLOCK,
        offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES,
    ) -> None:
        self._log = log
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self._producers = producers
        self._producer_ids = producer_ids
        self._run_blocking = run_blocking
        self._clock = clock
        self._file = TxnLog(log.data_dir)
        self._entries: dict[str, TxnEntry] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._save_lock = asyncio.Lock()
        self._ending: set[asyncio.Future[Any]] = set()  # ``_to_the_end``'s work under way
        # transactional id -> group -> partition -> (offset, metadata), not yet committed
        self._pending: dict[str, dict[str, dict[TopicPartition, tuple[int, str]]]] = {}

    @property
    def ever_used(self) -> bool:
        """True once any transactional id exists: read_committed must then look at markers."""
        return bool(self._entries)

    # -- lifecycle -------------------------------------------------------------------------

    async def recover(self) -> None:
        self._entries = await self._run_blocking(self._file.load)
        for entry in list(self._entries.values()):
            if entry.state is TxnState.ONGOING:
                logger.info("aborting transaction of %r left open", entry.transactional_id)
                await self._complete(entry, commit=False, fence=True)
            elif entry.state is TxnState.PREPARE_COMMIT:
                await self._complete(entry, commit=True)
            elif entry.state is TxnState.PREPARE_ABORT:
                await self._complete(entry, commit=False)

    async def expire(self) -> None:
        """Abort (and fence) every transaction open longer than its timeout."""
        now = self._clock.now_ms()
        for entry in list(self._entries.values()):
            if entry.state is TxnState.ONGOING and now - entry.started_ms > entry.timeout_ms:
                async with self._lock(entry.transactional_id):
                    if entry.state is TxnState.ONGOING:
                        logger.info("transaction of %r timed out", entry.transactional_id)
                        await self._complete(entry, commit=False, fence=True)

    async def _to_the_end(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Run ``work`` to its end whatever becomes of the request that asked for it, as
        Kafka's coordinator finishes a transaction once it decided its end: a requester
        cancelled (a worker stopping mid-commit, a client gone) must not leave it half-ended
        (PREPARE_COMMIT, some markers written), which every later request of its
        transactional id would then find (CONCURRENT_TRANSACTIONS). A cancelled requester is
        cancelled once the work is done."""
        task = asyncio.ensure_future(work)
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait([task])
            raise

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    async def _save(self) -> None:
        # One write at a time, each of the state as it is when its turn comes: the file
        # never goes back to an older state.
        async with self._save_lock:
            write = asyncio.ensure_future(self._run_blocking(self._file.write, TxnLog.encode(self._entries)))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # The thread writes on (run_blocking shields it): hold the lock until it is
                # done, or the next write shares its temporary file and one of the two renames
                # finds it gone (a worker stopping mid-commit failed so).
                if not write.done():
                    await asyncio.wait([write])
                raise

    # -- requests --------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int) -> tuple[TxnErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer starting up."""
        return await self._to_the_end(self._init_producer_id(transactional_id, timeout_ms))

    async def _init_producer_id(self, transactional_id: str, timeout_ms: int) -> tuple[TxnErrorCode, int, int]:
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            return TxnErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        async with self._lock(transactional_id):
            entry = self._entries.get(transactional_id)
            if entry is None:
                pid = await self._run_blocking(self._producer_ids.allocate)
                entry = TxnEntry(transactional_id, pid, 0, timeout_ms)
            else:
                if entry.open:
                    await self._complete(entry, commit=entry.state is TxnState.PREPARE_COMMIT)
                if entry.epoch >= _MAX_EPOCH - 1:
                    entry.producer_id = await self._run_blocking(self._producer_ids.allocate)
                    entry.epoch = 0
                else:
                    entry.epoch += 1
                entry.timeout_ms = timeout_ms
                entry.state = TxnState.EMPTY
            self._entries[transactional_id] = entry
            self._pending.pop(transactional_id, None)
            await self._save()
            return TxnErrorCode.NONE, entry.producer_id, entry.epoch

    def _check(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[TxnErrorCode, TxnEntry | None]:
        entry = self._entries.get(transactional_id)
        if entry is None or entry.producer_id != producer_id:
            return TxnErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if epoch != entry.epoch:
            return TxnErrorCode.INVALID_PRODUCER_EPOCH, None
        if entry.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return TxnErrorCode.CONCURRENT_TRANSACTIONS, None
        return TxnErrorCode.NONE, entry

    def _begin(self, entry: TxnEntry) -> None:
        if entry.state is not TxnState.ONGOING:
            entry.state = TxnState.ONGOING
            entry.started_ms = self._clock.now_ms()
            entry.partitions = []
            entry.groups = []
            entry.commit_offsets = {}

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, TxnErrorCode]:
        wanted = list(dict.fromkeys(partitions))
        async with self._lock(transactional_id):
            error, entry = self._check(transactional_id, producer_id, epoch)
            if entry is None:
                return {tp: error for tp in wanted}
            unknown = {tp for tp in wanted if not self._exists(tp)}
            if unknown:
                # Like Kafka: nothing is added when any partition is bad.
                return {
                    tp: TxnErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else TxnErrorCode.OPERATION_NOT_ATTEMPTED
                    for tp in wanted
                }
            self._begin(entry)
            known = set(entry.partitions)
            added = [(tp.topic, tp.partition) for tp in wanted if (tp.topic, tp.partition) not in known]
            if added:
                entry.partitions.extend(added)
                await self._save()
            return {tp: TxnErrorCode.NONE for tp in wanted}

    def _exists(self, tp: TopicPartition) -> bool:
        if tp.topic in INTERNAL_TOPICS:
            return False
        try:
            self._log.partition(tp.topic, tp.partition)
        except UnknownTopicError:
            return False
        return True

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> TxnErrorCode:
        async with self._lock(transactional_id):
            error, entry = self._check(transactional_id, producer_id, epoch)
            if entry is None:
                return error
            self._begin(entry)
            if group_id not in entry.groups:
                entry.groups.append(group_id)
                await self._save()
            return TxnErrorCode.NONE

    def txn_offset_commit(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: Mapping[TopicPartition, tuple[int, str]],
    ) -> dict[TopicPartition, TxnErrorCode]:
        """Hold ``offsets`` until the transaction ends (no await: atomic on the loop); the
        error of each partition. A refused request holds none; a metadata too long is
        refused for its partition alone (Kafka's GroupCoordinator), the others are held."""
        error, entry = self._check(transactional_id, producer_id, epoch)
        if entry is not None and (entry.state is not TxnState.ONGOING or group_id not in entry.groups):
            error, entry = TxnErrorCode.INVALID_TXN_STATE, None
        if entry is None:
            return {tp: error for tp in offsets}
        errors = {
            tp: TxnErrorCode.NONE if metadata_fits(meta, self.offset_metadata_max_bytes)
            else TxnErrorCode.OFFSET_METADATA_TOO_LARGE
            for tp, (_offset, meta) in offsets.items()
        }
        held = {tp: value for tp, value in offsets.items() if errors[tp] is TxnErrorCode.NONE}
        self._pending.setdefault(transactional_id, {}).setdefault(group_id, {}).update(held)
        return errors

    def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """The partitions of ``group_id`` whose offsets an open transaction holds, not yet
        committed or aborted (Kafka's pending transactional offsets: an OffsetFetch with
        RequireStable answers UNSTABLE_OFFSET_COMMIT for them)."""
        held = {tp for groups in self._pending.values() for tp in groups.get(group_id, {})}
        for entry in self._entries.values():
            if entry.state is TxnState.PREPARE_COMMIT:
                held.update(TopicPartition(t, p) for t, p, _off, _meta in entry.commit_offsets.get(group_id, []))
        return held

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> TxnErrorCode:
        return await self._to_the_end(self._end_txn(transactional_id, producer_id, epoch, commit))

    async def _end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> TxnErrorCode:
        async with self._lock(transactional_id):
            entry = self._entries.get(transactional_id)
            if entry is not None and entry.producer_id == producer_id and entry.epoch == epoch:
                done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
                if entry.state is done or entry.state is TxnState.EMPTY:
                    return TxnErrorCode.NONE  # a retry, or a transaction with nothing in it
                if entry.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
                    return TxnErrorCode.INVALID_TXN_STATE
            error, entry = self._check(transactional_id, producer_id, epoch)
            if entry is None:
                return error
            await self._complete(entry, commit=commit)
            return TxnErrorCode.NONE

    def check_produce(self, transactional_id: str, batch: BatchHeader, tp: TopicPartition) -> TxnErrorCode | None:
        """Why a transactional batch may not be appended, or None if it may."""
        entry = self._entries.get(transactional_id)
        if entry is None or entry.producer_id != batch.producer_id:
            return TxnErrorCode.INVALID_PRODUCER_ID_MAPPING
        if batch.producer_epoch != entry.epoch:
            return TxnErrorCode.INVALID_PRODUCER_EPOCH
        if entry.state is not TxnState.ONGOING or (tp.topic, tp.partition) not in entry.partitions:
            return TxnErrorCode.INVALID_TXN_STATE
        return None

    # -- describing transactions (ListTransactions, DescribeTransactions) ------------------

    def describe(self, transactional_id: str) -> TxnEntry | None:
        """The state of ``transactional_id``, or None when this coordinator never saw it."""
        return self._entries.get(transactional_id)

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> tuple[list[TxnEntry], list[str]]:
        """(the transactions that match every filter given, the state names that are none of
        ``TxnState``), as Kafka's ``listTransactionStates``: an empty filter matches all, a
        duration below 0 too; otherwise only a transaction started more than ``duration_ms``
        ago matches (an Empty one has no start, -1, so it always does)."""
        wanted_states = set(states)
        known = {state.value for state in TxnState} | _UNUSED_KAFKA_STATES
        unknown = sorted(wanted_states - known)
        wanted_ids = set(producer_ids)
        now = self._clock.now_ms()
        matched = [
            entry
            for entry in self._entries.values()
            if (not wanted_ids or entry.producer_id in wanted_ids)
            and (not wanted_states or entry.state.value in wanted_states)
            and (duration_ms < 0 or now - start_time_ms(entry) > duration_ms)
        ]
        return matched, unknown

    # -- ending a transaction --------------------------------------------------------------

    async def _complete(self, entry: TxnEntry, *, commit: bool, fence: bool = False) -> None:
        """Decide (persisted), write the markers, apply or drop the offsets, then finish."""
        pending = self._pending.pop(entry.transactional_id, {})
        if entry.state is TxnState.ONGOING:
            entry.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if commit:
                entry.commit_offsets = {
                    group: [(tp.topic, tp.partition, off, meta) for tp, (off, meta) in offsets.items()]
                    for group, offsets in pending.items()
                }
            await self._save()
        commit = entry.state is TxnState.PREPARE_COMMIT
        for tp in entry.topic_partitions():
            await self._run_blocking(self._write_marker, tp, entry.producer_id, entry.epoch, commit)
        if commit:
            for group, offsets in entry.offsets_by_group().items():
                if offsets:
                    await self._run_blocking(self._log.offsets.commit, group, offsets)
        entry.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        entry.partitions = []
        entry.groups = []
        entry.commit_offsets = {}
        if fence:
            entry.epoch += 1
        await self._save()

    def _write_marker(self, tp: TopicPartition, producer_id: int, epoch: int, commit: bool) -> None:
        try:
            partition = self._log.partition(tp.topic, tp.partition)
        except UnknownTopicError:
            return  # deleted since it joined the transaction
        marker = control_batch(
            commit=commit, producer_id=producer_id, producer_epoch=epoch, timestamp=self._clock.now_ms()
        )
        try:
            self._producers.append(partition, check_batch(marker), marker)
        except LogError:
            logger.exception("could not write a transaction marker to %s", tp)


def start_time_ms(entry: TxnEntry) -> int:
    """When ``entry``'s current (or last) transaction began; -1 for an Empty one, as Kafka."""
    return -1 if entry.state is TxnState.EMPTY else entry.started_ms
