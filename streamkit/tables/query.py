"""Interactive queries of a table's local partitions: key parsing, lookups, scans, JSON.

Plain code the HTTP API (``web/``) and the CLI call; no I/O of its own. A key in a URL is
text: it is decoded by the table's key type (``str`` as is, ``int``/``float`` parsed, other
types and untyped tables as JSON, with bare text taken as a string). A query the table cannot
answer raises ``QueryError`` with the HTTP status that fits (400 malformed, 404 unknown, 503
partition not held here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from streamkit.tables.errors import PartitionNotHeldError, TableError
from streamkit.tables.partition import MISSING
from streamkit.tables.table import Table

MAX_SCAN = 10_000


class QueryError(TableError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def find_table(tables: Mapping[str, Table], name: str) -> Table:
    table = tables.get(name)
    if table is None:
        raise QueryError(404, f"no table named {name!r}; tables: {sorted(tables)}")
    return table


def parse_key(table: Table, text: str) -> Any:
    """The key ``text`` names, decoded as the table's keys are typed."""
    key_type = table.key_type
    try:
        if key_type is str:
            return text
        if key_type is bytes:
            return text.encode()
        if key_type in (int, float):
            return key_type(text)
        if key_type is None:
            try:
                return msgspec.json.decode(text.encode())
            except msgspec.DecodeError:
                return text  # bare text: a string key
        return msgspec.json.decode(text.encode(), type=key_type)
    except (ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        name = getattr(key_type, "__name__", str(key_type))
        raise QueryError(400, f"key {text!r} is not a valid {name} key of table {table.name!r}: {exc}") from exc


def to_json(value: Any) -> Any:
    """A JSON-able form of a key or value (Records as objects, bytes as text)."""
    return msgspec.to_builtins(value, enc_hook=repr)


def lookup(table: Table, text: str, from_ms: int | None = None, to_ms: int | None = None) -> dict[str, Any]:
    """``{"key": ..., "value": ...}`` of the key ``text`` names, from a partition held here;
    for a windowed table ``{"key": ..., "windows": [{"start", "end", "value"}, ...]}``, those
    overlapping ``[from_ms, to_ms]``."""
    key = parse_key(table, text)
    if table.is_windowed:
        windows = table.windows(key, from_ms, to_ms)
        if not windows and table.partition_state(table.partition_of(key)) is None:
            raise QueryError(503, f"the partition of key {text!r} of table {table.name!r} is not held by this worker")
        return {"key": to_json(key), "windows": [{**w, "value": to_json(w["value"])} for w in windows]}
    home = table.partition_of(key)
    for state in _states_for(table, home):
        value = state.get(key)
        if value is not MISSING:
            return {"key": to_json(key), "value": to_json(value), "partition": state.partition}
    if table.partition_state(home) is None:
        raise QueryError(
            503, f"partition {home} of table {table.name!r} (where key {text!r} belongs) is not held by this worker"
        )
    raise QueryError(404, f"key {text!r} is not in table {table.name!r}")


def _states_for(table: Table, home: int) -> list[Any]:
    """The partitions to look in: the key's home first, then the others held here (a key stays
    in the partition of the event that wrote it, which need not be its hash's)."""
    first = table.partition_state(home)
    rest = [table.partition_state(p) for p in table.held_partitions if p != home]
    return [s for s in [first, *rest] if s is not None]


def scan(table: Table, prefix: str = "", limit: int = 100) -> list[dict[str, Any]]:
    """Keys (as text) starting with ``prefix`` and their values, from every partition held here."""
    if not 1 <= limit <= MAX_SCAN:
        raise QueryError(400, f"limit must be between 1 and {MAX_SCAN}, not {limit}")
    out: list[dict[str, Any]] = []
    try:
        for key, value in table.items():
            if prefix and not str(key).startswith(prefix):
                continue
            out.append({"key": to_json(key), "value": to_json(value)})
            if len(out) >= limit:
                break
    except PartitionNotHeldError as exc:
        raise QueryError(503, str(exc)) from exc
    return out
