"""CreateAcls, DescribeAcls and DeleteAcls (v1 each, see ``apis.py``), answered as Kafka's ``AclApis``.

Without an authorizer (``BrokerState.acls`` None) each answers SECURITY_DISABLED, as Kafka
with no ``authorizer.class.name`` does (its admin client raises ``SecurityDisabledException``,
which Kafka's ``ClientCompatibilityTest`` counts as the API working). With one, DescribeAcls
needs DESCRIBE on the cluster and the other two ALTER, else every result is
CLUSTER_AUTHORIZATION_FAILED. A binding Kafka's controller refuses (``AclControlManager``:
an unknown or "any" type, pattern, operation or permission, an empty name, a cluster not named
``kafka-cluster``, a principal without ``Type:``) gets INVALID_REQUEST in its own result; the
valid bindings of the same request are still created. Codes unknown to this broker read as
UNKNOWN, as Kafka's ``fromCode`` reads them.
"""

from __future__ import annotations

import enum
from typing import TypeVar

from streamkit.log.server import access
from streamkit.log.server.authorizer import (
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode
from streamkit.log.server.messages import (
    CreateAclsAclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilter,
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsAclDescription,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
)
from streamkit.log.server.state import BrokerState

NO_AUTHORIZER = "No Authorizer is configured on the broker"
NO_AUTHORIZER_ALTER = "No Authorizer is configured."
CLUSTER_DENIED = "Cluster authorization failed."

E = TypeVar("E", bound=enum.IntEnum)


def _code(kind: type[E], value: int) -> E:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


def _filter(
    resource_type: int, name: str | None, pattern: int, principal: str | None, host: str | None,
    operation: int, permission: int,
) -> AclFilter:
    acl_filter = AclFilter(
        _code(ResourceType, resource_type), name, _code(PatternType, pattern), principal, host,
        _code(Operation, operation), _code(Permission, permission),
    )
    acl_filter.validate()
    return acl_filter


async def describe_acls(
    state: BrokerState, header: RequestHeader, request: DescribeAclsRequest
) -> DescribeAclsResponse:
    if state.acls is None:
        return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
    if not access.allowed_on_cluster(state, header, Operation.DESCRIBE):
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=CLUSTER_DENIED)
    try:
        acl_filter = _filter(
            request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
            request.principal_filter, request.host_filter, request.operation, request.permission_type,
        )
    except InvalidAclError as exc:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc))
    resources: dict[tuple[ResourceType, str, PatternType], list[DescribeAclsAclDescription]] = {}
    for acl in state.acls.describe(acl_filter):
        resources.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
            DescribeAclsAclDescription(
                principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission
            )
        )
    return DescribeAclsResponse(
        resources=[
            DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=pattern, acls=acls)
            for (rtype, name, pattern), acls in resources.items()
        ]
    )


async def create_acls(state: BrokerState, header: RequestHeader, request: CreateAclsRequest) -> CreateAclsResponse:
    def every(code: ErrorCode, message: str) -> CreateAclsResponse:
        return CreateAclsResponse(
            results=[CreateAclsAclCreationResult(error_code=code, error_message=message) for _ in request.creations]
        )

    store = state.acls
    if store is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER_ALTER)
    if not access.allowed_on_cluster(state, header, Operation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    results = []
    valid = []
    for c in request.creations:
        acl = AclBinding(
            _code(ResourceType, c.resource_type), c.resource_name, _code(PatternType, c.resource_pattern_type),
            c.principal, c.host, _code(Operation, c.operation), _code(Permission, c.permission_type),
        )
        try:
            acl.validate()
        except InvalidAclError as exc:
            results.append(CreateAclsAclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=str(exc)))
            continue
        valid.append(acl)
        results.append(CreateAclsAclCreationResult())
    if valid:
        async with state.config_lock:
            await state.run_blocking(store.create, valid)
    return CreateAclsResponse(results=results)


def _matching(acl: AclBinding) -> DeleteAclsMatchingAcl:
    return DeleteAclsMatchingAcl(
        resource_type=acl.resource_type, resource_name=acl.name, pattern_type=acl.pattern_type,
        principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission,
    )


async def delete_acls(state: BrokerState, header: RequestHeader, request: DeleteAclsRequest) -> DeleteAclsResponse:
    def every(code: ErrorCode, message: str) -> DeleteAclsResponse:
        return DeleteAclsResponse(
            filter_results=[DeleteAclsFilterResult(error_code=code, error_message=message) for _ in request.filters]
        )

    store = state.acls
    if store is None:
        return every(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER_ALTER)
    if not access.allowed_on_cluster(state, header, Operation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_DENIED)
    filters: list[AclFilter | str] = []
    for f in request.filters:
        try:
            filters.append(_read_delete_filter(f))
        except InvalidAclError as exc:
            filters.append(str(exc))
    valid = [f for f in filters if isinstance(f, AclFilter)]
    async with state.config_lock:
        removed = iter(await state.run_blocking(store.delete, valid))
    results = []
    for read in filters:
        if isinstance(read, str):
            results.append(DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=read))
        else:
            results.append(DeleteAclsFilterResult(matching_acls=[_matching(a) for a in next(removed)]))
    return DeleteAclsResponse(filter_results=results)


def _read_delete_filter(f: DeleteAclsFilter) -> AclFilter:
    return _filter(
        f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
        f.host_filter, f.operation, f.permission_type,
    )
