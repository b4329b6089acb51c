"""A group's committed offsets read *stable* (KIP-447), through aiokafka's group coordinator.

On Kafka, the offsets a transaction commits (TxnOffsetCommit) are pending in the group until
the transaction's marker reaches ``__consumer_offsets``, which happens after EndTxn has answered
the producer. A plain OffsetFetch answers the last stable offset meanwhile: a member that takes
a partition over right after a commit (a crash after EndTxn, a fast rebalance) would start from
the offset before it and write the committed transaction's outputs a second time. With
``require_stable`` (OffsetFetch v7+) the coordinator answers UNSTABLE_OFFSET_COMMIT (88) for
such a partition instead, and the reader asks again after a back-off, as Kafka's consumer does.

aiokafka 0.14 speaks OffsetFetch v0-v3 only. This module defines v7 after Kafka's
``OffsetFetchRequest.json``/``OffsetFetchResponse.json`` (the first version with the flag; v6+
are flexible: compact strings and arrays carry their length + 1 as an unsigned varint, 0 for
null, and each struct ends in a tagged-field section, a varint count, 0 here), and
``StableOffsetFetch``, a request that aiokafka's per-connection version negotiation sends as v7
to a broker offering it and as v3 (without the flag, the fall-back of Kafka's Java client) to one
that does not (``streamkit broker`` offered v1-v3 when this was written). Versions 8+ (several groups per
request) bring nothing one group needs.

Who reads stable: ``committed_offsets`` (``KafkaConsumer.committed``/``committed_metadata``)
always; the positions aiokafka gives partitions on assignment when the consumer reads committed
(``read_stable_on_assignment``; Kafka's consumer sets the flag under ``read_committed`` too).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import time
from collections.abc import Iterable
from typing import Any

from aiokafka import TopicPartition as KafkaTP
from aiokafka.errors import BrokerResponseError, KafkaError, for_code
from aiokafka.errors import GroupAuthorizationFailedError as KafkaGroupAuthorizationFailed
from aiokafka.errors import GroupCoordinatorNotAvailableError as KafkaCoordinatorNotAvailable
from aiokafka.errors import NotCoordinatorForGroupError as KafkaNotCoordinator
from aiokafka.errors import UnknownTopicOrPartitionError as KafkaUnknownTopicOrPartition
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.commit import (
    OffsetFetchRequest_v1,
    OffsetFetchRequest_v2,
    OffsetFetchRequest_v3,
)
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.structs import OffsetAndMetadata

from streamkit.transport.base import TransportError

OFFSET_FETCH = 9  # Kafka's api key
UNSTABLE_OFFSET_COMMIT = 88  # Kafka's error code; aiokafka 0.14 does not know it
NO_OFFSET = -1  # the committed offset of a partition nothing was committed for
MAX_BACKOFF_MS = 1_000  # Kafka's retry.backoff.max.ms: the back-off doubles up to it


class OffsetFetchResponse_v7(Response):  # type: ignore[misc]
    """Flexible: every struct ends in tagged fields; ``committed_leader_epoch`` came in v5."""

    API_KEY = OFFSET_FETCH
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("topics", CompactArray(
            ("topic", CompactString("utf-8")),
            ("partitions", CompactArray(
                ("partition", Int32),
                ("offset", Int64),
                ("committed_leader_epoch", Int32),
                ("metadata", CompactString("utf-8")),
                ("error_code", Int16),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("error_code", Int16),
        ("tags", TaggedFields),
    )


class OffsetFetchRequest_v7(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True  # request header v2, response header v1 (tagged fields)
    API_KEY = OFFSET_FETCH
    API_VERSION = 7
    RESPONSE_TYPE = OffsetFetchResponse_v7
    SCHEMA = Schema(
        ("group_id", CompactString("utf-8")),
        ("topics", CompactArray(
            ("topic", CompactString("utf-8")),
            ("partitions", CompactArray(Int32)),
            ("tags", TaggedFields),
        )),
        ("require_stable", Boolean),
        ("tags", TaggedFields),
    )


class StableOffsetFetch(
    Request[OffsetFetchRequest_v1 | OffsetFetchRequest_v2 | OffsetFetchRequest_v3 | OffsetFetchRequest_v7]  # type: ignore[misc]
):
    """OffsetFetch of one group's partitions: the highest version the broker offers of these
    (aiokafka's ``Request.prepare`` picks it per connection), ``require_stable`` from v7 on."""

    API_KEY = OFFSET_FETCH

    def __init__(self, group_id: str, partitions: list[tuple[str, list[int]]], require_stable: bool) -> None:
        self.group_id = group_id
        self.partitions = partitions
        self.require_stable = require_stable

    def build(self, request_struct_class: type[Any]) -> Any:
        if request_struct_class.API_VERSION >= 7:
            topics: list[tuple[str, list[int], dict[int, bytes]]] = [(t, ps, {}) for t, ps in self.partitions]
            return request_struct_class(self.group_id, topics, self.require_stable, {})
        return request_struct_class(self.group_id, self.partitions)


class UnstableOffsetCommitError(BrokerResponseError):  # type: ignore[misc]
    """Kafka's UNSTABLE_OFFSET_COMMIT: a transaction that commits offsets of these partitions
    has not ended yet. Retriable: aiokafka's own loops (the positions of an assignment) ask
    again after their back-off."""

    errno = UNSTABLE_OFFSET_COMMIT
    message = "UNSTABLE_OFFSET_COMMIT"
    description = "There are pending transactional offsets for the requested partitions."
    retriable = True

    def __init__(self, partitions: Iterable[KafkaTP]) -> None:
        self.partitions = sorted(partitions)
        self.names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in self.partitions)
        super().__init__(f"UNSTABLE_OFFSET_COMMIT for {self.names}")


