"""Every topic config Apache Kafka 4.4 knows: its name, type, default and validation.

The catalog is Kafka 4.4's ``LogConfig`` definition (read from its ``configDefCopy()``), in our
words. ``check`` turns a raw string into the value Kafka would store (``"TRUE"`` ->
``"true"``, ``" 10 "`` -> ``"10"``) or raises ``InvalidTopicError`` with Kafka's message shape:
``Unknown topic config name: x`` and ``Invalid value v for configuration x: <reason>``.

Which configs the log *honours* (changes its behaviour for) and which it only stores is
decided in ``config.py`` (``TopicConfig``); this module knows nothing of behaviour.
``internal.segment.bytes`` (a Kafka-internal setting for its own tests, never listed by
DescribeConfigs) is left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streamkit.log.errors import InvalidTopicError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# A value of the config's type -> why it is refused, or None when it is fine.
Validator = Callable[[object], str | None]


@dataclass(frozen=True, slots=True)
class ConfigSpec:
    name: str
    type: str  # Kafka's ConfigDef type: INT, LONG, DOUBLE, BOOLEAN, STRING or LIST
    default: str  # as DescribeConfigs shows it
    validator: Validator | None = None


def _at_least(low: int | float) -> Validator:
    return lambda v: None if v >= low else f"Value must be at least {low}"  # type: ignore[operator]


def _between(low: int | float, high: int | float) -> Validator:
    def check(v: object) -> str | None:
        if v < low:  # type: ignore[operator]
            return f"Value must be at least {low}"
        if v > high:  # type: ignore[operator]
            return f"Value must be no more than {high}"
        return None

    return check


def _one_of(*allowed: str) -> Validator:
    return lambda v: None if v in allowed else f"String must be one of: {', '.join(allowed)}"


def _list_of(*allowed: str) -> Validator:
    def check(v: object) -> str | None:
        assert isinstance(v, list)
        if any(item not in allowed for item in v):
            return f"String must be one of: {', '.join(allowed)}"
        return None

    return check


def _gzip_level(v: object) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "Value must be between 1 and 9 or equal to -1"  # type: ignore[operator]


def _throttled_replicas(v: object) -> str | None:
    assert isinstance(v, list)
    if v == ["*"]:
        return None
    for item in v:
        partition, _, broker = item.partition(":")
        if not (partition.strip().isdigit() and broker.strip().isdigit()):
            return "must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],..."
    return None


_DAY_MS = 24 * 3600 * 1000

SPECS: dict[str, ConfigSpec] = {
    spec.name: spec
    for spec in (
        ConfigSpec("cleanup.policy", "LIST", "delete", _list_of("compact", "delete")),
        ConfigSpec("compression.gzip.level", "INT", "-1", _gzip_level),
        ConfigSpec("compression.lz4.level", "INT", "9", _between(1, 17)),
        ConfigSpec("compression.type", "STRING", "producer",
                   _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        ConfigSpec("compression.zstd.level", "INT", "3", _between(-131072, 22)),
        ConfigSpec("delete.retention.ms", "LONG", str(_DAY_MS), _at_least(0)),
        ConfigSpec("errors.deadletterqueue.group.enable", "BOOLEAN", "false"),
        ConfigSpec("file.delete.delay.ms", "LONG", "60000", _at_least(0)),
        ConfigSpec("flush.messages", "LONG", str(INT64_MAX), _at_least(1)),
        ConfigSpec("flush.ms", "LONG", str(INT64_MAX), _at_least(0)),
        ConfigSpec("follower.replication.throttled.replicas", "LIST", "", _throttled_replicas),
        ConfigSpec("index.interval.bytes", "INT", "4096", _at_least(0)),
        ConfigSpec("leader.replication.throttled.replicas", "LIST", "", _throttled_replicas),
        ConfigSpec("local.retention.bytes", "LONG", "-2", _at_least(-2)),
        ConfigSpec("local.retention.ms", "LONG", "-2", _at_least(-2)),
        ConfigSpec("max.compaction.lag.ms", "LONG", str(INT64_MAX), _at_least(1)),
        ConfigSpec("max.decompressed.message.bytes", "INT", "2147483639", _between(1, 2147483639)),
        ConfigSpec("max.message.bytes", "INT", "1048588", _at_least(0)),
        ConfigSpec("message.timestamp.after.max.ms", "LONG", "3600000", _at_least(0)),
        ConfigSpec("message.timestamp.before.max.ms", "LONG", str(INT64_MAX), _at_least(0)),
        ConfigSpec("message.timestamp.type", "STRING", "CreateTime", _one_of("CreateTime", "LogAppendTime")),
        ConfigSpec("min.cleanable.dirty.ratio", "DOUBLE", "0.5", _between(0, 1)),
        ConfigSpec("min.compaction.lag.ms", "LONG", "0", _at_least(0)),
        ConfigSpec("min.insync.replicas", "INT", "1", _at_least(1)),
        ConfigSpec("preallocate", "BOOLEAN", "false"),
        ConfigSpec("remote.copy.lag.bytes", "LONG", "-1", _at_least(-1)),
        ConfigSpec("remote.copy.lag.ms", "LONG", "0", _at_least(-1)),
        ConfigSpec("remote.log.copy.disable", "BOOLEAN", "false"),
        ConfigSpec("remote.log.delete.on.disable", "BOOLEAN", "false"),
        ConfigSpec("remote.storage.enable", "BOOLEAN", "false"),
        ConfigSpec("retention.bytes", "LONG", "-1"),
        ConfigSpec("retention.ms", "LONG", str(7 * _DAY_MS), _at_least(-1)),
        ConfigSpec("segment.bytes", "INT", str(1024 * 1024 * 1024), _at_least(1024 * 1024)),
        ConfigSpec("segment.index.bytes", "INT", str(10 * 1024 * 1024), _at_least(4)),
        ConfigSpec("segment.jitter.ms", "LONG", "0", _at_least(0)),
        ConfigSpec("segment.ms", "LONG", str(7 * _DAY_MS), _at_least(1)),
        ConfigSpec("unclean.leader.election.enable", "BOOLEAN", "false"),
    )
}


def invalid(name: str, raw: str, reason: str) -> InvalidTopicError:
    """Kafka's ConfigException message, as CreateTopics and AlterConfigs answer it."""
    return InvalidTopicError(f"Invalid value {raw} for configuration {name}: {reason}")


