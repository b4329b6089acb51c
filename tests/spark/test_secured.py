"""The data source over TLS and SASL: Spark's Kafka source's ``kafka.*`` options, against the
session Kafka's SASL_SSL listener (``tests/support/secured.py``). A write and a read back with
SCRAM-SHA-512 over TLS; a bad ``kafka.*`` option fails on the driver in one line naming it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from streamkit._core.errors import ConfigError
from streamkit.spark.options import SourceOptions
from tests.support import secured
from tests.support.kafka import KafkaCluster

USER = "bob"


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
