"""Topic configuration: Kafka's topic-level settings, as a frozen value.

Names and defaults follow Kafka's topic configs (``retention.ms``, ``cleanup.policy``, ...);
``TopicConfig.from_kafka`` / ``to_kafka`` convert from and to the string maps that
``CreateTopics``/``DescribeConfigs`` and the CLI's ``--config key=value`` carry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from streamkit.log.errors import InvalidTopicError

DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class TopicConfig:
    cleanup_policy: str = "delete"  # "delete", "compact" or "compact,delete"
    retention_ms: int = 7 * DAY_MS  # -1: keep forever
    retention_bytes: int = -1  # per partition; -1: no limit
    segment_bytes: int = 128 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    index_interval_bytes: int = 4096
    flush_messages: int = 0  # fsync after this many records; 1 = every append; 0 = off
    flush_ms: int = 1000  # fsync dirty data at least this often; 0 = off
    delete_retention_ms: int = DAY_MS  # how long tombstones survive compaction
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = 1024 * 1024 + 12  # largest batch accepted

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def from_kafka(cls, values: Mapping[str, str], base: TopicConfig | None = None) -> TopicConfig:
        """Build a config from Kafka names (``retention.ms``...) over ``base``'s values."""
        start = base or cls()
        changes: dict[str, object] = {}
        for name, raw in values.items():
            field = _KAFKA_NAMES.get(name)
            if field is None:
                raise InvalidTopicError(f"unknown topic config {name!r}")
            changes[field] = _parse(name, field, raw)
        config = dataclasses.replace(start, **changes)  # type: ignore[arg-type]
        config.validate()
        return config

    def to_kafka(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, field in _KAFKA_NAMES.items():
            value = getattr(self, field)
            out[name] = str(value)
        return out

    def validate(self) -> None:
        policies = set(self.cleanup_policy.split(","))
        if not policies or not policies <= {"delete", "compact"}:
            raise InvalidTopicError(f"cleanup.policy must be delete, compact or both, not {self.cleanup_policy!r}")
        if self.segment_bytes < 14 or self.segment_bytes > 2**31 - 1:
            raise InvalidTopicError("segment.bytes must be between 14 and 2147483647")
        if self.index_interval_bytes < 0:
            raise InvalidTopicError("index.interval.bytes must not be negative")
        if self.segment_ms < 1:
            raise InvalidTopicError("segment.ms must be positive")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise InvalidTopicError("min.cleanable.dirty.ratio must be within [0, 1]")
        if not 1 <= self.max_message_bytes <= _INT32_MAX:
            # 0 would refuse every batch; Kafka's field is an INT32.
            raise InvalidTopicError(f"max.message.bytes must be between 1 and {_INT32_MAX}")
        if self.flush_messages < 0 or self.flush_ms < 0:
            raise InvalidTopicError("flush.messages and flush.ms must not be negative")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise InvalidTopicError("retention.ms and retention.bytes must be -1 (no limit) or more")
        if self.delete_retention_ms < 0 or self.min_compaction_lag_ms < 0:
            raise InvalidTopicError("delete.retention.ms and min.compaction.lag.ms must not be negative")


_KAFKA_NAMES = {
    "cleanup.policy": "cleanup_policy",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "index.interval.bytes": "index_interval_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "max.message.bytes": "max_message_bytes",
}

KAFKA_CONFIG_NAMES = tuple(_KAFKA_NAMES)

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
# Kafka's INT-typed topic configs; the other integer ones are LONGs.
_INT32_FIELDS = frozenset({"segment_bytes", "index_interval_bytes", "max_message_bytes"})


def _parse(name: str, field: str, raw: str) -> object:
    if field == "cleanup_policy":
        return ",".join(sorted(p.strip() for p in raw.split(",") if p.strip()))
    try:
        if field == "min_cleanable_dirty_ratio":
            return float(raw)
        value = int(raw)
    except ValueError as exc:
        raise InvalidTopicError(f"topic config {name} must be a number, not {raw!r}") from exc
    bound = _INT32_MAX if field in _INT32_FIELDS else _INT64_MAX
    if not -bound - 1 <= value <= bound:
        raise InvalidTopicError(f"topic config {name}={raw} does not fit a {32 if bound == _INT32_MAX else 64}-bit integer")
    return value