def parse(name: str, raw: str) -> object:
    """``raw`` read as ``name``'s type (int, float, bool, str or list of str), unvalidated."""
    spec = SPECS.get(name)
    if spec is None:
        raise InvalidTopicError(f"Unknown topic config name: {name}")
    text = raw.strip()
    if spec.type in ("INT", "LONG"):
        bound = INT32_MAX if spec.type == "INT" else INT64_MAX
        try:
            value = int(text)
        except ValueError:
            raise invalid(name, raw, f"Not a number of type {spec.type}") from None
        if not -bound - 1 <= value <= bound:
            raise invalid(name, raw, f"Not a number of type {spec.type}")
        return value
    if spec.type == "DOUBLE":
        try:
            return float(text)
        except ValueError:
            raise invalid(name, raw, "Not a number of type DOUBLE") from None
    if spec.type == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise invalid(name, raw, "Expected value to be either true or false")
        return text.lower() == "true"
    if spec.type == "LIST":
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def check(name: str, raw: str) -> str:
    """``raw`` validated as Kafka validates ``name``, in the form Kafka stores and shows."""
    value = parse(name, raw)
    validator = SPECS[name].validator
    reason = None if validator is None else validator(value)
    if reason is not None:
        raise invalid(name, raw, reason)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(value)
    return str(value)
