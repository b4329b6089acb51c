"""Interactive queries of a table's local partitions: key parsing, lookups, scans, JSON.

Plain code the HTTP API (``web/``) and the CLI call; no I/O of its own. A key in a URL or on
the command line is text, and ``parse_keys`` is the one place it becomes keys: decoded by the
table's key type (``str`` as is, ``int``/``float`` parsed, other types as JSON); for an untyped
table (its keys are JSON) it has two readings, tried in order: the text as JSON (``0`` the
integer, ``"0"`` the string), then the text itself as a string (``0`` the string "0"), so a key
a scan lists as "0" is found by ``0``, and where both 0 and "0" are keys, ``0`` is the integer.
Each reading's partition is the one its own bytes hash to. A query the table cannot answer
raises ``QueryError`` with the HTTP status that fits (400 malformed, 404 unknown, 503
partition not held here: ``NotHeldHere``, naming the partition and the reading to ask its
owner about).
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


class NotHeldHere(QueryError):
    """503: the key's reading ``reading`` (an index into ``parse_keys``) belongs to
    ``partition``, which this worker does not hold, and is not elsewhere here either: its owner
    can answer (for that reading, then the next ones: ``lookup(..., readings=)``)."""

    def __init__(self, message: str, partition: int, reading: int) -> None:
        super().__init__(503, message)
        self.partition = partition
        self.reading = reading


def find_table(tables: Mapping[str, Table], name: str) -> Table:
    table = tables.get(name)
    if table is None:
        raise QueryError(404, f"no table named {name!r}; tables: {sorted(tables)}")
    return table


def parse_keys(table: Table, text: str) -> list[Any]:
    """The keys ``text`` may name, in the order a lookup tries them (see the module docstring):
    one for a typed table; for an untyped one, the JSON reading, then the text as a string if
    that differs (bare text that is not JSON has only the one)."""
    key_type = table.key_type
    try:
        if key_type is str:
            return [text]
        if key_type is bytes:
            return [text.encode()]
        if key_type in (int, float):
            return [key_type(text)]
        if key_type is None:
            try:
                as_json = msgspec.json.decode(text.encode())
            except msgspec.DecodeError:
                return [text]  # bare text: a string key
            if as_json is None or isinstance(as_json, (list, dict)) or as_json == text:
                return [text]  # null, arrays and objects are no table's keys (None, unhashable)
            return [as_json, text]
        return [msgspec.json.decode(text.encode(), type=key_type)]
    except (ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        name = getattr(key_type, "__name__", str(key_type))
        raise QueryError(400, f"key {text!r} is not a valid {name} key of table {table.name!r}: {exc}") from exc


def to_json(value: Any) -> Any:
    """A JSON-able form of a key or value (Records as objects, bytes as text)."""
    return msgspec.to_builtins(value, enc_hook=repr)


def lookup(
    table: Table, text: str, from_ms: int | None = None, to_ms: int | None = None, *, readings: slice = slice(None)
) -> dict[str, Any]:
    """``{"key": ..., "value": ..., "partition": ...}`` of the key ``text`` names, from a partition
    held here; for a windowed table ``{"key": ..., "windows": [{"start", "end", "value"}, ...]}``,
    those overlapping ``[from_ms, to_ms]``. The readings of ``text`` (``parse_keys``; only those
    ``readings`` selects) are tried in order; one not found here whose partition is not held here
    either stops the lookup with ``NotHeldHere``: a later reading must not win over it."""
    keys = parse_keys(table, text)
    indexes = range(len(keys))[readings]
    for index in indexes:
        key = keys[index]
        home = table.partition_of(key)
        if table.is_windowed:
            windows = table.windows(key, from_ms, to_ms)
            if windows:
                return {"key": to_json(key), "windows": [{**w, "value": to_json(w["value"])} for w in windows]}
        else:
            for state in _states_for(table, home):
                value = state.get(key)
                if value is not MISSING:
                    return {"key": to_json(key), "value": to_json(value), "partition": state.partition}
        if table.partition_state(home) is None:
            raise NotHeldHere(
                f"partition {home} of table {table.name!r} (where key {text!r} belongs) is not held by this worker",
                home, index,
            )
    if table.is_windowed:
        return {"key": to_json(keys[0]), "windows": []}
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
