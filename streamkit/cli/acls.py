"""``streamkit acls add|list|remove``: a broker's ACLs in its data directory, offline.

The options are Kafka's ``kafka-acls`` ones (``--allow-principal``, ``--deny-principal``,
``--allow-host``, ``--deny-host``, ``--operation``, ``--topic``, ``--group``, ``--cluster``,
``--transactional-id``, ``--resource-pattern-type``, ``--principal``); hosts default to ``*``
and ``add`` to the LITERAL pattern, as there. It edits ``DATA_DIR/.broker/acls.json`` (see
``acl_store.py``) and refuses while a broker or worker holds the directory: a running broker
is changed over the wire (``kafka-acls --bootstrap-server``, the AdminClient). A broker started
with ``--authorizer`` reads the file at start, so ACLs can be set before its first client.
"""

from __future__ import annotations

from pathlib import Path

import click

from streamkit.log.manager import directory_owner
from streamkit.log.server.acl_store import AclFileError, AclStore, acl_path
from streamkit.log.server.authorizer import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AuthorizerSettings,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

_OPERATIONS = [op.name for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)]


def _data_dir_option(fn: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path(".streamkit"),
        show_default=True, envvar="STREAMKIT_DATA_DIR", help="Data directory of the broker (env STREAMKIT_DATA_DIR).",
    )(fn)


def _resource_options(fn: click.decorators.FC) -> click.decorators.FC:
    for option in reversed([
        click.option("--topic", "topics", multiple=True, help="A topic (or prefix, or *); repeatable."),
        click.option("--group", "groups", multiple=True, help="A consumer group (or prefix, or *); repeatable."),
        click.option("--transactional-id", "transactional_ids", multiple=True,
                     help="A transactional id (or prefix, or *); repeatable."),
        click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster)."),
    ]):
        fn = option(fn)
    return fn


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], txn_ids: tuple[str, ...],
               cluster: bool) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
    found += [(ResourceType.TRANSACTIONAL_ID, x) for x in txn_ids]
    if cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


class _Refused(click.ClickException):
    """The data directory cannot be changed now (in use, or a damaged ACL file): exit code 2."""

    exit_code = 2


def _open(data_dir: Path) -> AclStore:
    owner = directory_owner(data_dir)
    if owner is not None:
        raise _Refused(
            f"{data_dir} is in use by process {owner.pid}: change a running broker's ACLs over the wire "
            "(kafka-acls --bootstrap-server ...)"
        )
    try:
        return AclStore(acl_path(data_dir), AuthorizerSettings())
    except AclFileError as exc:
        raise _Refused(str(exc)) from exc


def _show(acl: AclBinding) -> str:
    return (f"{acl.resource_type.name}:{acl.pattern_type.name}:{acl.name} "
            f"principal={acl.principal} host={acl.host} operation={acl.operation.name} "
            f"permission={acl.permission.name}")


@click.group("acls")
def acls() -> None:
    """Add, list and remove a broker's ACLs in its data directory (the broker stopped)."""


@acls.command("add")
@_data_dir_option
@_resource_options
@click.option("--allow-principal", "allow_principals", multiple=True, metavar="PRINCIPAL",
              help="User:NAME (or User:*) to allow; repeatable.")
@click.option("--deny-principal", "deny_principals", multiple=True, metavar="PRINCIPAL",
              help="User:NAME (or User:*) to deny; repeatable.")
@click.option("--allow-host", "allow_hosts", multiple=True, help="Host the allow applies to (default *).")
@click.option("--deny-host", "deny_hosts", multiple=True, help="Host the deny applies to (default *).")
@click.option("--operation", "operations", multiple=True, type=click.Choice(_OPERATIONS, case_sensitive=False),
              help="Operation; repeatable (default ALL).")
@click.option("--resource-pattern-type", type=click.Choice(["LITERAL", "PREFIXED"], case_sensitive=False),
              default="LITERAL", show_default=True)
def add(data_dir: Path, topics: tuple[str, ...], groups: tuple[str, ...], transactional_ids: tuple[str, ...],
        cluster: bool, allow_principals: tuple[str, ...], deny_principals: tuple[str, ...],
        allow_hosts: tuple[str, ...], deny_hosts: tuple[str, ...], operations: tuple[str, ...],
        resource_pattern_type: str) -> None:
    """Add ACLs: every principal x host x operation on every resource named."""
    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not allow_principals and not deny_principals:
        raise click.UsageError("name a principal: --allow-principal or --deny-principal")
    pattern = PatternType[resource_pattern_type.upper()]
    ops = [Operation[o.upper()] for o in operations] or [Operation.ALL]
    entries = [(p, h, Permission.ALLOW) for p in allow_principals for h in (allow_hosts or ("*",))]
    entries += [(p, h, Permission.DENY) for p in deny_principals for h in (deny_hosts or ("*",))]
    new = [
        AclBinding(rtype, name, pattern, principal, host, op, permission)
        for rtype, name in resources for principal, host, permission in entries for op in ops
    ]
    for acl in new:
        try:
            acl.validate()
        except InvalidAclError as exc:
            raise click.ClickException(str(exc)) from exc
    store = _open(data_dir)
    store.create(new)
    for acl in new:
        click.echo(f"added {_show(acl)}")


def _filters(resources: list[tuple[ResourceType, str]], pattern: str, principal: str | None) -> list[AclFilter]:
    kind = PatternType[pattern.upper()]
    if not resources:
        return [AclFilter(principal=principal)]
    return [AclFilter(rtype, name, kind, principal) for rtype, name in resources]


_FILTER_PATTERNS = click.Choice(["LITERAL", "PREFIXED", "ANY", "MATCH"], case_sensitive=False)


@acls.command("list")
@_data_dir_option
@_resource_options
@click.option("--resource-pattern-type", type=_FILTER_PATTERNS, default="LITERAL", show_default=True,
              help="How the names match (MATCH: every ACL that applies to the name).")
@click.option("--principal", default=None, help="Only this principal's ACLs.")
def list_(data_dir: Path, topics: tuple[str, ...], groups: tuple[str, ...], transactional_ids: tuple[str, ...],
          cluster: bool, resource_pattern_type: str, principal: str | None) -> None:
    """List ACLs (all of them with no resource named)."""
    store = _open(data_dir)
    seen: set[AclBinding] = set()
    for acl_filter in _filters(_resources(topics, groups, transactional_ids, cluster), resource_pattern_type, principal):
        for acl in store.describe(acl_filter):
            if acl not in seen:
                seen.add(acl)
                click.echo(_show(acl))


@acls.command("remove")
@_data_dir_option
@_resource_options
@click.option("--resource-pattern-type", type=_FILTER_PATTERNS, default="LITERAL", show_default=True)
@click.option("--principal", default=None, help="Only this principal's ACLs.")
@click.option("--force", is_flag=True, help="Needed to remove every ACL (no resource named).")
def remove(data_dir: Path, topics: tuple[str, ...], groups: tuple[str, ...], transactional_ids: tuple[str, ...],
           cluster: bool, resource_pattern_type: str, principal: str | None, force: bool) -> None:
    """Remove the ACLs on the resources named (of --principal only, when given)."""
    resources = _resources(topics, groups, transactional_ids, cluster)
    if not resources and not force:
        raise click.UsageError("name a resource, or give --force to remove every ACL")
    store = _open(data_dir)
    for group in store.delete(_filters(resources, resource_pattern_type, principal)):
        for acl in group:
            click.echo(f"removed {_show(acl)}")
