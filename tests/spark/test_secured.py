"""The data source, the backfill and jobs over TLS and SASL, against the session Kafka's
SASL_SSL listener (``tests/support/secured.py``). The data source with Spark's Kafka source's
``kafka.*`` options: a write and a read back with SCRAM-SHA-512 over TLS; a bad ``kafka.*``
option fails on the driver in one line naming it. The backfill and a job with the app's
security from the environment, no secret in Spark's log, a plan or an error. (The
``streamkit backfill`` command over SASL_SSL is in ``test_backfill.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamkit._core.errors import ConfigError
from streamkit.spark.options import SourceOptions
from tests.support import secured
from tests.support.kafka import KafkaCluster

USER = "bob"
HERE = Path(__file__).resolve().parent


def _secured_options(kafka: KafkaCluster) -> dict[str, str]:
    assert kafka.tls is not None
    return {
        "kafka.bootstrap.servers": kafka.sasl_ssl_bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{secured.USERS[USER]}";',
        "kafka.ssl.ca.location": str(kafka.tls.ca),
    }


def test_a_dataframe_is_written_and_read_back_over_sasl_ssl(spark: Any, kafka: KafkaCluster) -> None:
    from streamkit.transport.kafka_tools import KafkaTools

    topic = f"secured-spark-{uuid.uuid4().hex[:6]}"

    async def create() -> None:
        async with KafkaTools(kafka.bootstrap) as tools:
            await tools.create_topic(topic, 2, {})

    asyncio.run(create())
    options = _secured_options(kafka)
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20)]
    writer = spark.createDataFrame(rows, "key binary, value binary").write.format("streamkit").option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()
    reader = spark.read.format("streamkit").option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    back = reader.load().select("key", "value").collect()
    assert sorted((bytes(r.key), bytes(r.value)) for r in back) == sorted(rows)


def test_a_bad_kafka_option_is_one_error_naming_it(kafka: KafkaCluster) -> None:
    options = {**_secured_options(kafka), "topic": "t", "kafka.sasl.mechanism": "SCRAM-SHA-1"}
    with pytest.raises(ConfigError, match=r"^option kafka\.sasl\.mechanism: unknown mechanism 'SCRAM-SHA-1'"):
        SourceOptions.parse(options)
    with pytest.raises(ConfigError, match=r"^option kafka\.ssl\.truststore\.location: Java key and trust stores are not read"):
        SourceOptions.parse({"bootstrap": "127.0.0.1:1", "topic": "t", "kafka.ssl.truststore.location": "/x.jks"})


def _load_orders(kafka: KafkaCluster, topic: str, count: int) -> dict[str, int]:
    """``count`` orders of ``backfill_app`` into ``topic`` (the test's own writes: PLAINTEXT);
    each order id's amount."""
    import streamkit as sk
    from streamkit._core.partitioner import partition_for_key
    from streamkit.log.records import NewRecord
    from streamkit.transport.kafka_tools import KafkaTools

    orders = sk.App("loader").topic(topic, key_type=str, value_type=dict, partitions=2)
    by_partition: dict[int, list[NewRecord]] = {}
    now_ms = int(time.time() * 1000)
    for i in range(count):
        key = orders.key_serde.dumps(f"o{i}")
        record = NewRecord(key, orders.value_serde.dumps({"user": f"u{i % 3}", "amount": i}), now_ms + i, ())
        by_partition.setdefault(partition_for_key(key, 2), []).append(record)

    async def load() -> None:
        async with KafkaTools(kafka.bootstrap) as tools:
            await tools.create_topic(topic, 2, {})
            for p, records in by_partition.items():
                await tools.produce(topic, p, records)

    asyncio.run(load())
    return {f"o{i}": i for i in range(count)}


def _topic(kafka: KafkaCluster, topic: str) -> dict[bytes | None, bytes | None]:
    from streamkit.transport.kafka_tools import KafkaTools

    async def read() -> dict[bytes | None, bytes | None]:
        async with KafkaTools(kafka.bootstrap) as tools:
            out = {}
            for p in (await tools.describe_topic(topic)).partitions:
                got = await tools.fetch(topic, p.partition, 0, 1 << 20)
                out.update({r.key: r.value for r in got.records})
            return out

    return asyncio.run(read())


@contextlib.contextmanager
def _driver_log(spark: Any, path: Path) -> Iterator[None]:
    """The shared session's driver log at INFO, also to ``path`` (a log4j2 file appender on the
    root logger: the JVM's own stderr is not the test's to capture), for the block."""
    jvm = spark._jvm
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    config = context.getConfiguration()
    layout = jvm.org.apache.logging.log4j.core.layout.PatternLayout.createDefaultLayout()
    appender = (
        jvm.org.apache.logging.log4j.core.appender.FileAppender.newBuilder()
        .withFileName(str(path)).setName("streamkit-test").setLayout(layout).build()
    )
    appender.start()
    config.addAppender(appender)
    config.getRootLogger().addAppender(appender, None, None)
    context.updateLoggers()
    spark.sparkContext.setLogLevel("INFO")
    try:
        yield
    finally:
        spark.sparkContext.setLogLevel("ERROR")  # the session's level (tests/conftest.py)
        config.getRootLogger().removeAppender("streamkit-test")
        context.updateLoggers()
        appender.stop()


def test_the_backfill_and_a_job_read_and_write_over_sasl_ssl_and_show_no_secret(
    spark: Any, kafka: KafkaCluster, monkeypatch: pytest.MonkeyPatch, unique: str, capfd: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """A ``kafka://`` app on the SASL_SSL listener, its security from the environment
    (SCRAM-SHA-256): the backfill's executors read its source through TLS and SASL
    (``TaskLog``), a hand-written job reads and writes through the data source's options. With
    Spark's driver logging at INFO, the password is nowhere in Spark's log, in what the test
    process printed (the plan of ``explain(True)`` of a read with the JAAS config as an
    option), nor in the error of a refused read."""
    from streamkit.spark.backfill import backfill
    from streamkit.spark.jobs import run_job

    assert kafka.tls is not None
    password = secured.USERS["alice"]
    source = f"{unique}-orders"
    amounts = _load_orders(kafka, source, 30)
    for name, value in {
        "BF_BROKER": f"kafka://{kafka.sasl_ssl_bootstrap}", "BF_ID": unique,
        "STREAMKIT_SECURITY_PROTOCOL": "SASL_SSL", "STREAMKIT_SASL_MECHANISM": "SCRAM-SHA-256",
        "STREAMKIT_SASL_USERNAME": "alice", "STREAMKIT_SASL_PASSWORD": password,
        "STREAMKIT_SSL_CA_LOCATION": str(kafka.tls.ca),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(HERE))
    sys.modules.pop("backfill_app", None)
    capfd.readouterr()
    with _driver_log(spark, tmp_path / "driver.log"):
        counts = backfill(spark, "backfill_app:app", "orders_per_user", to_topic=f"{unique}-counts")[0]
        job = run_job(spark, "backfill_app:app", "jobs:amounts", source_topic=source, to_topic=f"{unique}-amounts")
        frame = spark.read.format("streamkit").option("topic", source)
        for name, value in _secured_options(kafka).items():
            frame = frame.option(name, value)
        frame.load().explain(True)
    printed = capfd.readouterr()
    driver_log = (tmp_path / "driver.log").read_text()
    assert counts.records_read == 30 and counts.keys_written == 3
    assert _topic(kafka, f"{unique}-counts") == {f'"u{u}"'.encode(): b"10" for u in range(3)}
    assert job.keys_written == 30
    assert _topic(kafka, f"{unique}-amounts") == {k.encode(): str(v).encode() for k, v in amounts.items()}
    assert "BatchScan streamkit" in printed.out  # the plan was printed, without the options
    assert "Starting job" in driver_log and "is committing" in driver_log  # the jobs' reads and writes, logged
    assert password not in printed.out + printed.err + driver_log
    assert secured.USERS[USER] not in printed.out + printed.err + driver_log  # the data source's jaas config

    wrong = "not-" + secured.USERS[USER]
    refused = spark.read.format("streamkit").option("topic", source)
    for name, value in {**_secured_options(kafka), "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram."
                        f'ScramLoginModule required username="{USER}" password="{wrong}";'}.items():
        refused = refused.option(name, value)
    with pytest.raises(Exception, match="SASL authentication failed") as failed:
        refused.load().collect()
    assert wrong not in str(failed.value)
