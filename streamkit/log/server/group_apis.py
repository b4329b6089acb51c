"""Consumer-group requests, translated to and from ``GroupCoordinator`` calls.

JoinGroup v0-5, SyncGroup v0-3, Heartbeat v0-3, LeaveGroup v0-1, OffsetCommit v2-3,
OffsetFetch v1-7, ListGroups v0-1, DescribeGroups v0-3 and DeleteGroups v0-1. The coordinator decides
everything (membership, generations, timeouts, which commits are valid); this module only
moves fields. JoinGroup and SyncGroup may wait here while the group rebalances; the
connection answers nothing else meanwhile, as the protocol expects.

OffsetFetch v7 carries RequireStable (the consumer of a read_committed, exactly-once
application sets it): a partition whose offset an open transaction holds is answered
UNSTABLE_OFFSET_COMMIT, so the consumer does not start from an offset that transaction may
still move. v8 and later batch several groups in one request; Kafka 4.4's consumer asks for
one group and sends v7 when v7 is the highest offered, so they are not served.

With an authorizer (``BrokerConfig.authorizer``) each request is first checked as Kafka's
``KafkaApis`` checks it, answered with Kafka's authorization error at Kafka's granularity
(``access.py``; the checks are listed in ``docs/security.md``).
"""

from __future__ import annotations

from streamkit._core.types import TopicPartition
from streamkit.log.server import access
from streamkit.log.server.authorizer import Operation
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode
from streamkit.log.server.messages import (
    DeleteGroupsDeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsDescribedGroup,
    DescribeGroupsDescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    SyncGroupRequest,
    SyncGroupResponse,
)
from streamkit.log.server.state import BrokerState

_KNOWN_MEMBER_ID_VERSION = 4  # JoinGroup v4+: a new member first gets MEMBER_ID_REQUIRED
_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


def _may(state: BrokerState, header: RequestHeader, operation: Operation, group_id: str) -> bool:
    return access.allowed(state, header, operation, access.GROUP, group_id)


async def join_group(
    state: BrokerState, header: RequestHeader, request: JoinGroupRequest
) -> JoinGroupResponse:
    if not _may(state, header, Operation.READ, request.group_id):
        return JoinGroupResponse(error_code=_DENIED, member_id=request.member_id)
    result = await state.coordinator.join_group(
        request.group_id,
        request.member_id,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if header.api_version >= 1 else -1,
        group_instance_id=request.group_instance_id,
        client_id=header.client_id or "",
        client_host=header.client_host,
        require_known_member_id=header.api_version >= _KNOWN_MEMBER_ID_VERSION,
    )
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_name=result.protocol_name,
        leader=result.leader,
        member_id=result.member_id,
        members=[
            JoinGroupResponseMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata
            )
            for m in result.members
        ],
    )


async def sync_group(
    state: BrokerState, header: RequestHeader, request: SyncGroupRequest
) -> SyncGroupResponse:
    if not _may(state, header, Operation.READ, request.group_id):
        return SyncGroupResponse(error_code=_DENIED)
    result = await state.coordinator.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        [(a.member_id, a.assignment) for a in request.assignments],
        group_instance_id=request.group_instance_id,
    )
    return SyncGroupResponse(error_code=result.error, assignment=result.assignment)


async def heartbeat(
    state: BrokerState, header: RequestHeader, request: HeartbeatRequest
) -> HeartbeatResponse:
    if not _may(state, header, Operation.READ, request.group_id):
        return HeartbeatResponse(error_code=_DENIED)
    result = await state.coordinator.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        group_instance_id=request.group_instance_id,
    )
    return HeartbeatResponse(error_code=result.error)


async def leave_group(
    state: BrokerState, header: RequestHeader, request: LeaveGroupRequest
) -> LeaveGroupResponse:
    if not _may(state, header, Operation.READ, request.group_id):
        return LeaveGroupResponse(error_code=_DENIED)
    result = await state.coordinator.leave_group(request.group_id, request.member_id)
    return LeaveGroupResponse(error_code=result.error)


