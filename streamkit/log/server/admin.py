"""CreateTopics (v2-v4), DeleteTopics (v1-v3), CreatePartitions (v0-v1) and DescribeConfigs
(v1-v2).

Topic configs travel under Kafka's names (``retention.ms``...) and are checked by
``TopicConfig.from_kafka``. On one node a replication factor of 1 (or -1, "the default",
at v4) is the only one possible. DescribeConfigs returns every entry, as librdkafka's
read-modify-write of configs needs: a topic's entries are its full ``TopicConfig`` (set
on the topic report source DYNAMIC_TOPIC_CONFIG, the rest DEFAULT_CONFIG); the broker resource
lists the broker's settings.
"""

from __future__ import annotations

from streamkit.log.config import TopicConfig
from streamkit.log.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from streamkit.log.manager import INTERNAL_TOPICS, validate_topic_name
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode
from streamkit.log.server.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsCreatableTopic,
    CreateTopicsCreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsDeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from streamkit.log.server.state import BrokerState

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


async def create_topics(
    state: BrokerState, header: RequestHeader, request: CreateTopicsRequest
) -> CreateTopicsResponse:
    results = []
    for topic in request.topics:
        code, message = await _create_topic(state, topic, request.validate_only)
        results.append(
            CreateTopicsCreatableTopicResult(name=topic.name, error_code=code, error_message=message)
        )
    return CreateTopicsResponse(topics=results)


async def _create_topic(
    state: BrokerState, topic: CreateTopicsCreatableTopic, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    log = state.log
    try:
        validate_topic_name(topic.name)
    except InvalidTopicError as exc:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)
    if topic.name.startswith("__"):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, "topic names starting with '__' are reserved"
    if log.has_topic(topic.name):
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {topic.name!r} already exists"
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            return ErrorCode.INVALID_REQUEST, "give either assignments or partitions and replicas"
        node = state.config.node_id
        if any(a.broker_ids != [node] for a in topic.assignments):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"every partition must be on broker {node}"
        partitions = len(topic.assignments)
    else:
        if topic.replication_factor not in (-1, 1):
            return (
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {topic.replication_factor} is more than the 1 broker",
            )
        partitions = state.log.default_partitions if topic.num_partitions == -1 else topic.num_partitions
        if not 1 <= partitions <= 10_000:
            return ErrorCode.INVALID_PARTITIONS, f"a topic needs 1 to 10000 partitions, not {partitions}"
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    try:
        TopicConfig.from_kafka(configs, base=log.defaults)
    except InvalidTopicError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    if validate_only:
        return ErrorCode.NONE, None
    try:
        await state.run_blocking(log.create_topic, topic.name, partitions, configs)
    except TopicExistsError as exc:
        return ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)
    except InvalidTopicError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    return ErrorCode.NONE, None


async def delete_topics(
    state: BrokerState, header: RequestHeader, request: DeleteTopicsRequest
) -> DeleteTopicsResponse:
    results = []
    for name in request.topic_names:
        code = ErrorCode.NONE
        if name in INTERNAL_TOPICS:
            code = ErrorCode.INVALID_TOPIC_EXCEPTION
        else:
            try:
                await state.run_blocking(_delete, state, name)
            except UnknownTopicError:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            except InvalidTopicError:
                code = ErrorCode.INVALID_TOPIC_EXCEPTION
        results.append(DeleteTopicsDeletableTopicResult(name=name, error_code=code))
    return DeleteTopicsResponse(responses=results)


def _delete(state: BrokerState, name: str) -> None:
    state.log.delete_topic(name)
    state.producers.forget_topic(name)


