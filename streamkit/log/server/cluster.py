"""ApiVersions, Metadata and FindCoordinator: how a client learns about this one-node cluster.

The cluster is this node alone: it leads every partition, is the controller and coordinates
every group. Metadata answers a null topic list (v1+) with every topic and an empty one with
none (aiokafka's bootstrap); an unknown topic is created with the default partition count
when auto-creation is on and the request allows it (v4+ carries the flag; older versions
always allow it), else reported as UNKNOWN_TOPIC_OR_PARTITION.

With an authorizer (``BrokerConfig.authorizer``) each request is first checked as Kafka's
``KafkaApis`` checks it, answered with Kafka's authorization error at Kafka's granularity
(``access.py``; the checks are listed in ``docs/security.md``).
"""

from __future__ import annotations

from streamkit.log.errors import InvalidTopicError, TopicExistsError, UnknownTopicError
from streamkit.log.manager import INTERNAL_TOPICS, validate_topic_name
from streamkit.log.server import access
from streamkit.log.server.authorizer import Operation
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode
from streamkit.log.server.messages import (
    ApiVersionsApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from streamkit.log.server.state import BrokerState

GROUP_KEY = 0
TRANSACTION_KEY = 1


async def api_versions(
    state: BrokerState, header: RequestHeader, request: ApiVersionsRequest
) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        api_keys=[
            ApiVersionsApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in state.api_table.items()
        ]
    )


def _broker(state: BrokerState, listener: str) -> MetadataResponseBroker:
    host, port = state.advertised_address(listener)
    return MetadataResponseBroker(node_id=state.config.node_id, host=host, port=port, rack=None)


async def metadata(
    state: BrokerState, header: RequestHeader, request: MetadataRequest
) -> MetadataResponse:
    log = state.log
    if request.topics is None:
        names = log.list_topics()
    else:
        names = list(dict.fromkeys(t.name for t in request.topics))
    allow_create = state.config.auto_create_topics and (
        header.api_version < 4 or request.allow_auto_topic_creation
    )
    described = access.allowed_names(state, header, Operation.DESCRIBE, access.TOPIC, names)
    topics = []
    for name in names:
        if name not in described:
            # Listing all topics leaves them out; a topic asked for by name is refused
            # without saying whether it exists (Kafka's handleTopicMetadataRequest).
            if request.topics is not None:
                topics.append(MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
            continue
        may_create = allow_create and (log.has_topic(name) or access.may_create_topic(state, header, name))
        if allow_create and not may_create:
            topics.append(MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
            continue
        topics.append(await _topic_metadata(state, name, allow_create))
    return MetadataResponse(
        brokers=[_broker(state, header.listener)],
        cluster_id=state.cluster_id,
        controller_id=state.config.node_id,
        topics=topics,
    )


async def _topic_metadata(state: BrokerState, name: str, allow_create: bool) -> MetadataResponseTopic:
    log = state.log
    if name in INTERNAL_TOPICS:
        return MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name)
    if not log.has_topic(name):
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            return MetadataResponseTopic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name)
        if not allow_create:
            return MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name)
        try:
            await state.run_blocking(log.create_topic, name)
        except TopicExistsError:
            pass  # created meanwhile by another request
        except InvalidTopicError:
            return MetadataResponseTopic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name)
    try:
        partitions = log.describe_topic(name).partitions
    except UnknownTopicError:  # deleted meanwhile
        return MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name)
    node = state.config.node_id
    return MetadataResponseTopic(
        name=name,
        partitions=[
            MetadataResponsePartition(
                partition_index=p, leader_id=node, replica_nodes=[node], isr_nodes=[node]
            )
            for p in range(partitions)
        ],
    )


async def find_coordinator(
    state: BrokerState, header: RequestHeader, request: FindCoordinatorRequest
) -> FindCoordinatorResponse:
    if request.key_type == TRANSACTION_KEY and state.transactions is None:
        return FindCoordinatorResponse(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
            error_message="transactions are not enabled on this broker",
            node_id=-1,
            host="",
            port=-1,
        )
    if request.key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return FindCoordinatorResponse(
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=f"unknown coordinator key type {request.key_type}",
            node_id=-1,
            host="",
            port=-1,
        )
    if request.key_type == GROUP_KEY and not access.allowed(
        state, header, Operation.DESCRIBE, access.GROUP, request.key
    ):
        return FindCoordinatorResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, node_id=-1, host="", port=-1)
    if request.key_type == TRANSACTION_KEY and not access.allowed(
        state, header, Operation.DESCRIBE, access.TRANSACTIONAL_ID, request.key
    ):
        return FindCoordinatorResponse(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, node_id=-1, host="", port=-1
        )
    host, port = state.advertised_address(header.listener)
    return FindCoordinatorResponse(node_id=state.config.node_id, host=host, port=port)
