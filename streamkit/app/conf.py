"""``Settings`` (``app.conf``): every setting Faust documents, and streamkit's own.

Each setting is one row of ``SETTINGS``: its name, default and what it does here. A setting
is *honoured* (it changes what streamkit does) or *accepted* (a Faust app that states it
still loads, and the value reads back from ``app.conf``, but it changes nothing here; the row
says why). ``docs/faust.md`` lists the same table. An unknown name is a ``ConfigError``
naming the closest known setting.

    >>> conf = Settings("shop", broker="kafka://localhost:9092", version=2)
    >>> conf.id, conf.broker, conf.value_serializer
    ('shop-v2', 'kafka://localhost:9092', 'json')
    >>> conf.web_port = 6067
    >>> conf.web_port, conf.ineffective()
    (6067, ['web_port'])

Values are checked when set (constructor or attribute), so a bad value fails where it is
written. Durations are seconds or ``timedelta`` as at every API edge; ``*_ms`` reads give
integer milliseconds.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta, tzinfo
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from streamkit._core.errors import ConfigError
from streamkit.app.credentials import check_credentials, check_ssl_context, security_of
from streamkit.transport.options import COMPRESSION_TYPES, ClientOptions
from streamkit.transport.security import ClientSecurity, env_name, environment_properties

_APP_ID = re.compile(r"^[a-zA-Z0-9._-]{1,200}$")
ERROR_POLICIES = ("dlq", "stop")
SERIALIZERS = ("raw", "str", "json", "msgpack")
STORES = ("memory", "rocksdb")
PROCESSING_GUARANTEES = ("at_least_once", "exactly_once")

# -- value checks: each takes the setting's name and a value, returns the value to keep -----


def _any(name: str, value: Any) -> Any:
    return value


def _bool(name: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise ConfigError(f"setting {name} must be True or False, not {value!r}")
    return value


def _count(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"setting {name} must be an integer >= 0, not {value!r}")
    return value


def _positive(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"setting {name} must be an integer >= 1, not {value!r}")
    return value


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda name, value: None if value is None else check(name, value)


def _seconds(name: str, value: Any) -> Any:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"setting {name} must be seconds >= 0 or a timedelta, not {value!r}")
    return float(value)


def _interval(name: str, value: Any) -> Any:
    seconds = _seconds(name, value)
    if seconds <= 0:
        raise ConfigError(f"setting {name} must be above 0 seconds, not {value!r}")
    return seconds


def _str(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        raise ConfigError(f"setting {name} must be a string, not {value!r}")
    return value


def _timezone(name: str, value: Any) -> Any:
    """A ``tzinfo``, or an IANA name (``"US/Pacific"``) read as a ``zoneinfo.ZoneInfo``."""
    if value is None or isinstance(value, tzinfo):
        return value
    if isinstance(value, str):
        try:
            return ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"setting {name}: unknown timezone {value!r}") from None
    raise ConfigError(f"setting {name} must be a tzinfo or a timezone name, not {value!r}")


def _path(name: str, value: Any) -> Any:
    if not isinstance(value, (str, Path)):
        raise ConfigError(f"setting {name} must be a path, not {value!r}")
    return Path(value)


def _url(name: str, value: Any) -> Any:
    text = str(value)  # Faust takes str or yarl.URL
    if "://" not in text:
        raise ConfigError(f"setting {name} must be a URL (scheme://...), not {value!r}")
    return text


def _port(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ConfigError(f"setting {name} must be a port number 0-65535, not {value!r}")
    return value


def _one_of(*choices: str) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        text = getattr(value, "value", value)  # Faust's enums (ProcessingGuarantee) carry .value
        if text not in choices:
            raise ConfigError(f"setting {name} must be one of {', '.join(choices)}, not {value!r}")
        return text

    return check


def _guarantee(name: str, value: Any) -> Any:
    return _one_of(*PROCESSING_GUARANTEES)(name, value)


def _codec(name: str, value: Any) -> Any:
    if isinstance(value, str):
        if value not in SERIALIZERS:
            raise ConfigError(
                f"setting {name}: serializer {value!r} is not offered here; use {', '.join(SERIALIZERS)} or a Serde"
            )
        return value
    if callable(getattr(value, "dumps", None)) and callable(getattr(value, "loads", None)):
        return value  # a Serde
    raise ConfigError(f"setting {name} must be a serializer name or a Serde, not {value!r}")


def _broker(name: str, value: Any) -> Any:
    """Faust's broker forms, as one URL the transports open: ``kafka://h:p``, a list of
    URLs, ``kafka://a:1;kafka://b:2``; ``aiokafka://`` and ``confluent://`` (Faust's drivers)
    mean ``kafka://``; ``file://DIR`` is the embedded log."""
    urls = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value).split(";")
    urls = [u.strip() for u in urls if u.strip()]
    if not urls:
        raise ConfigError(f"setting {name} names no broker")
    hosts: list[str] = []
    for url in urls:
        parsed = urlparse(url if "://" in url else f"kafka://{url}")
        if parsed.scheme == "file":
            if len(urls) > 1:
                raise ConfigError(f"setting {name}: a file:// broker cannot be one of several: {value!r}")
            return url
        if parsed.scheme not in ("kafka", "aiokafka", "confluent") or not parsed.netloc:
            raise ConfigError(f"setting {name}: unsupported broker URL {url!r}: use kafka://host:port or file://DIR")
        hosts.extend(h for h in parsed.netloc.split(",") if h)
    return "kafka://" + ",".join(hosts)