async def offset_commit(
    state: BrokerState, header: RequestHeader, request: OffsetCommitRequest
) -> OffsetCommitResponse:
    # Kafka: READ on the group, else every partition fails; READ on each topic, else its
    # partitions fail and the others are committed.
    group_ok = _may(state, header, Operation.READ, request.group_id)
    readable = access.allowed_names(state, header, Operation.READ, access.TOPIC, (t.name for t in request.topics))
    offsets = {
        TopicPartition(topic.name, p.partition_index): (p.committed_offset, p.committed_metadata or "")
        for topic in request.topics
        if topic.name in readable
        for p in topic.partitions
    }
    errors: dict[TopicPartition, int] = {}
    if group_ok and offsets:
        result = await state.coordinator.commit_offsets(
            request.group_id, request.generation_id_or_member_epoch, request.member_id, offsets
        )
        errors = dict(result.errors)
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if not group_ok:
                errors[tp] = _DENIED
            elif topic.name not in readable:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=errors[TopicPartition(topic.name, p.partition_index)],
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


async def offset_fetch(
    state: BrokerState, header: RequestHeader, request: OffsetFetchRequest
) -> OffsetFetchResponse:
    if not _may(state, header, Operation.DESCRIBE, request.group_id):
        return OffsetFetchResponse(error_code=_DENIED)
    wanted = None
    if request.topics is not None:
        wanted = [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
    result = await state.coordinator.fetch_offsets(request.group_id, wanted)
    # Topics the principal may not describe: refused when named, left out of "all".
    topics = wanted if wanted is not None else result.offsets
    described = access.allowed_names(state, header, Operation.DESCRIBE, access.TOPIC, (tp.topic for tp in topics))
    unstable: set[TopicPartition] = set()
    if request.require_stable and state.transactions is not None:
        unstable = state.transactions.pending_offsets(request.group_id)
    by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
    offsets = result.offsets
    order = wanted if wanted is not None else sorted(tp for tp in offsets if tp.topic in described)
    for tp in order:
        offset, metadata = offsets.get(tp, (-1, ""))
        error: int = result.error
        if tp.topic not in described:
            offset, metadata, error = -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if tp in unstable and error == 0:
            # A transaction holds an offset for it: the caller retries until it ends.
            offset, metadata, error = -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT
        by_topic.setdefault(tp.topic, []).append(
            OffsetFetchResponsePartition(
                partition_index=tp.partition,
                committed_offset=offset,
                metadata=metadata,
                error_code=error,
            )
        )
    return OffsetFetchResponse(
        topics=[OffsetFetchResponseTopic(name=name, partitions=parts) for name, parts in by_topic.items()],
        error_code=result.error,
    )


async def list_groups(
    state: BrokerState, header: RequestHeader, request: ListGroupsRequest
) -> ListGroupsResponse:
    result = await state.coordinator.list_groups()
    # Kafka: every group with DESCRIBE on the cluster, else those the principal may describe.
    everything = access.allowed_on_cluster(state, header, Operation.DESCRIBE)
    return ListGroupsResponse(
        error_code=result.error,
        groups=[
            ListGroupsListedGroup(group_id=g.group_id, protocol_type=g.protocol_type)
            for g in result.groups
            if everything or _may(state, header, Operation.DESCRIBE, g.group_id)
        ],
    )


async def describe_groups(
    state: BrokerState, header: RequestHeader, request: DescribeGroupsRequest
) -> DescribeGroupsResponse:
    described = [g for g in request.groups if _may(state, header, Operation.DESCRIBE, g)]
    descriptions = await state.coordinator.describe_groups(described) if described else []
    denied = [
        DescribeGroupsDescribedGroup(error_code=_DENIED, group_id=g) for g in request.groups if g not in described
    ]
    return DescribeGroupsResponse(
        groups=denied + [
            DescribeGroupsDescribedGroup(
                error_code=d.error,
                group_id=d.group_id,
                group_state=str(d.state),
                protocol_type=d.protocol_type,
                protocol_data=d.protocol_name,
                members=[
                    DescribeGroupsDescribedGroupMember(
                        member_id=m.member_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in d.members
                ],
            )
            for d in descriptions
        ]
    )


async def delete_groups(
    state: BrokerState, header: RequestHeader, request: DeleteGroupsRequest
) -> DeleteGroupsResponse:
    deletable = [g for g in request.groups_names if _may(state, header, Operation.DELETE, g)]
    results = await state.coordinator.delete_groups(deletable) if deletable else []
    denied = [(g, int(_DENIED)) for g in request.groups_names if g not in deletable]
    return DeleteGroupsResponse(
        results=[DeleteGroupsDeletableGroupResult(group_id=g, error_code=e) for g, e in denied + list(results)]
    )
