"""The broker's ACLs, durable in ``<data dir>/.broker/acls.json``, and the decision over them.

Why a file and not a compacted internal topic (Kafka keeps them in its metadata log): ACLs are
few, always read whole at start, and changed rarely; one JSON document replaced atomically
(written to ``acls.json.tmp``, fsynced, renamed over ``acls.json``, the directory fsynced) is
never seen half-written, needs no compaction, and is what ``streamkit acls`` edits offline.

Layout: ``{"format": 1, "crc32": C, "acls": [[type, name, pattern, principal, host, op,
permission], ...]}`` with Kafka's codes; ``C`` is the CRC-32 of the JSON of ``acls`` (compact,
sorted). A file that is not that (unreadable JSON, a wrong checksum, an unknown code, a binding
Kafka would refuse) raises ``AclFileError``: the broker refuses to start with one line rather
than run with ACLs silently lost, which could grant more than was meant.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from streamkit._core.errors import ConfigError
from streamkit.log.server.authorizer import (
    AclBinding,
    AclFilter,
    AuthorizerSettings,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
    authorize_any,
)

FORMAT = 1


class AclFileError(ConfigError):
    """The ACL file cannot be trusted."""


def acl_path(data_dir: Path) -> Path:
    return data_dir / ".broker" / "acls.json"


def _encode(acls: Iterable[AclBinding]) -> list[list[object]]:
    return [
        [int(a.resource_type), a.name, int(a.pattern_type), a.principal, a.host, int(a.operation), int(a.permission)]
        for a in sorted(acls)
    ]


def _crc(rows: object) -> int:
    return zlib.crc32(json.dumps(rows, separators=(",", ":"), sort_keys=True).encode())


def _decode_row(row: object) -> AclBinding:
    if not isinstance(row, list) or len(row) != 7:
        raise ValueError(f"not a binding: {row!r}")
    rtype, name, pattern, principal, host, op, permission = row
    if not all(isinstance(v, int) for v in (rtype, pattern, op, permission)) or not all(
        isinstance(v, str) for v in (name, principal, host)
    ):
        raise ValueError(f"not a binding: {row!r}")
    acl = AclBinding(
        ResourceType(rtype), name, PatternType(pattern), principal, host, Operation(op), Permission(permission)
    )
    acl.validate()
    return acl


def load_acls(path: Path) -> set[AclBinding]:
    """The bindings in ``path`` (none when it does not exist)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise AclFileError(f"cannot read the ACL file {path}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("acls"), list):
            raise ValueError("not an ACL file of format 1")
        if doc.get("crc32") != _crc(doc["acls"]):
            raise ValueError("its checksum does not match its contents")
        return {_decode_row(row) for row in doc["acls"]}
    except (ValueError, InvalidAclError) as exc:  # JSONDecodeError and bad enum codes are ValueErrors
        raise AclFileError(f"the ACL file {path} is damaged ({exc}); restore it or remove it knowingly") from exc


def save_acls(path: Path, acls: Iterable[AclBinding]) -> None:
    """Replace ``path`` with ``acls`` atomically and durably (fsync, rename, fsync the directory)."""
    rows = _encode(acls)
    data = json.dumps({"format": FORMAT, "crc32": _crc(rows), "acls": rows}, indent=0).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AclStore:
    """The bindings of one data directory and the settings of the decision over them.

    Changes go to disk before they are applied in memory (``save_acls`` runs first), so an
    answer of success means the change survives a crash.
    """

    def __init__(self, path: Path, settings: AuthorizerSettings) -> None:
        self.path = path
        self.settings = settings
        self._acls: frozenset[AclBinding] = frozenset(load_acls(path))

    @property
    def acls(self) -> frozenset[AclBinding]:
        return self._acls

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return authorize(self._acls, self.settings, principal, host, operation, resource_type, name)

    def authorize_any(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        return authorize_any(self._acls, self.settings, principal, host, operation, resource_type)

    def describe(self, acl_filter: AclFilter) -> list[AclBinding]:
        return sorted(a for a in self._acls if acl_filter.matches(a))

    def create(self, acls: Iterable[AclBinding]) -> None:
        new = self._acls | frozenset(acls)
        if new != self._acls:
            save_acls(self.path, new)
            self._acls = new

    def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """The bindings each filter removed (a binding matched by two filters is listed for both)."""
        matched = [sorted(a for a in self._acls if f.matches(a)) for f in filters]
        gone = frozenset(a for group in matched for a in group)
        if gone:
            new = self._acls - gone
            save_acls(self.path, new)
            self._acls = new
        return matched
