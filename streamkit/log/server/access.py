"""What a request may touch: the handlers' one question to the authorizer.

With no authorizer (``BrokerState.acls`` None) everything is allowed, as on a Kafka broker
without ``authorizer.class.name``. Names of resources follow Kafka's ``KafkaApis``: the
cluster is ``kafka-cluster``.
"""

from __future__ import annotations

from collections.abc import Iterable

from streamkit.log.server.authorizer import CLUSTER_NAME, Operation, ResourceType
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.state import BrokerState

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


def allowed(
    state: BrokerState, header: RequestHeader, operation: Operation, resource_type: ResourceType, name: str
) -> bool:
    if state.acls is None:
        return True
    return state.acls.authorize(header.principal, header.client_host, operation, resource_type, name)


def allowed_on_cluster(state: BrokerState, header: RequestHeader, operation: Operation) -> bool:
    return allowed(state, header, operation, CLUSTER, CLUSTER_NAME)


def allowed_names(
    state: BrokerState, header: RequestHeader, operation: Operation, resource_type: ResourceType, names: Iterable[str]
) -> set[str]:
    """The names among ``names`` the request's principal may ``operation`` on (each asked once)."""
    if state.acls is None:  # the hot path of a broker without authorizer: no decision to make
        return set(names)
    return {n for n in set(names) if allowed(state, header, operation, resource_type, n)}


def may_create_topic(state: BrokerState, header: RequestHeader, name: str) -> bool:
    """Kafka's rule for CreateTopics and auto-creation: CREATE on the cluster or on the topic."""
    return allowed_on_cluster(state, header, Operation.CREATE) or allowed(
        state, header, Operation.CREATE, TOPIC, name
    )


def allowed_on_some(state: BrokerState, header: RequestHeader, operation: Operation, resource_type: ResourceType) -> bool:
    """Kafka's ``authorizeByResourceType``: ``operation`` on some resource of the type."""
    if state.acls is None:
        return True
    return state.acls.authorize_any(header.principal, header.client_host, operation, resource_type)
