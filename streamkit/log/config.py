"""Topic configuration: Kafka's topic-level settings, as a frozen value.

Names and defaults follow Kafka's topic configs (``retention.ms``, ``cleanup.policy``, ...);
``TopicConfig.from_kafka`` / ``to_kafka`` convert from and to the string maps that
``CreateTopics``/``DescribeConfigs`` and the CLI's ``--config key=value`` carry.

Every config Apache Kafka 4.4 knows is accepted (the catalog, its types and validation are in
``topic_configs.py``); an unknown name or a bad value is refused with Kafka's message.

**Honoured** (the log behaves as the value says; a field of ``TopicConfig``):
``cleanup.policy``, ``retention.ms``, ``retention.bytes``, ``segment.bytes``, ``segment.ms``,
``index.interval.bytes``, ``flush.messages``, ``flush.ms``, ``delete.retention.ms``,
``min.compaction.lag.ms``, ``min.cleanable.dirty.ratio``, ``max.message.bytes``. Three bounds
differ from Kafka's on purpose: ``segment.bytes`` may be as small as 14 bytes (Kafka: 1 MiB),
because tests and small embedded logs roll segments of a few records; ``flush.messages=0``
means "no fsync by count" (Kafka: at least 1, its default ``Long.MAX_VALUE`` meaning the same),
because that is how the embedded log has always spelled "off"; ``max.message.bytes`` must be
at least 1 (Kafka: 0), because 0 would refuse every batch.

**Stored only** (validated, kept with the topic, returned by DescribeConfigs; no behaviour):

* replication and leadership (``min.insync.replicas``, ``unclean.leader.election.enable``,
  ``*.replication.throttled.replicas``): one node, one replica, nothing to elect or throttle;
* tiered storage (``remote.*``, ``local.retention.*``): there is no remote tier;
* ``compression.type`` and its ``compression.*.level``: batches are stored as the producer
  compressed them (Kafka's ``producer``); recompressing on append is not implemented;
* ``message.timestamp.type``: records keep the producer's timestamps (``CreateTime``);
  ``LogAppendTime`` is stored but batches are not rewritten with the append time, which needs
  re-encoding each batch header and its CRC on the append path (not implemented);
* ``message.timestamp.before.max.ms`` / ``after.max.ms``: timestamps are not range-checked;
* ``max.compaction.lag.ms``, ``segment.jitter.ms``, ``segment.index.bytes``,
  ``file.delete.delay.ms``, ``preallocate``, ``max.decompressed.message.bytes``,
  ``errors.deadletterqueue.group.enable``: the cleaner, segment roller and index have no such
  knob (indexes grow as needed, files are deleted at once), and there are no share groups.

Kafka Streams sets ``message.timestamp.type``, ``cleanup.policy``, ``segment.bytes``,
``retention.ms`` and others on every internal topic; all of them are accepted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from streamkit.log import topic_configs
from streamkit.log.topic_configs import SPECS, invalid

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
    # Configs stored only (see the module docstring): (name, value) pairs set on the topic.
    stored: tuple[tuple[str, str], ...] = ()
    # The Kafka names set on the topic itself (DescribeConfigs' DYNAMIC_TOPIC_CONFIG source).
    overrides: frozenset[str] = frozenset()

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
        stored = dict(start.stored)
        for name, raw in values.items():
            field = _KAFKA_NAMES.get(name)
            if field is None:
                stored[name] = topic_configs.check(name, raw)
            elif name in _OWN_BOUNDS:
                changes[field] = topic_configs.parse(name, raw)  # bounds checked by validate()
            else:
                topic_configs.check(name, raw)
                changes[field] = _value(field, raw)
        changes["stored"] = tuple(sorted(stored.items()))
        changes["overrides"] = start.overrides | frozenset(values)
        config = dataclasses.replace(start, **changes)  # type: ignore[arg-type]
        config.validate()
        return config

    def to_kafka(self) -> dict[str, str]:
        """Every config Kafka knows, by name: honoured ones from their fields, stored ones
        as set or Kafka's default."""
        stored = dict(self.stored)
        out: dict[str, str] = {}
        for name, spec in SPECS.items():
            field = _KAFKA_NAMES.get(name)
            out[name] = str(getattr(self, field)) if field is not None else stored.get(name, spec.default)
        return out

    def validate(self) -> None:
        """The honoured fields' bounds (Kafka's, except the three the module docstring names)."""
        policies = set(self.cleanup_policy.split(","))
        if not policies or not policies <= {"delete", "compact"}:
            raise invalid("cleanup.policy", self.cleanup_policy, "String must be one of: compact, delete")
        for name, value in (("max.message.bytes", self.max_message_bytes), ("segment.bytes", self.segment_bytes)):
            if value > _INT32_MAX:
                raise invalid(name, str(value), "Not a number of type INT")
        if self.segment_bytes < 14:
            raise invalid("segment.bytes", str(self.segment_bytes), "Value must be at least 14")
        if self.flush_messages < 0:
            raise invalid("flush.messages", str(self.flush_messages), "Value must be at least 0")
        bounds = (
            ("segment.ms", self.segment_ms, 1),
            ("index.interval.bytes", self.index_interval_bytes, 0),
            ("max.message.bytes", self.max_message_bytes, 1),
            ("flush.ms", self.flush_ms, 0),
            ("retention.ms", self.retention_ms, -1),
            ("delete.retention.ms", self.delete_retention_ms, 0),
            ("min.compaction.lag.ms", self.min_compaction_lag_ms, 0),
        )
        for name, value, low in bounds:
            if value < low:
                raise invalid(name, str(value), f"Value must be at least {low}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise invalid("min.cleanable.dirty.ratio", str(self.min_cleanable_dirty_ratio), "Value must be no more than 1")


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

KAFKA_CONFIG_NAMES = tuple(SPECS)

_INT32_MAX = topic_configs.INT32_MAX
# Honoured configs whose bounds are streamkit's own (module docstring): typed here, bounded
# by ``validate``.
_OWN_BOUNDS = frozenset({"segment.bytes", "flush.messages", "max.message.bytes"})


def _value(field: str, raw: str) -> object:
    """An already checked value as its field's type."""
    if field == "cleanup_policy":
        return ",".join(sorted(p.strip() for p in raw.split(",") if p.strip()))
    if field == "min_cleanable_dirty_ratio":
        return float(raw)
    return int(raw)
