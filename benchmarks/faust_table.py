"""The table benchmark's word count written with faust-streaming (run by ``table_bench.py``).

This file runs in the separate faust venv (``benchmarks/.data/venv-faust``, from
``requirements-faust.txt``), never in streamkit's: ``table_bench.py`` starts it as
``python faust_table.py worker --without-web -l info`` with its settings in the environment:

    BENCH_BROKER    kafka://127.0.0.1:PORT (our ``streamkit broker``)
    BENCH_APP_ID    the app id, which is also the consumer group
    BENCH_IN        the input topic of words, keyed by the word (pre-loaded by the benchmark)
    BENCH_DATADIR   faust's data directory (a temp dir: its RocksDB stores go there)
    BENCH_STORE     the table's store URL (default ``rocksdb://``)

The app is the one streamkit runs: each record's value (a word, the record's key too) adds one
to the word's count in a table with ``default=int``. faust 0.15 has no ``rocksdict://`` store
URL; its ``rocksdb://`` store uses rocksdict when python-rocksdb is not installed (the faust
venv has only rocksdict), and the table asks for that driver explicitly as well. Like every
faust table it writes its changelog ``<app>-counts-changelog`` (one record per update: faust's
design) and puts each update into RocksDB as it happens. Settings are faust's defaults except:
no web server (and none listening beyond 127.0.0.1), the commit interval set to streamkit's
(1 s), the producer's linger set to streamkit's (5 ms). ``-l info`` for the reason given in
``faust_pipeline.py``.
"""

from __future__ import annotations

import os
from typing import Any

import faust

PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "4"))
STORE = os.environ.get("BENCH_STORE", "rocksdb://")

app = faust.App(
    os.environ["BENCH_APP_ID"],
    broker=os.environ["BENCH_BROKER"],
    datadir=os.environ["BENCH_DATADIR"],
    store=STORE,
    web_enabled=False,  # the worker command's --without-web is what really turns it off
    web_bind="127.0.0.1",
    web_host="127.0.0.1",
    topic_partitions=PARTITIONS,
    broker_commit_interval=1.0,
    producer_linger=0.005,
)
words = app.topic(
    os.environ["BENCH_IN"], key_type=str, value_type=str, key_serializer="raw",
    value_serializer="raw", partitions=PARTITIONS,
)
counts = app.Table(
    "counts", default=int, key_type=str, value_type=int, partitions=PARTITIONS,
    options={"driver": "rocksdict"} if STORE.startswith("rocksdb") else None,
)


@app.agent(words)
async def count(stream: Any) -> None:
    async for word in stream:
        counts[word] += 1


if __name__ == "__main__":
    app.main()
