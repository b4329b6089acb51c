"""Generate ``streamkit/log/server/messages.py`` from kio's schemas.

Run ``python scripts/gen_messages.py > streamkit/log/server/messages.py`` after changing
``API_RANGES`` below (or the pinned kio). ``test_messages.py`` fails when the file is stale.

For each API it takes the request and response schema of the *highest* implemented version
(every lower version's fields are a subset of it; the test checks that) and writes plain,
version-independent dataclasses with the same field names, except that durations and
timestamps become integer milliseconds with an ``_ms`` suffix.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

# api key -> (name, lowest implemented version, highest implemented version)
API_RANGES: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 8),
    1: ("Fetch", 4, 11),
    2: ("ListOffsets", 1, 3),
    3: ("Metadata", 1, 5),
    8: ("OffsetCommit", 2, 3),
    9: ("OffsetFetch", 1, 7),
    10: ("FindCoordinator", 0, 1),
    11: ("JoinGroup", 0, 5),
    12: ("Heartbeat", 0, 3),
    13: ("LeaveGroup", 0, 1),
    14: ("SyncGroup", 0, 3),
    15: ("DescribeGroups", 0, 3),
    16: ("ListGroups", 0, 1),
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 3),
    19: ("CreateTopics", 2, 4),
    20: ("DeleteTopics", 1, 3),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 1),
    24: ("AddPartitionsToTxn", 0, 1),
    25: ("AddOffsetsToTxn", 0, 1),
    26: ("EndTxn", 0, 1),
    28: ("TxnOffsetCommit", 0, 3),
    29: ("DescribeAcls", 1, 1),
    30: ("CreateAcls", 1, 1),
    31: ("DeleteAcls", 1, 1),
    32: ("DescribeConfigs", 1, 2),
    33: ("AlterConfigs", 0, 2),
    35: ("DescribeLogDirs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 1),
    42: ("DeleteGroups", 0, 1),
    44: ("IncrementalAlterConfigs", 0, 1),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 1),
}

_INT_TYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "error_code"}
_MS_TYPES = {"timedelta_i32", "timedelta_i64", "datetime_i64"}


def our_name(field: dataclasses.Field[Any]) -> str:
    if "kafka_type" in field.metadata and get_schema_field_type(field) in _MS_TYPES and not field.name.endswith("_ms"):
        return field.name + "_ms"
    return field.name


def _py_type(kafka_type: str) -> str:
    if kafka_type in _INT_TYPES or kafka_type in _MS_TYPES:
        return "int"
    return {"string": "str", "bytes": "bytes", "records": "bytes", "bool": "bool", "float64": "float", "uuid": "UUID"}[kafka_type]


def _default(field: dataclasses.Field[Any], kafka_type: str) -> str:
    value = field.default
    if value is dataclasses.MISSING:
        return {"int": "0", "str": '""', "bytes": 'b""', "bool": "False", "float": "0.0", "UUID": "None"}[_py_type(kafka_type)]
    if value is None:
        return "None"
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return str(round(value.total_seconds() * 1000))
    if kafka_type == "datetime_i64":
        return str(round(value.timestamp() * 1000))
    if kafka_type == "error_code":
        return str(int(value.value))
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


class Generator:
    def __init__(self) -> None:
        self.classes: dict[str, str] = {}  # our class name -> source
        self.order: list[str] = []
        self.signatures: dict[str, str] = {}

    def emit(self, cls: type, name: str, prefix: str, doc: str, api_key: int | None) -> str:
        lines: list[str] = []
        for field in dataclasses.fields(cls):
            kind = classify_field(field)
            optional = is_optional(field)
            fname = our_name(field)
            if isinstance(kind, EntityTupleField | EntityField):
                nested = kind.type_
                nested_name = self.nested_name(nested, prefix)
                nested_name = self.emit(nested, nested_name, prefix, "", None)
                if isinstance(kind, EntityTupleField):
                    ann = f"list[{nested_name}]"
                    if optional:
                        lines.append(f"    {fname}: {ann} | None = None")
                    else:
                        lines.append(f"    {fname}: {ann} = field(default_factory=list)")
                elif optional:
                    lines.append(f"    {fname}: {nested_name} | None = None")
                else:
                    lines.append(f"    {fname}: {nested_name} = field(default_factory={nested_name})")
                continue
            kafka_type = get_schema_field_type(field)
            py = _py_type(kafka_type)
            if isinstance(kind, PrimitiveTupleField):
                if optional:
                    lines.append(f"    {fname}: list[{py}] | None = None")
                else:
                    lines.append(f"    {fname}: list[{py}] = field(default_factory=list)")
                continue
            if kafka_type in _MS_TYPES:
                default = "-1" if field.default is None else _default(field, kafka_type)
                lines.append(f"    {fname}: int = {default}")
            elif optional or py == "UUID":
                default = "None" if field.default is dataclasses.MISSING else _default(field, kafka_type)
                lines.append(f"    {fname}: {py} | None = {default}")
            else:
                lines.append(f"    {fname}: {py} = {_default(field, kafka_type)}")
        body = "\n".join(lines) or ("" if api_key is not None else "    pass")
        head = "@dataclass(slots=True, kw_only=True)\n" + f"class {name}:\n"
        if doc:
            head += f'    """{doc}"""\n\n'
        if api_key is not None:
            head += f"    API_KEY: ClassVar[int] = {api_key}\n"
        source = (head + body).rstrip("\n") + "\n"
        if name in self.classes:
            if self.classes[name] != source:
                raise SystemExit(f"two different classes named {name}")
            return name
        self.classes[name] = source
        self.order.append(name)
        return name

    def nested_name(self, cls: type, prefix: str) -> str:
        name = cls.__name__
        if not name.startswith(prefix):
            name = prefix + name
        return name


def generate() -> str:
    gen = Generator()
    pairs: list[str] = []
    for api_key, (name, lo, hi) in sorted(API_RANGES.items()):
        req = load_request_schema(api_key, hi)
        resp = load_response_schema(api_key, hi)
        rq = gen.emit(req, f"{name}Request", name, f"{name} request, api key {api_key}: fields of v{hi} (v{lo}-v{hi} decode into it).", api_key)
        rs = gen.emit(resp, f"{name}Response", name, f"{name} response, api key {api_key}: fields of v{hi} (encodes as v{lo}-v{hi}).", api_key)
        pairs.append(f"    {api_key}: ({rq}, {rs}),")
    out = [
        '"""Kafka request and response messages as plain dataclasses, one pair per API.',
        "",
        "GENERATED by ``scripts/gen_messages.py`` from the schemas of the pinned kio; do not",
        "edit by hand. Each class holds the fields of the highest version the server implements;",
        "lower versions decode into the same class (fields they lack keep their defaults) and",
        "encode from it (fields they lack are dropped), so handlers never look at versions unless",
        "a behaviour differs. Field names are kio's, except that durations and timestamps are",
        "integer milliseconds named with an ``_ms`` suffix.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from dataclasses import dataclass, field",
        "from typing import ClassVar",
        "",
        "",
    ]
    out.append("\n\n".join(gen.classes[n] for n in gen.order))
    out.append("")
    out.append("# api key -> (request class, response class)")
    out.append("MESSAGES: dict[int, tuple[type, type]] = {")
    out.extend(pairs)
    out.append("}")
    out.append("")
    out.append("# api key -> (lowest, highest) version these classes implement")
    out.append("IMPLEMENTED: dict[int, tuple[int, int]] = {")
    out.extend(f"    {k}: ({lo}, {hi})," for k, (_, lo, hi) in sorted(API_RANGES.items()))
    out.append("}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(generate())