def _acks(name: str, value: Any) -> Any:
    """Kafka's producer acks: 0, 1, -1 or "all" (kept as -1, as Faust's)."""
    if value == "all":
        return -1
    if isinstance(value, bool) or value not in (0, 1, -1):
        raise ConfigError(f"setting {name} must be 0, 1, -1 or 'all', not {value!r}")
    return value


def _compression(name: str, value: Any) -> Any:
    """A Kafka compression codec, or None / "none" (kept as None)."""
    if value is None or value == "none":
        return None
    if value not in COMPRESSION_TYPES:
        raise ConfigError(f"setting {name} must be one of {', '.join(COMPRESSION_TYPES)} or none, not {value!r}")
    return value


def _instance_id(name: str, value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"setting {name} must be a non-empty string or None, not {value!r}")
    return value


def _store(name: str, value: Any) -> Any:
    text = _url(name, value)
    scheme = text.split("://", 1)[0]
    if scheme not in STORES:
        raise ConfigError(f"setting {name}: store {text!r} is not offered here; use memory:// or rocksdb://")
    return text


# -- the table ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    default: Any
    check: Callable[[str, Any], Any]
    honoured: bool
    note: str  # what it does here, or why it does nothing


def _table() -> dict[str, Setting]:
    rows: list[Setting] = []

    def honoured(name: str, default: Any, check: Callable[[str, Any], Any], note: str) -> None:
        rows.append(Setting(name, default, check, True, note))

    def accepted(names: str, default: Any, check: Callable[[str, Any], Any], note: str) -> None:
        for name in names.split():
            rows.append(Setting(name, default, check, False, note))

    # honoured
    honoured("broker", "file://.streamkit", _broker,
             "where the log is: kafka://host:port (a Kafka cluster or `streamkit broker`) or "
             "file://DIR (the embedded log, streamkit's default; Faust's is kafka://localhost:9092)")
    honoured("version", 1, _positive,
             "above 1, the app id becomes id_format's ({id}-v{version}): a new consumer group and "
             "new internal topic names, as in Faust")
    honoured("id_format", "{id}-v{self.version}", _str, "the app id when version > 1")
    honoured("key_serializer", "raw", _codec, "the default key serializer of the app's topics")
    honoured("value_serializer", "json", _codec, "the default value serializer of the app's topics")
    honoured("timezone", None, _timezone,
             "the timezone of @app.crontab schedules that name none (UTC when None); timestamps stay UTC milliseconds")
    honoured("topic_partitions", 1, _positive,
             "partitions of a topic declared without `partitions` (Faust's default is 8)")
    honoured("consumer_auto_offset_reset", "earliest", _one_of("earliest", "latest"),
             "where a new consumer group starts (also spelled auto_offset_reset)")
    honoured("broker_commit_interval", 1.0, _interval,
             "seconds between offset commits (also spelled commit_interval; Faust's default is 2.8)")
    honoured("repartition_purge_interval", 30.0, _interval,
             "seconds between deletions of the repartition topics' records the app has committed "
             "past (Kafka Streams' repartition.purge.interval.ms, same default)")
    honoured("on_error", "dlq", _one_of(*ERROR_POLICIES),
             "streamkit's own: a failing record goes to the {id}-dlq topic, or stops the worker")
    honoured("max_agent_failures", 10, _positive,
             "streamkit's own: an agent failing this many times in a row without processing a "
             "record stops the worker (it backs off from 0.1 s, doubling to 30 s, in between)")
    honoured("shutdown_timeout", 30.0, _interval,
             "streamkit's own: seconds a worker's stop (SIGTERM, Ctrl-C) may wait for the log (committing "
             "offsets or transactions, leaving the group, closing clients); past it the worker gives up what "
             "is left, says so in one line and exits (also `streamkit worker --shutdown-timeout`)")
    honoured("max_task_drift_ms", 0, _optional(_count),
             "streamkit's own: how far in event time (ms) a task may run ahead of the slowest task "
             "with input among the tasks feeding the same topics (runtime/alignment.py); 0 gives the "
             "timestamp-merged order of their partitions, the order a backfill folds in; None turns "
             "alignment off (each task runs through its own backlog, as in Kafka Streams)")
    honoured("max_task_idle_ms", 0, _count,
             "how long a caught-up task with nothing to process holds back the tasks aligned with it "
             "(Kafka Streams' max.task.idle.ms, Flink's idleness; one whose input has records not "
             "fetched yet holds them back up to 30 s); past it the task is idle until records reach it again")
    honoured("processing_guarantee", "at_least_once", _guarantee,
             "at_least_once, or exactly_once: per commit interval a task's outputs, changelog records "
             "and source offsets are committed in one transaction, consumers read committed only")
    # A Kafka deployment's settings: the clients and topics of a kafka:// broker
    # (``transport/options.py``); the embedded log (file://) has one copy, appends locally and
    # keeps no group sessions, so they change nothing there.
    honoured("topic_replication_factor", 1, _positive,
             "replicas of every topic the worker creates (inputs, repartition, sinks, changelogs, "
             "dead letters, replies); above 1 also their min.insync.replicas, rf-1 capped at 2 (a "
             "topic's own config wins); a declared topic found with another factor is a warning "
             "and on /status; `streamkit broker` (one node) refuses more than 1, as Kafka does "
             "(INVALID_REPLICATION_FACTOR); the embedded log keeps one copy whatever the setting")
    honoured("producer_acks", -1, _acks,
             "acknowledgements the worker's producers wait for: 0, 1 or -1/'all' (exactly_once "
             "needs all, as Kafka's idempotent producer does); the embedded log acknowledges once appended")
    honoured("producer_compression_type", None, _compression,
             "codec of the record batches the worker produces to Kafka: gzip, snappy, lz4, zstd or "
             "None; a codec whose library is missing stops the start with one line")
    honoured("consumer_group_instance_id", None, _instance_id,
             "static membership (KIP-345) of the worker's group consumer on Kafka: a worker back "
             "within broker_session_timeout keeps its partitions without a rebalance; each worker needs its own")
    honoured("broker_session_timeout", 10.0, _interval,
             "seconds without a heartbeat before Kafka's coordinator gives a worker's partitions "
             "to the others (Faust's default is 60; Kafka's brokers accept 6 to 1800 by default)")
    honoured("broker_heartbeat_interval", 1.0, _interval,
             "seconds between the group consumer's heartbeats; below broker_session_timeout (Faust's default is 3)")
    honoured("broker_max_poll_interval", 300.0, _interval,
             "seconds the group consumer may go without polling before it leaves the group (Faust's default is 1000)")
    honoured("broker_rebalance_timeout", None, _optional(_interval),
             "seconds the coordinator waits for members to rejoin in a rebalance; None: "
             "broker_session_timeout (Faust's default is 60)")
    honoured("broker_request_timeout", 30.0, _interval,
             "seconds a request of the worker's producers and group consumer may wait for Kafka's "
             "answer; the consumer's at least its rebalance timeout and 5 s, as its JoinGroup waits "
             "out a rebalance (Faust's default is 90)")
    honoured("broker_client_id", "streamkit", _str,
             "the client id of the worker's producers and group consumer on Kafka (its logs, quotas, "
             "`kafka-consumer-groups --describe`; Faust's default is faust-{version})")
    honoured("table_standby_replicas", 0, _count,
             "standby replicas of tables declared without standby_replicas=: other workers of the "
             "group keep warm copies of a table's partitions from its changelog, for failover and "
             "queries (Kafka Streams' num.standby.replicas, default 0; Faust's default is 1)")
    honoured("broker_credentials", None, check_credentials,
             "TLS and SASL of every Kafka client of the worker, standalone sends and `streamkit send`: "
             "SASLCredentials (PLAIN, SCRAM-SHA-256/512), OAuthCredentials, GSSAPICredentials, SSLCredentials, "
             "an ssl.SSLContext, a (user, password) pair, or Kafka's client settings (security.protocol, "
             "sasl.mechanism, ...); STREAMKIT_SASL_PASSWORD and the other STREAMKIT_* variables of "
             "docs/security.md go over it name by name, `streamkit worker --command-config` over both")
    honoured("ssl_context", None, check_ssl_context,
             "TLS (security.protocol SSL) with this ssl.SSLContext when broker_credentials is not set, as in Faust")
    honoured("canonical_url", None, _optional(_url),
             "the URL of this worker's HTTP API told to the group, so other workers route table "
             "queries here (default: the URL `streamkit worker --web-port` serves)")
    # accepted, no effect here
    honoured("store", "memory://", _store,
             "the store of tables declared without store= (memory:// or rocksdb://); when the app "
             "does not set it, tables use rocksdb:// (Faust's default is memory://)")
    accepted("autodiscover", False, _any, "streamkit imports the app module named by -A; no scanning")
    accepted("origin", None, _optional(_str), "Faust's app module path for its CLI; `streamkit worker -A module:app` names it")
    accepted("datadir", Path("{conf.name}-data"), _path, "the embedded log's directory is the broker's file://DIR")
    accepted("tabledir", Path("tables"), _path,
             "table stores live in the worker's state directory (`streamkit worker --state-dir`, "
             "default .streamkit-state/{id})")
    accepted("debug", False, _bool, "no debug mode")
    accepted("env_prefix", None, _optional(_str), "settings are not read from the environment")
    accepted("agent_supervisor", None, _any, "agent failures follow on_error, not a supervisor strategy")
    accepted("blocking_timeout", None, _optional(_seconds), "no blocking detector")
    accepted("cython_optimizations", False, _bool, "no Cython extensions")
    accepted("broker_consumer broker_producer", None, _any, "one broker URL for consumer and producer")
    accepted("broker_api_version consumer_api_version producer_api_version", "auto", _any,
             "API versions are negotiated")
    accepted("broker_check_crcs", True, _bool, "CRCs are always checked")
    accepted("broker_commit_every", 10_000, _count, "commits follow broker_commit_interval only")
    accepted("broker_commit_livelock_soft_timeout", 300.0, _seconds, "no livelock detector")
    accepted("broker_max_poll_records", None, _optional(_count), "the transport sizes its fetches")
    accepted("consumer_max_fetch_size", 1024**2, _count, "the transport sizes its fetches")
    accepted("consumer_metadata_max_age_ms producer_metadata_max_age_ms", 300_000, _count,
             "the transport's defaults apply")
    accepted("consumer_connections_max_idle_ms producer_connections_max_idle_ms", 540_000, _count,
             "the transport's defaults apply")
    accepted("logging_config loghandlers", None, _any, "streamkit logs through the logging module; configure it there")
    accepted("producer_linger", 0.0, _seconds, "the worker's sender batches by itself")
    accepted("producer_linger_ms", 0, _count, "the worker's sender batches by itself")
    accepted("producer_max_batch_size", 16384, _count, "the transport's default applies")
    accepted("producer_max_request_size", 1_000_000, _count, "the transport's default applies")
    accepted("producer_partitioner", None, _any, "keys are partitioned with Kafka's murmur2, as Faust's default")
    accepted("producer_request_timeout", 1200.0, _seconds, "producers' requests time out by broker_request_timeout")
    accepted("producer_threaded", False, _bool, "the producer runs on the worker's event loop")
    accepted("recovery_consistency_check store_check_exists", True, _bool,
             "a table's store keeps the changelog offset it reflects and whose partition it is in the "
             "write of its data: recovery replays the changelog from there, and a store of another "
             "table or app, or one RocksDB cannot open, is rebuilt from the changelog, always")
    accepted("crash_app_on_aerospike_exception", True, _bool, "no aerospike store")
    accepted("aerospike_retries_on_exception", 60, _count, "no aerospike store")
    accepted("aerospike_sleep_seconds_between_retries_on_exception", 1, _count, "no aerospike store")
    honoured("reply_create_topic", False, _bool,
             "the worker creates the app's reply topic (reply_to) and reads it when it starts, not on the first ask")
    honoured("reply_expires", 86400.0, _seconds, "retention of the reply topics agent RPC creates")
    honoured("reply_to", None, _optional(_str),
             "the topic replies to this app's agent.ask come to (default: reply_to_prefix and a UUID per app)")
    honoured("reply_to_prefix", "f-reply-", _str, "the start of the reply topic's name when reply_to is not set")
    honoured("stream_buffer_maxsize", 4096, _positive,
             "events an in-memory channel's subscriber holds (app.channel's maxsize); topic inboxes are bounded by the worker")
    accepted("stream_processing_timeout", 300.0, _seconds, "no per-event processing timeout")
    accepted("stream_publish_on_commit", False, _bool, "sends are produced as they happen")
    accepted("stream_recovery_delay", 0.0, _seconds, "no recovery delay")
    accepted("stream_wait_empty", True, _bool,
             "a stop or revocation lets each task finish the record in hand; records fetched and not "
             "processed are not committed, so the partition's next owner reads them again")
    accepted("stream_ack_cancelled_tasks stream_ack_exceptions", True, _bool, "deprecated in Faust")
    accepted("table_cleanup_interval", 30.0, _seconds,
             "windows expire by stream time as records are written, not on a timer")
    accepted("table_key_index_size", 1000, _count, "windowed tables list their keys from the store: no key index")
    accepted("topic_allow_declare", True, _bool, "the worker always creates missing topics")
    accepted("topic_disable_leader", False, _bool, "no leader topic")
    accepted("cache", "memory://", _any, "no web cache")
    accepted("web", "aiohttp://", _any, "the HTTP API is aiohttp's")
    accepted("web_bind web_host", "127.0.0.1", _any, "use `streamkit worker --web-host`")
    accepted("web_port", 6066, _port, "use `streamkit worker --web-port`")
    accepted("web_enabled", True, _bool, "the HTTP API runs when `streamkit worker --web-port` is given")
    accepted("web_application_options web_cors_options", None, _any, "the HTTP API takes no options")
    accepted("web_graph_enabled web_router_enabled web_tables_enabled web_metrics_enabled web_stats_enabled",
             True, _any, "the HTTP API serves what it has")
    accepted("web_in_thread", False, _bool, "the HTTP API runs on the worker's event loop")
    accepted("web_ssl_context", None, _any, "no TLS: the HTTP API binds loopback")
    accepted("web_transport", "tcp://", _any, "the HTTP API listens on TCP")
    accepted("worker_redirect_stdouts", True, _bool, "stdout is not redirected")
    accepted("worker_redirect_stdouts_level", "WARN", _any, "stdout is not redirected")
    accepted("url", None, _any, "deprecated in Faust (use broker)")
    accepted("Agent ConsumerScheduler Event Schema Stream Table SetTable GlobalTable SetGlobalTable "
             "TableManager Serializers Worker PartitionAssignor LeaderAssignor Router Topic HttpClient Monitor",
             None, _any, "streamkit's classes are not replaceable by settings")
    return {row.name: row for row in rows}


