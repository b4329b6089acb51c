"""The data source's options and the offset ranges they select. Plain code, no Spark.

Options are spelled as Spark's Kafka source spells them, so a job moves between the two by
changing its source options only:

* ``startingOffsets``: ``earliest`` (batch default), ``latest`` (streaming default), or JSON
  ``{"topic": {"0": 23, "1": -2}}`` where -2 means earliest and -1 latest; partitions the
  JSON leaves out start at the earliest offset;
* ``endingOffsets`` (batch only): ``latest`` (default) or JSON as above (-1 latest);
* ``startingTimestamp`` / ``endingTimestamp``: ms since the epoch, for every partition: a
  range starts (ends, exclusive) at the first offset whose record's timestamp is at or after
  it; a partition with no record that late starts (ends) at its end. A timestamp wins over
  the offsets option of the same side, as in Spark;
* ``maxRecordsPerPartition``: offset ranges longer than this are split into several Spark
  partitions (default 1,000,000; 0 keeps one Spark partition per log partition);
* ``failOnDataLoss`` (default true): a starting offset below the log start (deleted by
  retention) is an error; false starts at the log start instead;
* ``maxOffsetsPerTrigger`` (streaming): at most this many offsets per micro-batch;
* ``kafka.<Kafka client setting>``: TLS and SASL of the connections to ``bootstrap``, as
  Spark's Kafka source passes ``kafka.``-prefixed settings to its clients:
  ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
  ``kafka.ssl.ca.location``, ... (``transport/security.py`` names them; Java trust and key
  stores are not read: PEM files are). ``kafka.bootstrap.servers`` is read as ``bootstrap``.

Option names are case-insensitive (Spark passes them so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import overload

from streamkit._core.errors import ConfigError
from streamkit.transport.security import ClientSecurity

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one log partition: one Spark partition's work."""

    partition: int
    start: int
    end: int


def _get(options: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return value
    return None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    path: str | None
    bootstrap: str | None
    topic: str
    starting: str | None
    ending: str | None
    starting_timestamp: int | None
    ending_timestamp: int | None
    max_records_per_partition: int
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    include_headers: bool
    value_app: str | None
    value_type: str | None
    # The ``kafka.*`` options by Kafka's names (strings, so they travel to the executors).
    security: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        path = _get(options, "path")
        bootstrap = _get(options, "bootstrap") or _get(options, "kafka.bootstrap.servers")
        security = security_options(options)
        if not path and not bootstrap:
            raise ConfigError(
                "the streamkit data source needs option('path', DATA_DIR) or option('bootstrap', 'host:port')"
            )
        topic = _get(options, "topic")
        if not topic:
            raise ConfigError("the streamkit data source needs option('topic', NAME)")
        value_app = _get(options, "valueApp")
        value_type = _get(options, "valueType")
        if value_app and value_type:
            raise ConfigError("give option valueApp or valueType, not both")
        return cls(
            path=path,
            bootstrap=bootstrap,
            topic=topic,
            starting=_get(options, "startingOffsets"),
            ending=_get(options, "endingOffsets"),
            starting_timestamp=_int_option(options, "startingTimestamp", minimum=0),
            ending_timestamp=_int_option(options, "endingTimestamp", minimum=0),
            max_records_per_partition=_int_option(
                options, "maxRecordsPerPartition", minimum=0, default=DEFAULT_MAX_RECORDS_PER_PARTITION
            ),
            fail_on_data_loss=_bool_option(options, "failOnDataLoss", True),
            max_offsets_per_trigger=_int_option(options, "maxOffsetsPerTrigger", minimum=1),
            include_headers=_bool_option(options, "includeHeaders", True),
            value_app=value_app,
            value_type=value_type,
            security=security,
        )


def security_options(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``kafka.*`` options (but ``kafka.bootstrap.servers``) by Kafka's names, checked."""
    found = tuple(
        (key[len("kafka."):], value) for key, value in options.items()
        if key.lower().startswith("kafka.") and key.lower() != "kafka.bootstrap.servers"
    )
    if found:
        client_security(found)  # a bad one fails on the driver, before any task runs
    return found


def client_security(settings: tuple[tuple[str, str], ...]) -> ClientSecurity:
    """The ``ClientSecurity`` of ``security_options``' settings; errors name the option."""
    return ClientSecurity.from_properties(dict(settings), label=lambda name: f"option kafka.{name}")


@overload
def _int_option(options: Mapping[str, str], name: str, *, minimum: int) -> int | None: ...
@overload
def _int_option(options: Mapping[str, str], name: str, *, minimum: int, default: int) -> int: ...
def _int_option(
    options: Mapping[str, str], name: str, *, minimum: int, default: int | None = None
) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name} must be >= {minimum}, not {value}")
    return value


def _bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise ConfigError(f"option {name} must be true or false, not {raw!r}")


def parse_offsets(spec: str | None, topic: str, default: int, option: str) -> dict[int, int]:
    """Per-partition offsets of an offsets option; ``{-1: x}`` gives every partition ``x``."""
    if spec is None:
        return {-1: default}
    word = spec.strip().lower()
    if word == "earliest":
        return {-1: EARLIEST}
    if word == "latest":
        return {-1: LATEST}
    try:
        parsed = json.loads(spec)
    except ValueError:
        raise ConfigError(
            f"option {option} must be earliest, latest or JSON like {{\"{topic}\": {{\"0\": 42}}}}, not {spec!r}"
        ) from None
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise ConfigError(f"option {option}: JSON must map topic to {{partition: offset}}, not {spec!r}")
    unknown = set(parsed) - {topic}
    if unknown:
        raise ConfigError(f"option {option} names topics {sorted(unknown)} but the source reads {topic!r}")
    out: dict[int, int] = {-1: EARLIEST if option == "startingOffsets" else LATEST}
    for p, offset in parsed.get(topic, {}).items():
        try:
            partition = int(p)
        except ValueError:
            raise ConfigError(f"option {option}: partition {p!r} is not a number") from None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST or partition < 0:
            raise ConfigError(f"option {option}: offset {offset!r} of partition {p} is not an offset, -1 or -2")
        out[partition] = offset
    return out


def resolve(
    wanted: Mapping[int, int], partition: int, bounds: tuple[int, int]
) -> int:
    """The absolute offset ``wanted`` says for ``partition`` (-2 earliest, -1 latest)."""
    offset = wanted.get(partition, wanted[-1])
    if offset == EARLIEST:
        return bounds[0]
    if offset == LATEST:
        return bounds[1]
    return offset


def split_range(rng: OffsetRange, max_records: int) -> list[OffsetRange]:
    """``rng`` cut into pieces of at most ``max_records`` offsets (0: not cut)."""
    if max_records <= 0 or rng.end - rng.start <= max_records:
        return [rng] if rng.end > rng.start else []
    pieces = -(-(rng.end - rng.start) // max_records)
    step = -(-(rng.end - rng.start) // pieces)
    return [
        OffsetRange(rng.partition, s, min(s + step, rng.end)) for s in range(rng.start, rng.end, step)
    ]
