"""Kafka's ACL model and its decision: who may do what on which resource (plain code, no I/O).

The codes are Kafka's wire codes (``common/resource/ResourceType``, ``PatternType``,
``common/acl/AclOperation``, ``AclPermissionType``). A binding is (resource type, name, pattern
type, principal, host, operation, permission); a filter is the same with "any" in any place
(``ANY``, a null name/principal/host; pattern ``MATCH`` matches every binding that would apply
to the named resource).

The decision follows Kafka's ``StandardAuthorizer``:

* a super user (``super.users``) may do everything;
* the bindings that apply are those on the resource type whose pattern matches the name
  (LITERAL equal, LITERAL ``*``, PREFIXED a prefix) for the principal or ``User:*`` and the
  host or ``*``;
* a DENY of the operation (or ALL) wins over everything;
* else an ALLOW of the operation (or ALL) allows; an ALLOW of READ, WRITE, DELETE or ALTER also
  allows DESCRIBE, and one of ALTER_CONFIGS allows DESCRIBE_CONFIGS (a DENY implies nothing);
* else, when no binding at all names the resource (whatever its principal or operation),
  ``allow.everyone.if.no.acl.found`` decides (default false); otherwise denied.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"
ANONYMOUS = "User:ANONYMOUS"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_IMPLIES_DESCRIBE = frozenset(
    {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})


class InvalidAclError(ValueError):
    """A binding or filter Kafka would refuse (its message is the answer's error message)."""


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> None:
        """Refuse what Kafka's ``AclControlManager.validateNewAcl`` refuses."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAclError(f"Invalid resourceType {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"Invalid patternType {self.pattern_type.name}")
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise InvalidAclError(f"Invalid operation {self.operation.name}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAclError(f"Invalid permissionType {self.permission.name}")
        if not self.name:
            raise InvalidAclError("Resource name should not be empty")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        kind, sep, _ = self.principal.partition(":")
        if not sep or not kind:
            raise InvalidAclError(f"Could not parse principal from `{self.principal}` (no colon is present separating the principal type from the principal name)")
        if not self.host:
            raise InvalidAclError("Host should not be empty")

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern covers the literal resource ``name``."""
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == WILDCARD or self.name == name


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls/DeleteAcls filter: ANY or None matches anything in its place."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> None:
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:
                raise InvalidAclError(f"Invalid filter: {type(value).__name__} UNKNOWN")

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and acl.resource_type is not self.resource_type:
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation is not Operation.ANY and acl.operation is not self.operation:
            return False
        return self.permission is Permission.ANY or acl.permission is self.permission

    def _matches_pattern(self, acl: AclBinding) -> bool:
        if self.pattern_type is PatternType.MATCH:
            # Every binding that would apply to the literal resource named (all of them with no name).
            return self.name is None or acl.applies_to(acl.resource_type, self.name)
        if self.pattern_type is not PatternType.ANY and acl.pattern_type is not self.pattern_type:
            return False
        return self.name is None or acl.name == self.name


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def _grants(acl: AclBinding, operation: Operation) -> bool:
    if acl.operation is Operation.ALL or acl.operation is operation:
        return True
    if acl.permission is not Permission.ALLOW:
        return False
    if operation is Operation.DESCRIBE:
        return acl.operation in _IMPLIES_DESCRIBE
    if operation is Operation.DESCRIBE_CONFIGS:
        return acl.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


def authorize(
    acls: Iterable[AclBinding],
    settings: AuthorizerSettings,
    principal: str,
    host: str,
    operation: Operation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """Kafka's decision for one action on one literal resource (see the module docstring)."""
    if principal in settings.super_users:
        return True
    principals = (principal, WILDCARD_PRINCIPAL)
    named = False
    allowed = False
    for acl in acls:
        if not acl.applies_to(resource_type, name):
            continue
        named = True
        if acl.principal not in principals or acl.host not in (WILDCARD, host):
            continue
        if not _grants(acl, operation):
            continue
        if acl.permission is Permission.DENY:
            return False
        allowed = True
    if allowed:
        return True
    return not named and settings.allow_everyone_if_no_acl_found


def authorize_any(
    acls: Iterable[AclBinding],
    settings: AuthorizerSettings,
    principal: str,
    host: str,
    operation: Operation,
    resource_type: ResourceType,
) -> bool:
    """Whether ``principal`` may ``operation`` on *some* resource of the type (Kafka's
    ``Authorizer.authorizeByResourceType``; InitProducerId without a transactional id asks it
    of WRITE on topics): a resource named ``hardcode`` is allowed (so super users, ``*`` and
    no ACLs with ``allow.everyone.if.no.acl.found``), or an ALLOW pattern of the operation is
    not wholly covered by a DENY (a DENY of ``*`` covers everything)."""
    acls = list(acls)
    if authorize(acls, settings, principal, host, operation, resource_type, "hardcode"):
        return True
    principals = (principal, WILDCARD_PRINCIPAL)
    deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
    for acl in acls:
        if acl.resource_type is not resource_type or acl.host not in (WILDCARD, host):
            continue
        if acl.principal not in principals or acl.operation not in (operation, Operation.ALL):
            continue
        if acl.permission is Permission.DENY:
            if acl.pattern_type is PatternType.LITERAL and acl.name == WILDCARD:
                return False
            deny[acl.pattern_type].add(acl.name)
        elif acl.pattern_type is PatternType.LITERAL and acl.name == WILDCARD:
            return True
        else:
            allow[acl.pattern_type].add(acl.name)
    for pattern, names in allow.items():
        for name in names:
            if pattern is PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                continue
            if not any(name[:i] in deny[PatternType.PREFIXED] for i in range(1, len(name) + 1)):
                return True
    return False
