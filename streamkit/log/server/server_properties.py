"""A Kafka ``server.properties`` file as ``BrokerConfig`` settings (``streamkit broker --config``).

Kafka's names, read with ``_core/properties.py`` (Java's rules). Understood:

* ``listeners``, ``advertised.listeners``, ``listener.security.protocol.map``;
* ``ssl.keystore.type`` (``PEM`` only), ``ssl.keystore.location`` (key and certificate chain
  in one PEM file) or ``ssl.certificate.location`` + ``ssl.key.location``, ``ssl.key.password``,
  ``ssl.truststore.type`` (``PEM``), ``ssl.truststore.location``, ``ssl.client.auth``;
* ``sasl.enabled.mechanisms`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), ``super.users``
  (``User:a;User:b``, kept for the authorizer);
* ``num.partitions``, ``auto.create.topics.enable``, ``connections.max.idle.ms``,
  ``request.timeout.ms``, ``log.dirs`` (one directory: the data directory);
* the topic configs' broker defaults (``log.retention.ms``/``.minutes``/``.hours``,
  ``log.retention.bytes``, ``log.segment.bytes``, ``log.roll.ms``/``.hours``,
  ``log.cleanup.policy``, ``message.max.bytes``, ...) and ``log.retention.check.interval.ms``.

Per-listener overrides (``listener.name.X.*``) are refused with one line: one TLS setting
serves every TLS listener here, so such a key would be silently ignored otherwise. Other
Kafka settings are reported as not used (``unknown``), as Kafka's ``logUnused`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamkit._core.errors import ConfigError
from streamkit._core.properties import parse_properties
from streamkit.log.config import TopicConfig
from streamkit.log.errors import LogError
from streamkit.log.server.listeners import TlsSettings, parse_listeners, parse_protocol_map

_TLS_KEYS = {
    "ssl.keystore.location": "keystore",
    "ssl.certificate.location": "certificate",
    "ssl.key.location": "key",
    "ssl.truststore.location": "truststore",
}
# Kafka's broker settings that are the default of a topic config: every topic that does not set
# its own takes them (``LogManager.defaults``). The coarse ones count when the finer is unset,
# as in Kafka (``log.retention.ms`` over ``.minutes`` over ``.hours``).
_TOPIC_DEFAULTS = {
    "log.cleanup.policy": "cleanup.policy",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "message.max.bytes": "max.message.bytes",
}
_COARSE_DEFAULTS = {  # name -> (topic config, ms per unit), coarsest first
    "log.retention.hours": ("retention.ms", 3_600_000),
    "log.retention.minutes": ("retention.ms", 60_000),
    "log.roll.hours": ("segment.ms", 3_600_000),
}
_KNOWN = {
    *_TOPIC_DEFAULTS, *_COARSE_DEFAULTS, "log.retention.check.interval.ms",
    "listeners", "advertised.listeners", "listener.security.protocol.map", "ssl.keystore.type",
    "ssl.truststore.type", "ssl.key.password", "ssl.client.auth", "sasl.enabled.mechanisms",
    "super.users", "num.partitions", "auto.create.topics.enable", "connections.max.idle.ms",
    "request.timeout.ms", "log.dirs", "authorizer.class.name", "allow.everyone.if.no.acl.found", *_TLS_KEYS,
}


@dataclass(slots=True)
class ServerProperties:
    settings: dict[str, Any] = field(default_factory=dict)  # BrokerConfig keyword arguments
    data_dir: Path | None = None
    unknown: list[str] = field(default_factory=list)


def _int(props: dict[str, str], key: str) -> int:
    try:
        return int(props[key])
    except ValueError:
        raise ConfigError(f"{key} must be an integer, not {props[key]!r}") from None


def _bool(props: dict[str, str], key: str) -> bool:
    value = props[key].strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, not {props[key]!r}")
    return value == "true"


def read_server_properties(
    text: str, source: str, base_dir: Path, overrides: Mapping[str, str] | None = None
) -> ServerProperties:
    """Settings from a ``server.properties`` text with ``overrides`` over it (Kafka's
    ``kafka-server-start.sh --override``); relative paths are taken from ``base_dir``."""
    props = {**parse_properties(text, source), **(overrides or {})}
    out = ServerProperties()
    per_listener = sorted(k for k in props if k.startswith("listener.name."))
    if per_listener:
        raise ConfigError(f"{source}: per-listener settings are not supported ({per_listener[0]}); set ssl.* and sasl.* once")
    out.unknown = sorted(k for k in props if k not in _KNOWN)
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if key in props and props[key].strip().upper() != "PEM":
            raise ConfigError(f"{source}: {key}={props[key]} is not supported (PEM files only)")
    if "listeners" in props:
        mapping = parse_protocol_map(props.get("listener.security.protocol.map", ""))
        advertised = [props["advertised.listeners"]] if "advertised.listeners" in props else []
        out.settings["listeners"] = parse_listeners([props["listeners"]], mapping, advertised)
    tls: dict[str, Any] = {
        attr: _path(base_dir, props[key]) for key, attr in _TLS_KEYS.items() if props.get(key, "").strip()
    }
    if "ssl.key.password" in props:
        tls["key_password"] = props["ssl.key.password"]
    if "ssl.client.auth" in props:
        tls["client_auth"] = props["ssl.client.auth"].strip().lower()
    if tls:
        out.settings["tls"] = TlsSettings(**tls)
    if "sasl.enabled.mechanisms" in props:
        out.settings["sasl_mechanisms"] = tuple(
            m.strip().upper() for m in props["sasl.enabled.mechanisms"].split(",") if m.strip()
        )
    # Any authorizer.class.name turns on streamkit's authorizer (Kafka's StandardAuthorizer's
    # model, ``authorizer.py``); without one, super.users and allow.everyone.if.no.acl.found
    # mean nothing, as in Kafka, and are reported as not used.
    if props.get("authorizer.class.name", "").strip():
        out.settings["authorizer"] = True
        if "super.users" in props:
            out.settings["super_users"] = frozenset(u.strip() for u in props["super.users"].split(";") if u.strip())
        if "allow.everyone.if.no.acl.found" in props:
            out.settings["allow_everyone_if_no_acl_found"] = _bool(props, "allow.everyone.if.no.acl.found")
    else:
        out.unknown = sorted({*out.unknown, *(k for k in ("super.users", "allow.everyone.if.no.acl.found") if k in props)})
    if "num.partitions" in props:
        out.settings["default_partitions"] = _int(props, "num.partitions")
    if "auto.create.topics.enable" in props:
        out.settings["auto_create_topics"] = _bool(props, "auto.create.topics.enable")
    if "connections.max.idle.ms" in props:
        out.settings["connections_max_idle_ms"] = _int(props, "connections.max.idle.ms")
    if "request.timeout.ms" in props:
        out.settings["request_timeout_ms"] = _int(props, "request.timeout.ms")
    topic_defaults: dict[str, str] = {}
    for key, (name, unit_ms) in _COARSE_DEFAULTS.items():
        if key in props:
            topic_defaults[name] = str(_int(props, key) * unit_ms)
    topic_defaults.update((name, props[key].strip()) for key, name in _TOPIC_DEFAULTS.items() if key in props)
    if topic_defaults:
        try:
            TopicConfig.from_kafka(topic_defaults)
        except (ConfigError, LogError) as exc:
            raise ConfigError(f"{source}: {exc}") from None
        out.settings["topic_defaults"] = tuple(sorted(topic_defaults.items()))
    if "log.retention.check.interval.ms" in props:
        out.settings["retention_check_interval_ms"] = _int(props, "log.retention.check.interval.ms")
    if "log.dirs" in props:
        dirs = [d.strip() for d in props["log.dirs"].split(",") if d.strip()]
        if len(dirs) != 1:
            raise ConfigError(f"{source}: log.dirs must name one directory here, not {len(dirs)}")
        out.data_dir = _path(base_dir, dirs[0])
    return out


def _path(base_dir: Path, value: str) -> Path:
    path = Path(value.strip()).expanduser()
    return path if path.is_absolute() else base_dir / path