async def create_partitions(
    state: BrokerState, header: RequestHeader, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    names = [topic.name for topic in request.topics]
    results = []
    for topic in request.topics:
        code: ErrorCode
        message: str | None
        if names.count(topic.name) > 1:
            code, message = ErrorCode.INVALID_REQUEST, f"topic {topic.name!r} is named more than once"
        else:
            code, message = await _create_partitions(state, topic, request.validate_only)
        results.append(CreatePartitionsTopicResult(name=topic.name, error_code=code, error_message=message))
    return CreatePartitionsResponse(results=results)


async def _create_partitions(
    state: BrokerState, topic: CreatePartitionsTopic, validate_only: bool
) -> tuple[ErrorCode, str | None]:
    log = state.log
    if topic.name in INTERNAL_TOPICS:
        return ErrorCode.INVALID_REQUEST, f"internal topic {topic.name!r} cannot change its partitions"
    if not log.has_topic(topic.name):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic.name!r}"
    current = log.describe_topic(topic.name).partitions
    if not current < topic.count <= 10_000:
        return (
            ErrorCode.INVALID_PARTITIONS,
            f"topic {topic.name!r} has {current} partitions: it can grow to at most 10000, not to {topic.count}",
        )
    if topic.assignments is not None:
        node = state.config.node_id
        if len(topic.assignments) != topic.count - current:
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{topic.count - current} new partitions need as many assignments"
        if any(a.broker_ids != [node] for a in topic.assignments):
            return ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"every partition must be on broker {node}"
    if validate_only:
        return ErrorCode.NONE, None
    try:
        await state.run_blocking(log.add_partitions, topic.name, topic.count)
    except UnknownTopicError as exc:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
    except InvalidPartitionsError as exc:  # another request grew it meanwhile
        return ErrorCode.INVALID_PARTITIONS, str(exc)
    return ErrorCode.NONE, None


async def describe_configs(
    state: BrokerState, header: RequestHeader, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(results=[_describe(state, r) for r in request.resources])


def _describe(state: BrokerState, resource: DescribeConfigsResource) -> DescribeConfigsResult:
    result = DescribeConfigsResult(
        resource_type=resource.resource_type, resource_name=resource.resource_name
    )
    if resource.resource_type == TOPIC_RESOURCE:
        name = resource.resource_name
        if name in INTERNAL_TOPICS or not state.log.has_topic(name):
            result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = f"unknown topic {name!r}"
            return result
        config = state.log.describe_topic(name).config
        entries = [
            (key, value, DYNAMIC_TOPIC_CONFIG if key in config.overrides else DEFAULT_CONFIG)
            for key, value in config.to_kafka().items()
        ]
    elif resource.resource_type == BROKER_RESOURCE:
        if resource.resource_name not in ("", str(state.config.node_id)):
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"this broker is node {state.config.node_id}"
            return result
        entries = [(key, value, STATIC_BROKER_CONFIG) for key, value in _broker_configs(state).items()]
    else:
        result.error_code = ErrorCode.INVALID_REQUEST
        result.error_message = f"resource type {resource.resource_type} is not supported"
        return result
    keys = resource.configuration_keys
    result.configs = [
        DescribeConfigsResourceResult(name=key, value=value, read_only=False, config_source=source)
        for key, value, source in entries
        if keys is None or key in keys
    ]
    return result


def _broker_configs(state: BrokerState) -> dict[str, str]:
    config = state.config
    defaults = state.log.defaults
    return {
        "broker.id": str(config.node_id),
        "num.partitions": str(state.log.default_partitions),
        "auto.create.topics.enable": str(config.auto_create_topics).lower(),
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": "1",
        "socket.request.max.bytes": str(config.max_frame_bytes),
        "message.max.bytes": str(defaults.max_message_bytes),
        "log.retention.ms": str(defaults.retention_ms),
        "log.retention.bytes": str(defaults.retention_bytes),
        "log.segment.bytes": str(defaults.segment_bytes),
        "log.cleanup.policy": defaults.cleanup_policy,
        "log.flush.interval.messages": str(defaults.flush_messages),
        "log.flush.interval.ms": str(defaults.flush_ms),
    }
