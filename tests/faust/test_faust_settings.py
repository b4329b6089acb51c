"""App settings in Faust's spelling: every setting Faust documents is an ``App`` keyword and
an attribute of ``app.conf``; the ones with a meaning here change what streamkit does."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

import streamkit as faust
from streamkit.app.conf import SETTINGS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "faust.md"

# Every setting faust-streaming 0.15 documents (faust/types/settings/settings.py), by name.
FAUST_SETTINGS = ["autodiscover", "datadir", "tabledir", "debug", "env_prefix", "id_format", "origin", "timezone", "version", "agent_supervisor", "cython_optimizations", "blocking_timeout", "broker", "broker_consumer", "broker_producer", "broker_api_version", "broker_check_crcs", "broker_client_id", "broker_commit_every", "broker_commit_interval", "broker_commit_livelock_soft_timeout", "broker_credentials", "broker_heartbeat_interval", "broker_max_poll_interval", "broker_max_poll_records", "broker_rebalance_timeout", "broker_request_timeout", "broker_session_timeout", "ssl_context", "consumer_api_version", "consumer_max_fetch_size", "consumer_auto_offset_reset", "consumer_group_instance_id", "consumer_metadata_max_age_ms", "consumer_connections_max_idle_ms", "key_serializer", "value_serializer", "logging_config", "loghandlers", "producer_acks", "producer_api_version", "producer_compression_type", "producer_linger", "producer_max_batch_size", "producer_max_request_size", "producer_partitioner", "producer_request_timeout", "producer_threaded", "producer_metadata_max_age_ms", "producer_connections_max_idle_ms", "recovery_consistency_check", "store_check_exists", "crash_app_on_aerospike_exception", "aerospike_retries_on_exception", "aerospike_sleep_seconds_between_retries_on_exception", "reply_create_topic", "reply_expires", "reply_to", "reply_to_prefix", "processing_guarantee", "stream_buffer_maxsize", "stream_processing_timeout", "stream_publish_on_commit", "stream_recovery_delay", "stream_wait_empty", "store", "table_cleanup_interval", "table_key_index_size", "table_standby_replicas", "topic_allow_declare", "topic_disable_leader", "topic_partitions", "topic_replication_factor", "cache", "web", "web_bind", "web_application_options", "web_cors_options", "web_enabled", "web_stats_enabled", "web_graph_enabled", "web_router_enabled", "web_tables_enabled", "web_metrics_enabled", "web_host", "web_in_thread", "web_port", "web_ssl_context", "web_transport", "canonical_url", "worker_redirect_stdouts", "worker_redirect_stdouts_level", "Agent", "ConsumerScheduler", "Event", "Schema", "Stream", "Table", "SetTable", "GlobalTable", "SetGlobalTable", "TableManager", "Serializers", "Worker", "PartitionAssignor", "LeaderAssignor", "Router", "Topic", "HttpClient", "Monitor", "stream_ack_cancelled_tasks", "stream_ack_exceptions", "producer_linger_ms", "url"]


def test_every_faust_setting_is_known_readable_writable_and_documented() -> None:
    assert sorted(set(FAUST_SETTINGS) - set(SETTINGS)) == []
    app = faust.App("every")
    documented = DOCS.read_text()
    for name in FAUST_SETTINGS:
        setting = SETTINGS[name]
        assert getattr(app.conf, name) == setting.default, name
        setattr(app.conf, name, setting.default)  # the default always passes its own check
        assert re.search(rf"^\| `{re.escape(name)}` \|", documented, re.M), f"{name} missing from docs/faust.md"


def test_a_faust_app_constructor_loads() -> None:
    app = faust.App(
        "shop",
        broker="kafka://localhost:9092",
        version=2,
        origin="shop.app",
        store="rocksdb://",
        topic_partitions=4,
        value_serializer="json",
        key_serializer="raw",
        stream_buffer_maxsize=100,
        reply_create_topic=True,
        table_cleanup_interval=timedelta(seconds=10),
        web_port=6067,
        autodiscover=True,
        processing_guarantee="at_least_once",
    )
    conf = app.conf
    assert (conf.origin, conf.store, conf.stream_buffer_maxsize, conf.reply_create_topic) == (
        "shop.app", "rocksdb://", 100, True
    )
    assert conf.table_cleanup_interval == 10.0 and conf.web_port == 6067
    assert conf.ineffective() == [
        "autodiscover", "origin", "table_cleanup_interval", "web_port",
    ]
    # honoured: version makes Faust's versioned id, used for the group and internal topics
    assert (conf.name, conf.id, app.id, app.dlq_topic.name) == ("shop", "shop-v2", "shop-v2", "shop-v2-dlq")
    assert app.broker == "kafka://localhost:9092"
    assert app.topic_partitions == 4
    conf.web_port = 7000
    assert app.conf.web_port == 7000
    # honoured: the store of tables declared without store=
    assert app.Table("counts").store_kind == "rocksdb"
    assert faust.App("plain").Table("counts").store_kind == "rocksdb"
    assert faust.App("mem", store="memory://").Table("counts").store_kind == "memory"


def test_honoured_settings_reach_what_the_worker_reads() -> None:
    app = faust.App("honoured", broker_commit_interval=2.8, consumer_auto_offset_reset="latest", on_error="stop")
    assert (app.commit_interval_ms, app.auto_offset_reset, app.on_error) == (2800, "latest", "stop")
    app.conf.commit_interval = 0.5  # streamkit's spelling of the same setting
    assert app.commit_interval_ms == 500 and app.conf.broker_commit_interval == 0.5
    app.broker = "file://elsewhere"
    assert app.conf.broker == "file://elsewhere"
    raw_values = faust.App("raw-values", value_serializer="raw", key_serializer="json")
    topic = raw_values.topic("t")
    assert topic.value_serde.name == "raw" and topic.key_serde.name == "json"


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("kafka://localhost:9092", "kafka://localhost:9092"),
        (["kafka://a:9092", "kafka://b:9092"], "kafka://a:9092,b:9092"),
        ("kafka://a:9092;kafka://b:9092", "kafka://a:9092,b:9092"),
        ("aiokafka://a:1", "kafka://a:1"),
        ("localhost:9092", "kafka://localhost:9092"),
        ("file://./data", "file://./data"),
    ],
)
def test_broker_urls_in_faust_forms(given: object, url: str) -> None:
    assert faust.App("brokers", broker=given).broker == url


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"brokr": "kafka://x:1"}, "unknown setting 'brokr'; did you mean 'broker'"),
        ({"broker": "redis://x"}, "unsupported broker URL"),
        ({"store": "aerospike://"}, "store 'aerospike://' is not offered here"),
        ({"store": "rocksdb"}, "must be a URL"),
        ({"topic_partitions": 0}, "topic_partitions must be an integer >= 1"),
        ({"web_port": 70000}, "port number"),
        ({"value_serializer": "pickle"}, "serializer 'pickle' is not offered here"),
        ({"processing_guarantee": "sometimes"}, "must be one of"),
        ({"on_error": "ignore"}, "on_error must be one of dlq, stop"),
        ({"commit_interval": 0}, "above 0 seconds"),
        ({"commit_interval": 1.0, "broker_commit_interval": 2.0}, "both given"),
        ({"debug": "yes"}, "debug must be True or False"),
    ],
)
def test_a_bad_or_unknown_setting_is_a_clear_error(settings: dict[str, object], message: str) -> None:
    with pytest.raises(faust.ConfigError, match=re.escape(message)):
        faust.App("bad", **settings)


def test_writes_are_checked_and_unknown_names_fail_on_read_too() -> None:
    app = faust.App("checked")
    with pytest.raises(faust.ConfigError, match="reply_expires must be seconds"):
        app.conf.reply_expires = "a day"
    with pytest.raises(faust.ConfigError, match="unknown setting 'web_prot'; did you mean 'web_port'"):
        _ = app.conf.web_prot
    assert not hasattr(app.conf, "__deepcopy__")
    with pytest.raises(faust.ConfigError, match="app id"):
        faust.App("bad id!")