SETTINGS: Mapping[str, Setting] = _table()
#: streamkit's spellings of Faust settings: both names read and write one value.
ALIASES: Mapping[str, str] = {
    "commit_interval": "broker_commit_interval",
    "auto_offset_reset": "consumer_auto_offset_reset",
}


class UnknownSettingError(ConfigError, AttributeError):
    """A setting name neither Faust nor streamkit knows."""


class Settings:
    """An app's settings (``app.conf``): attributes named as Faust's settings."""

    def __init__(self, id: str, **settings: Any) -> None:
        if not isinstance(id, str) or not _APP_ID.match(id):
            raise ConfigError(f"app id {id!r} must be 1-200 characters of a-z, A-Z, 0-9, '.', '_', '-'")
        values: dict[str, Any] = {}
        given: set[str] = set()
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_given", given)
        object.__setattr__(self, "_id", id)
        for name, value in settings.items():
            key = _resolve(name)
            if key in given and values[key] != SETTINGS[key].check(key, value):
                raise ConfigError(f"settings {name} and {_other_name(name)} both given, with different values")
            setattr(self, key, value)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)  # copy, pickle and friends probe for dunders
        key = _resolve(name)
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        return values[key] if key in values else SETTINGS[key].default

    def __setattr__(self, name: str, value: Any) -> None:
        key = _resolve(name)
        self._values[key] = SETTINGS[key].check(key, value)
        self._given.add(key)

    def __repr__(self) -> str:
        given = ", ".join(f"{k}={self._values[k]!r}" for k in sorted(self._given))
        return f"<Settings {self.id!r}{': ' + given if given else ''}>"

    def __iter__(self) -> Iterator[str]:
        return iter(SETTINGS)

    @property
    def name(self) -> str:
        """The id the app was given (Faust's ``conf.name``)."""
        name: str = object.__getattribute__(self, "_id")
        return name

    @property
    def id(self) -> str:
        """The app id: the name, or ``id_format``'s form when ``version`` > 1 (as Faust)."""
        if self.version > 1:
            return str(self.id_format.format(id=self.name, self=self))
        return self.name

    @property
    def commit_interval_ms(self) -> int:
        return int(self.broker_commit_interval * 1000)

    def client_options(self) -> ClientOptions:
        """The settings of a Kafka deployment, as the transport takes them (``transport/options.py``).

        >>> Settings("shop", producer_acks="all", broker_session_timeout=30).client_options().session_timeout_ms
        30000
        """
        rebalance = self.broker_rebalance_timeout
        if self.broker_heartbeat_interval >= self.broker_session_timeout:
            raise ConfigError(
                f"setting broker_heartbeat_interval ({self.broker_heartbeat_interval:g} s) must be below "
                f"broker_session_timeout ({self.broker_session_timeout:g} s)"
            )
        return ClientOptions(
            acks=int(self.producer_acks),
            compression_type=self.producer_compression_type,
            group_instance_id=self.consumer_group_instance_id,
            session_timeout_ms=_ms(self.broker_session_timeout),
            heartbeat_interval_ms=_ms(self.broker_heartbeat_interval),
            max_poll_interval_ms=_ms(self.broker_max_poll_interval),
            rebalance_timeout_ms=None if rebalance is None else _ms(rebalance),
            request_timeout_ms=_ms(self.broker_request_timeout),
            replication_factor=int(self.topic_replication_factor),
            client_id=str(self.broker_client_id),
            security=self.client_security(),
        )

    def client_security(self, environ: Mapping[str, str] | None = None) -> ClientSecurity:
        """TLS and SASL of the app's Kafka clients: ``broker_credentials`` (or ``ssl_context``),
        with the environment's settings over it name by name (``transport/security.py``).

        >>> Settings("shop", broker_credentials=("app", "pw")).client_security({}).describe()
        'SASL_PLAINTEXT PLAIN as app'
        """
        base = security_of(self.broker_credentials, self.ssl_context)
        return base.layered(environment_properties(environ), label=env_name, source=" (environment)")

    def ineffective(self) -> list[str]:
        """The settings given that do nothing here (see ``SETTINGS``), sorted."""
        return sorted(k for k in self._given if not SETTINGS[k].honoured)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _resolve(name: str) -> str:
    key = ALIASES.get(name, name)
    if key in SETTINGS:
        return key
    close = difflib.get_close_matches(name, [*SETTINGS, *ALIASES], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise UnknownSettingError(f"unknown setting {name!r}{hint} (docs/faust.md lists the settings)")


def _other_name(name: str) -> str:
    key = ALIASES.get(name, name)
    return next((alias for alias, target in ALIASES.items() if target == key and alias != name), key)