def _group_error(coordinator: Any, code: int) -> KafkaError:
    """The error of a group-level code (the top-level one of v2+, or a partition's that is about
    the group); a coordinator that moved or went away is looked up again, as aiokafka does."""
    error_type = for_code(code)
    if error_type in (KafkaNotCoordinator, KafkaCoordinatorNotAvailable):
        coordinator.coordinator_dead()
    if error_type.retriable:
        return error_type()
    if error_type is KafkaGroupAuthorizationFailed:
        return error_type(coordinator.group_id)
    return KafkaError(f"OffsetFetch of group {coordinator.group_id!r} failed: {error_type()!r}")


async def fetch_offsets(
    coordinator: Any, partitions: Iterable[KafkaTP], *, require_stable: bool
) -> dict[KafkaTP, OffsetAndMetadata]:
    """One OffsetFetch to ``coordinator`` (aiokafka's ``GroupCoordinator``): the committed
    offset and metadata of each of ``partitions`` that has one. Raises
    ``UnstableOffsetCommitError`` when one is pending in a transaction (v7 with
    ``require_stable`` only), aiokafka's errors otherwise (retriable ones marked so).

    Unlike aiokafka's, it reads the top-level error code too (v2+): Kafka answers a group-level
    error (COORDINATOR_LOAD_IN_PROGRESS after the coordinator moved) there with no partitions,
    which would otherwise read as "nothing committed" and reset the positions."""
    by_topic: dict[str, list[int]] = collections.defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    response = await coordinator._send_req(StableOffsetFetch(coordinator.group_id, list(by_topic.items()), require_stable))
    version = response.API_VERSION
    if version >= 2 and response.error_code:
        raise _group_error(coordinator, response.error_code)
    offsets: dict[KafkaTP, OffsetAndMetadata] = {}
    unstable: list[KafkaTP] = []
    for topic_entry in response.topics:
        topic, topic_partitions = topic_entry[0], topic_entry[1]
        for entry in topic_partitions:
            if version >= 7:
                partition, offset, _epoch, metadata, error_code, _tags = entry
            else:
                partition, offset, metadata, error_code = entry
            tp = KafkaTP(topic, partition)
            if error_code == UNSTABLE_OFFSET_COMMIT:
                unstable.append(tp)
            elif error_code == KafkaUnknownTopicOrPartition.errno:
                continue  # as aiokafka: a topic deleted since has no committed offset to start from
            elif error_code:
                raise _group_error(coordinator, error_code)
            elif offset != NO_OFFSET:
                offsets[tp] = OffsetAndMetadata(offset, metadata or "")
    if unstable:
        raise UnstableOffsetCommitError(unstable)
    return offsets


def read_stable_on_assignment(coordinator: Any) -> None:
    """Make the positions ``coordinator`` gives assigned partitions stable offsets.

    The one patch of aiokafka's internals here, written against aiokafka 0.14.0, which has no
    hook for it: ``GroupCoordinator._do_fetch_commit_offsets(partitions)`` is the one OffsetFetch
    of its commit-refresh routine (the committed offsets an assignment's positions start from)
    and of its ``fetch_committed_offsets``; both treat a retriable error as "ask again after
    ``retry_backoff_ms``". Replaced on this instance only (made by the consumer's ``start``,
    before it subscribes), with ``fetch_offsets`` asking for stable offsets: while a
    transaction holds a partition's offset pending, its position stays unknown (no record of
    it is fetched) until the transaction ends; Kafka's transaction timeout bounds that."""
    if not hasattr(coordinator, "_do_fetch_commit_offsets"):
        raise TransportError("this aiokafka's group coordinator has no _do_fetch_commit_offsets (written for 0.14)")
    coordinator._do_fetch_commit_offsets = functools.partial(fetch_offsets, coordinator, require_stable=True)


async def committed_offsets(
    coordinator: Any, partitions: list[KafkaTP], *, timeout_ms: int, retry_backoff_ms: int
) -> dict[KafkaTP, OffsetAndMetadata]:
    """The stable committed offsets of ``partitions`` (those that have one). An unstable answer
    is asked again after a back-off (``retry_backoff_ms``, doubling up to 1 s) for up to
    ``timeout_ms``, then a ``TransportError`` says which partitions stayed unstable; other
    retriable errors are retried as aiokafka's ``fetch_committed_offsets`` does."""
    deadline = time.monotonic() + timeout_ms / 1000
    backoff_ms = retry_backoff_ms
    while True:
        await coordinator.ensure_coordinator_known()
        try:
            return await fetch_offsets(coordinator, partitions, require_stable=True)
        except UnstableOffsetCommitError as exc:
            if time.monotonic() + backoff_ms / 1000 > deadline:
                raise TransportError(
                    f"the committed offsets of group {coordinator.group_id!r} for {exc.names} stayed unstable for"
                    f" {timeout_ms} ms (UNSTABLE_OFFSET_COMMIT): a transaction that commits them has not ended"
                ) from exc
            await asyncio.sleep(backoff_ms / 1000)
            backoff_ms = min(backoff_ms * 2, MAX_BACKOFF_MS)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            await asyncio.sleep(retry_backoff_ms / 1000)
