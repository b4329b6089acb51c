"""The engine benchmark's pipeline written with faust-streaming (run by ``engine_bench.py``).

This file runs in the separate faust venv (``benchmarks/.data/venv-faust``, from
``requirements-faust.txt``), never in streamkit's: ``engine_bench.py`` starts it as
``python faust_pipeline.py worker --without-web -l info`` with its settings in the environment:

    BENCH_BROKER    kafka://127.0.0.1:PORT (our ``streamkit broker``)
    BENCH_APP_ID    the app id, which is also the consumer group
    BENCH_IN        the input topic (pre-loaded by the benchmark)
    BENCH_OUT       the output topic (created by the benchmark)
    BENCH_DATADIR   faust's data directory (a temp dir)

The pipeline is the one every other variant runs: read each (key, value), upper-case the
value, send it to the output topic with the same key. ``yield`` to a faust sink would drop
the key (a sink gets the value only), so the agent sends explicitly: what faust's sink does,
plus the key. Settings are faust's defaults except: in-memory store, no web server (and
none listening beyond 127.0.0.1), the producer's linger set to streamkit's (5 ms), raw
serializers. ``-l info`` rather than ``warn``: at WARN and above faust's worker installs its
terminal spinner, which sets the root logger to DEBUG so that every debug call in faust and
aiokafka builds a log record (about 13% of faust's CPU in a profile).
"""

from __future__ import annotations

import os
from typing import Any

import faust

PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "4"))

app = faust.App(
    os.environ["BENCH_APP_ID"],
    broker=os.environ["BENCH_BROKER"],
    datadir=os.environ["BENCH_DATADIR"],
    store="memory://",
    web_enabled=False,  # the worker command's --without-web is what really turns it off
    web_bind="127.0.0.1",
    web_host="127.0.0.1",
    topic_partitions=PARTITIONS,
    producer_linger=0.005,
    key_serializer="raw",
    value_serializer="raw",
)
source = app.topic(
    os.environ["BENCH_IN"], key_type=bytes, value_type=bytes, key_serializer="raw",
    value_serializer="raw", partitions=PARTITIONS,
)
sink = app.topic(
    os.environ["BENCH_OUT"], key_type=bytes, value_type=bytes, key_serializer="raw",
    value_serializer="raw", partitions=PARTITIONS,
)


def transform(value: bytes) -> bytes:
    return value.upper()


@app.agent(source)
async def pipeline(stream: Any) -> None:
    async for key, value in stream.items():
        await sink.send(key=key, value=transform(value))


if __name__ == "__main__":
    app.main()
