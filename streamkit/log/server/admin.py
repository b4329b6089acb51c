"""CreateTopics (v2-v4), DeleteTopics (v1-v3), CreatePartitions (v0-v1) and DeleteRecords (v0-v2).

Topic configs travel under Kafka's names (``retention.ms``...) and are checked by
``TopicConfig.from_kafka``. On one node a replication factor of 1 (or -1, "the default",
at v4) is the only one possible. Describing and altering configs is ``config_apis.py``.

DeleteRecords answers as Kafka's ``ReplicaManager.deleteRecords``: per partition the low
watermark (the log start offset after the call) or -1 with UNKNOWN_TOPIC_OR_PARTITION,
INVALID_TOPIC_EXCEPTION (an internal topic), POLICY_VIOLATION (``cleanup.policy`` without
``delete``) or OFFSET_OUT_OF_RANGE (past the high watermark, or below -1). One node has no
followers to wait for, so the answer is immediate and ``timeout_ms`` is not used; a partition
named twice is answered once, for the offset named last (Kafka keeps a map).

With an authorizer (``BrokerConfig.authorizer``) each request is first checked as Kafka's
``KafkaApis`` checks it, answered with Kafka's authorization error at Kafka's granularity
(``access.py``; the checks are listed in ``docs/security.md``).
"""

from __future__ import annotations

from streamkit.log.config import TopicConfig
from streamkit.log.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    LogError,
    TopicExistsError,
    UnknownTopicError,
)
from streamkit.log.manager import INTERNAL_TOPICS, validate_topic_name
from streamkit.log.server import access
from streamkit.log.server.authorizer import Operation
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode, code_for
from streamkit.log.server.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsCreatableTopic,
    CreateTopicsCreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
    DeleteTopicsDeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from streamkit.log.server.state import BrokerState


async def create_topics(
    state: BrokerState, header: RequestHeader, request: CreateTopicsRequest
) -> CreateTopicsResponse:
    results = []
    for topic in request.topics:
        if access.may_create_topic(state, header, topic.name):
            code, message = await _create_topic(state, topic, request.validate_only)
        else:  # before any check of the name or the topic (Kafka's ControllerApis.createTopics)
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
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
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists."  # Kafka's words
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
    deletable = _allowed_or_cluster(state, header, Operation.DELETE, request.topic_names)
    for name in request.topic_names:
        code = ErrorCode.NONE
        if name not in deletable:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif name in INTERNAL_TOPICS:
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


def _allowed_or_cluster(state: BrokerState, header: RequestHeader, operation: Operation, names: list[str]) -> set[str]:
    """The topics ``operation`` may touch: all of them with it on the cluster, else those it
    is allowed on (Kafka's DeleteTopics)."""
    if access.allowed_on_cluster(state, header, operation):
        return set(names)
    return access.allowed_names(state, header, operation, access.TOPIC, names)


def _delete(state: BrokerState, name: str) -> None:
    state.log.delete_topic(name)
    state.producers.forget_topic(name)


async def create_partitions(
    state: BrokerState, header: RequestHeader, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    names = [topic.name for topic in request.topics]
    alterable = access.allowed_names(state, header, Operation.ALTER, access.TOPIC, names)
    results = []
    for topic in request.topics:
        code: ErrorCode
        message: str | None
        if names.count(topic.name) > 1:
            code, message = ErrorCode.INVALID_REQUEST, f"topic {topic.name!r} is named more than once"
        elif topic.name not in alterable:
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
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


async def delete_records(
    state: BrokerState, header: RequestHeader, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    wanted: dict[str, dict[int, int]] = {}
    for topic in request.topics:
        for part in topic.partitions:
            wanted.setdefault(topic.name, {})[part.partition_index] = part.offset
    results = []
    deletable = access.allowed_names(state, header, Operation.DELETE, access.TOPIC, wanted)
    for name, offsets in wanted.items():
        parts = []
        for index, offset in offsets.items():
            low_watermark, code = -1, ErrorCode.NONE
            if name not in deletable:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                try:
                    low_watermark = await state.run_blocking(state.log.delete_records, name, index, offset)
                except LogError as exc:  # unknown, internal, policy, out of range, a closed log
                    code = code_for(exc)
            parts.append(DeleteRecordsPartitionResult(partition_index=index, low_watermark=low_watermark, error_code=code))
        results.append(DeleteRecordsTopicResult(name=name, partitions=parts))
    return DeleteRecordsResponse(topics=results)
