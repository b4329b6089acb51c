"""DescribeConfigs (v1-v2), AlterConfigs (v0-v2) and IncrementalAlterConfigs (v0-v1).

Topic configs travel under Kafka's names and are checked by ``TopicConfig.from_kafka``
(every config Kafka 4.4 knows; which the log honours is in ``log/config.py``).

* DescribeConfigs returns every entry, as librdkafka's read-modify-write of configs needs:
  a topic's entries are all of Kafka's topic configs (set on the topic: source
  DYNAMIC_TOPIC_CONFIG; the rest DEFAULT_CONFIG); the broker resource lists the broker's
  settings (STATIC_BROKER_CONFIG: they are its command-line options).
* AlterConfigs replaces a topic's whole set of overrides: a config it does not name goes back
  to its default (a null value means "not set"), as in Kafka.
* IncrementalAlterConfigs (``kafka-configs --alter``) applies SET, DELETE, APPEND and SUBTRACT
  (the last two on LIST configs only) to the topic's overrides, in order.

Kafka's refusals, per resource: a resource named twice in one request, a config named twice
in one resource, a null value outside DELETE, an unknown operation or resource type:
INVALID_REQUEST; an unknown name or bad value: INVALID_CONFIG with Kafka's message; an unknown
topic: UNKNOWN_TOPIC_OR_PARTITION. The broker's own settings cannot be altered (INVALID_REQUEST):
they are its command-line options. Changes to one topic are made one request at a time.

With an authorizer (``BrokerConfig.authorizer``) each request is first checked as Kafka's
``KafkaApis`` checks it, answered with Kafka's authorization error at Kafka's granularity
(``access.py``; the checks are listed in ``docs/security.md``).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Hashable
from typing import TypeVar

from streamkit.log.config import TopicConfig
from streamkit.log.errors import InvalidTopicError, UnknownTopicError
from streamkit.log.manager import INTERNAL_TOPICS
from streamkit.log.server import access
from streamkit.log.server.authorizer import Operation
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode
from streamkit.log.server.messages import (
    AlterConfigsRequest,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    IncrementalAlterConfigsAlterableConfig,
    IncrementalAlterConfigsAlterConfigsResourceResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from streamkit.log.server.state import BrokerState
from streamkit.log.topic_configs import SPECS

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

Outcome = tuple[ErrorCode, str | None]
Change = Callable[[dict[str, str]], dict[str, str]]  # a topic's overrides -> its new ones
H = TypeVar("H", bound=Hashable)


async def describe_configs(
    state: BrokerState, header: RequestHeader, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    results = []
    for r in request.resources:
        denied = _denied(state, header, Operation.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
        if denied is None:
            results.append(_describe(state, r))
        else:
            results.append(DescribeConfigsResult(
                resource_type=r.resource_type, resource_name=r.resource_name, error_code=denied
            ))
    return DescribeConfigsResponse(results=results)


def _denied(
    state: BrokerState, header: RequestHeader, operation: Operation, resource_type: int, name: str
) -> ErrorCode | None:
    """Kafka's check of a config resource: ``operation`` on the topic, or on the cluster for a
    broker; the refusal's code, or None when allowed (other types are refused later)."""
    if resource_type == TOPIC_RESOURCE and not access.allowed(state, header, operation, access.TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type == BROKER_RESOURCE and not access.allowed_on_cluster(state, header, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


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


async def alter_configs(
    state: BrokerState, header: RequestHeader, request: AlterConfigsRequest
) -> AlterConfigsResponse:
    twice = _named_twice([(r.resource_type, r.resource_name) for r in request.resources])
    responses = []
    for resource in request.resources:
        outcome: Outcome
        if (resource.resource_type, resource.resource_name) in twice:
            outcome = ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
        elif (denied := _denied(
            state, header, Operation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )) is not None:
            outcome = denied, None
        elif (refusal := _refuse_resource(resource.resource_type, resource.resource_name)) is not None:
            outcome = refusal
        elif _named_twice([c.name for c in resource.configs]):
            outcome = ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
        else:
            wanted = {c.name: c.value for c in resource.configs if c.value is not None}
            async with state.config_lock:
                outcome = await _apply(state, resource.resource_name, functools.partial(_replace, wanted), request.validate_only)
        responses.append(AlterConfigsResourceResponse(
            error_code=outcome[0], error_message=outcome[1],
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        ))
    return AlterConfigsResponse(responses=responses)


async def incremental_alter_configs(
    state: BrokerState, header: RequestHeader, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    twice = _named_twice([(r.resource_type, r.resource_name) for r in request.resources])
    responses = []
    for resource in request.resources:
        outcome: Outcome
        nulls = [c.name for c in resource.configs if c.value is None and c.config_operation != DELETE]
        if (resource.resource_type, resource.resource_name) in twice:
            outcome = ErrorCode.INVALID_REQUEST, "Each resource must appear at most once."
        elif (denied := _denied(
            state, header, Operation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )) is not None:
            outcome = denied, None
        elif (refusal := _refuse_resource(resource.resource_type, resource.resource_name)) is not None:
            outcome = refusal
        elif _named_twice([c.name for c in resource.configs]):
            outcome = ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys"
        elif nulls:
            outcome = ErrorCode.INVALID_REQUEST, f"Null value not supported for : {', '.join(nulls)}"
        elif bad := [c.config_operation for c in resource.configs if not SET <= c.config_operation <= SUBTRACT]:
            outcome = ErrorCode.INVALID_REQUEST, f"Unknown config operation {bad[0]}"
        else:
            ops = resource.configs
            async with state.config_lock:
                outcome = await _apply(
                    state, resource.resource_name, functools.partial(_incremental, ops), request.validate_only
                )
        responses.append(IncrementalAlterConfigsAlterConfigsResourceResponse(
            error_code=outcome[0], error_message=outcome[1],
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        ))
    return IncrementalAlterConfigsResponse(responses=responses)


def _named_twice(items: list[H]) -> set[H]:
    return {item for item, n in Counter(items).items() if n > 1}


def _refuse_resource(resource_type: int, name: str) -> Outcome | None:
    if resource_type == BROKER_RESOURCE:
        return ErrorCode.INVALID_REQUEST, "streamkit broker's settings are its command-line options: they cannot be altered"
    if resource_type != TOPIC_RESOURCE:
        return ErrorCode.INVALID_REQUEST, f"Unexpected resource type {resource_type}."
    if name in INTERNAL_TOPICS:
        return ErrorCode.INVALID_REQUEST, f"internal topic {name!r} keeps its configs"
    return None


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _replace(wanted: dict[str, str], current: dict[str, str]) -> dict[str, str]:
    """AlterConfigs: the overrides become exactly the ones named."""
    return wanted


def _incremental(ops: list[IncrementalAlterConfigsAlterableConfig], current: dict[str, str]) -> dict[str, str]:
    """Kafka's incremental operations applied in order to a topic's overrides."""
    out = dict(current)
    for op in ops:
        if op.config_operation == DELETE:
            out.pop(op.name, None)
            continue
        value = op.value or ""
        if op.config_operation == SET:
            out[op.name] = value
            continue
        verb = "append" if op.config_operation == APPEND else "subtract"
        spec = SPECS.get(op.name)
        if spec is None or spec.type != "LIST":
            raise _Refused(f"Config value {verb} is not allowed for config key: {op.name}")
        old = out.get(op.name, spec.default)
        items = [item for item in old.split(",") if item]
        given = [item for item in value.split(",") if item]
        if op.config_operation == APPEND:
            items += [item for item in given if item not in items]
        else:
            items = [item for item in items if item not in given]
        out[op.name] = ",".join(items)
    return out


async def _apply(state: BrokerState, topic: str, change: Change, validate_only: bool) -> Outcome:
    """Replace ``topic``'s overrides with ``change(current overrides)``, checked first
    (the caller holds ``state.config_lock``: nothing alters them meanwhile)."""
    log = state.log
    if not log.has_topic(topic):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {topic!r}"
    config = log.describe_topic(topic).config
    shown = config.to_kafka()
    current = {name: shown[name] for name in config.overrides}
    try:
        wanted = change(current)
        TopicConfig.from_kafka(wanted, base=log.defaults)
    except _Refused as exc:
        return ErrorCode.INVALID_CONFIG, exc.message
    except InvalidTopicError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    if validate_only:
        return ErrorCode.NONE, None
    try:
        await state.run_blocking(lambda: log.alter_topic_config(topic, wanted, replace=True))
    except UnknownTopicError as exc:  # deleted meanwhile
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
    except InvalidTopicError as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    return ErrorCode.NONE, None
