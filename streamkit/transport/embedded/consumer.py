"""The embedded consumer, ``EmbeddedConsumer``: a consumer-group member on the embedded log.

It commits to the log's durable group offsets; a partition newly assigned starts at its
committed offset, else per ``auto_offset_reset``. As a member of a group on the served
broker's coordinator (``group.py``) it heartbeats, and when the group rebalances it revokes
everything it holds and rejoins (eager, as the Kafka driver). Under read_committed it reads
only below each partition's last stable offset (``reader.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from streamkit._core.types import TopicPartition
from streamkit.log.errors import LogError, OffsetOutOfRangeError, UnknownTopicError
from streamkit.log.groups.messages import metadata_fits
from streamkit.log.partition import Partition
from streamkit.log.producers import ProducerStates
from streamkit.log.records import Record, decode_batches
from streamkit.transport.base import (
    READ_COMMITTED,
    RebalanceListener,
    TransportError,
    metadata_too_large,
    with_metadata,
)
from streamkit.transport.embedded.group import HEARTBEAT_INTERVAL_S, GroupMembership
from streamkit.transport.embedded.reader import (
    MAX_FETCH_BYTES,
    load_producer_states,
    next_offset,
    read_committed,
)
from streamkit.transport.placement import GroupInfo, MemberInfo

if TYPE_CHECKING:
    from streamkit.transport.embedded.client import EmbeddedLogClient

logger = logging.getLogger(__name__)


class EmbeddedConsumer:
    """A member of a consumer group on the embedded log.

    When this process serves the data directory, the consumer joins its group on the served
    broker's coordinator (``group.py``), beside members in other processes, and holds
    the partitions the group assigns it. Otherwise it is the group's only member and holds
    every partition of the topics it subscribes to.
    """

    def __init__(
        self, client: EmbeddedLogClient, group_id: str, auto_offset_reset: str, isolation_level: str = "read_uncommitted"
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise TransportError(f"auto_offset_reset must be earliest or latest, not {auto_offset_reset!r}")
        self._client = client
        self.isolation_level = isolation_level
        self._committed_only = isolation_level == READ_COMMITTED
        self._states: ProducerStates | None = None
        self.group_id = group_id
        self._reset = auto_offset_reset
        self._topics: list[str] = []
        self._listener: RebalanceListener | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        self._unavailable: dict[TopicPartition, str] = {}
        self._event = asyncio.Event()
        self._started = False
        self._member = MemberInfo()
        self._membership: GroupMembership | None = None
        self._group: GroupInfo | None = None
        self._heartbeats: asyncio.Task[None] | None = None

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener) -> None:
        self._topics = list(topics)
        self._listener = listener

    def advertise(self, info: MemberInfo) -> None:
        self._member = info

    def group_info(self) -> GroupInfo | None:
        """From the last assignment; the only member owns every partition, keeps no standbys."""
        if self._membership is not None:
            return self._group
        counts = [len(self._client.log.partitions(t)) for t in self._topics] if self._started else []
        return GroupInfo({p: self._member.url for p in range(max(counts, default=0))}, frozenset())

    def notify(self, tp: TopicPartition) -> None:
        if tp in self._positions:
            self._event.set()

    async def start(self) -> None:
        log = self._client.log
        if self._committed_only:
            self._states = await self._client.producer_states()
        coordinator = self._client.group_coordinator()
        if coordinator is not None and self._topics:
            self._membership = GroupMembership(
                coordinator, self.group_id, self._topics, self._member, self._partition_count
            )
            assigned = await self._join()
        else:
            assigned = {part.tp for topic in self._topics for part in log.partitions(topic)}
        self._take(assigned)
        self._started = True
        if self._listener is not None:
            await self._listener.on_partitions_assigned(set(self._positions))
        if self._membership is not None:
            self._heartbeats = asyncio.ensure_future(self._heartbeat_loop())
            self._heartbeats.set_name(f"streamkit:heartbeat:{self.group_id}")

    def _partition_count(self, topic: str) -> int | None:
        log = self._client.log
        return len(log.partitions(topic)) if log.has_topic(topic) else None

    async def _join(self) -> set[TopicPartition]:
        assert self._membership is not None
        assigned, self._group = await self._membership.join()
        return assigned

    def _take(self, assigned: set[TopicPartition]) -> None:
        """Positions of newly assigned partitions: committed, else per auto_offset_reset."""
        log = self._client.log
        committed = log.offsets.fetch(self.group_id)
        for tp in sorted(assigned):
            if tp in committed:
                self._positions[tp] = committed[tp][0]
            else:
                try:
                    self._positions[tp] = self._reset_position(log.partition(tp.topic, tp.partition))
                except LogError:
                    self._positions[tp] = 0
        self._paused &= set(self._positions)

    async def _heartbeat_loop(self) -> None:
        """Heartbeats; when the group rebalances, revoke everything held, rejoin, take what
        the new generation assigns (eager, as the Kafka driver)."""
        membership = self._membership
        assert membership is not None
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            if await membership.heartbeat():
                continue
            held = set(self._positions)
            logger.info("group %s rebalances: giving up %d partitions and rejoining", self.group_id, len(held))
            if self._listener is not None:
                await self._listener.on_partitions_revoked(held)
            self._positions.clear()
            self._paused.clear()
            try:
                assigned = await self._join()
            except TransportError as exc:
                logger.warning("group %s: rejoin failed, retrying: %s", self.group_id, exc)
                continue
            self._take(assigned)
            if self._listener is not None:
                await self._listener.on_partitions_assigned(set(self._positions))

    def _reset_position(self, part: Partition) -> int:
        return part.log_start_offset if self._reset == "earliest" else part.high_watermark

    async def aclose(self) -> None:
        heartbeats, self._heartbeats = self._heartbeats, None
        if heartbeats is not None:
            heartbeats.cancel()
            await asyncio.gather(heartbeats, return_exceptions=True)
        if self._started and self._listener is not None:
            await self._listener.on_partitions_revoked(set(self._positions))
        self._started = False
        self._positions.clear()
        if self._membership is not None:
            await self._membership.leave()  # the others rebalance now, not after our session
        self._client._forget(self)

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def pause(self, tps: Sequence[TopicPartition]) -> None:
        self._paused.update(tps)

    def resume(self, tps: Sequence[TopicPartition]) -> None:
        self._paused.difference_update(tps)
        self._event.set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def position(self, tp: TopicPartition) -> int | None:
        return self._positions.get(tp)

    def highwater(self, tp: TopicPartition) -> int | None:
        try:
            return self._client.log.partition(tp.topic, tp.partition).high_watermark
        except LogError:
            return None

    def unavailable(self) -> dict[TopicPartition, str]:
        return dict(self._unavailable)

    def _reset_out_of_range(self, tp: TopicPartition, part: Partition, position: int) -> int:
        reset = self._reset_position(part)
        logger.warning(
            "%s: position %d is out of range [%d, %d] (the topic was recreated or truncated); "
            "resetting to the %s offset %d (auto_offset_reset)",
            tp, position, part.log_start_offset, part.high_watermark, self._reset, reset,
        )
        self._positions[tp] = reset
        return reset

    async def getmany(self, timeout_ms: int, max_records: int) -> Mapping[TopicPartition, Sequence[Record]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        if self._states is not None:
            await load_producer_states(self._client, self._states, self._positions)
        while True:
            self._event.clear()
            out = self._read(max_records)
            if out:
                return out
            remaining = deadline - loop.time()
            if remaining <= 0:
                return {}
            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except TimeoutError:
                return {}

    def _read(self, max_records: int) -> dict[TopicPartition, list[Record]]:
        log = self._client.log
        out: dict[TopicPartition, list[Record]] = {}
        budget = max_records
        for tp, position in self._positions.items():
            if budget <= 0:
                break
            if tp in self._paused:
                continue
            try:
                part = log.partition(tp.topic, tp.partition)
            except UnknownTopicError as exc:
                if tp not in self._unavailable:
                    logger.warning("%s cannot be read: %s", tp, exc)
                self._unavailable[tp] = f"unknown topic or partition: {exc}"
                continue
            if self._unavailable.pop(tp, None) is not None:
                logger.warning("%s can be read again", tp)
            if position > part.high_watermark:
                position = self._reset_out_of_range(tp, part, position)
            if position >= part.high_watermark:
                continue
            if self._states is not None:
                try:
                    read = read_committed(part, self._states, position, budget)
                except OffsetOutOfRangeError:
                    self._reset_out_of_range(tp, part, position)
                    continue
                if read is None:
                    continue
                committed, self._positions[tp] = read
                if committed:
                    out[tp] = committed
                    budget -= len(committed)
                continue
            try:
                data = part.read(position, MAX_FETCH_BYTES)
            except OffsetOutOfRangeError:
                position = self._reset_out_of_range(tp, part, position)
                data = part.read(position, MAX_FETCH_BYTES) if position < part.high_watermark else b""
            records: list[Record] = []
            # Batches decode lazily: stop once the budget is met (a read returns up to
            # MAX_FETCH_BYTES, often several times the records asked for).
            for header, batch in decode_batches(data, verify_crc=False):
                if header.base_offset >= position:
                    records.extend(batch)
                else:  # the batch holding ``position``: drop the records before it
                    records.extend(r for r in batch if r.offset >= position)
                if len(records) >= budget:
                    break
            if len(records) > budget:
                records = records[:budget]
            if records:
                out[tp] = records
                budget -= len(records)
                self._positions[tp] = records[-1].offset + 1
            elif data:
                # Only control batches or compacted-away records: skip past them.
                self._positions[tp] = next_offset(data, position)
        return out

    async def commit(
        self, offsets: Mapping[TopicPartition, int], metadata: Mapping[TopicPartition, str] | None = None
    ) -> None:
        """Store ``offsets`` with their metadata in the log's group offsets. Metadata longer
        than the group coordinator's ``offset_metadata_max_bytes`` is refused for its
        partition alone, as a Kafka broker answers OffsetCommit: the others are stored."""
        entries = with_metadata(offsets, metadata)
        limit = self._client.offset_metadata_max_bytes()
        refused = {tp: text for tp, (_offset, text) in entries.items() if not metadata_fits(text, limit)}
        accepted = {tp: entry for tp, entry in entries.items() if tp not in refused}
        if accepted:
            await asyncio.to_thread(self._client.log.offsets.commit, self.group_id, accepted)
        if refused:
            raise metadata_too_large(refused, f"commit of group {self.group_id!r} refused")

    async def committed(self, tp: TopicPartition) -> int | None:
        found = self._client.log.offsets.fetch(self.group_id, [tp])
        return found[tp][0] if tp in found else None

    async def committed_metadata(self, tp: TopicPartition) -> str | None:
        found = self._client.log.offsets.fetch(self.group_id, [tp])
        return found[tp][1] if tp in found else None
