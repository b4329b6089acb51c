"""The window benchmark's tumbling count written with faust-streaming (run by ``window_bench.py``).

This file runs in the faust venv (``benchmarks/.data/venv-faust``, from
``requirements-faust.txt``), never in streamkit's: ``window_bench.py`` starts it as
``python faust_window.py worker --without-web -l info`` with its settings in the environment:

    BENCH_BROKER     kafka://127.0.0.1:PORT (our ``streamkit broker``)
    BENCH_APP_ID     the app id, which is also the consumer group
    BENCH_IN         the input topic of page views, keyed by user (pre-loaded by the benchmark)
    BENCH_DATADIR    faust's data directory (its RocksDB stores go there)
    BENCH_WINDOW_S   the tumbling window's size in seconds

The app counts views per user per tumbling window in a windowed table with ``default=int``
(``Table(...).tumbling(size, expires=size)``), on RocksDB through rocksdict as in
``faust_table.py``. faust places an event in its window by the record's timestamp (the default
``relative_to`` of a windowed table) and writes one changelog record per update. faust has no
emit-on-close and no stream-stream joins, so this is the whole app: the count into the table.
Settings as in ``faust_table.py``: no web server, commit interval 1 s, producer linger 5 ms.
"""

from __future__ import annotations

import os
from typing import Any

import faust

PARTITIONS = int(os.environ.get("BENCH_PARTITIONS", "4"))
WINDOW_S = float(os.environ["BENCH_WINDOW_S"])

app = faust.App(
    os.environ["BENCH_APP_ID"],
    broker=os.environ["BENCH_BROKER"],
    datadir=os.environ["BENCH_DATADIR"],
    store="rocksdb://",
    web_enabled=False,
    web_bind="127.0.0.1",
    web_host="127.0.0.1",
    topic_partitions=PARTITIONS,
    broker_commit_interval=1.0,
    producer_linger=0.005,
)
views = app.topic(
    os.environ["BENCH_IN"], key_type=str, value_type=str, key_serializer="raw",
    value_serializer="raw", partitions=PARTITIONS,
)
counts = app.Table(
    "views_per_window", default=int, key_type=str, value_type=int, partitions=PARTITIONS,
    options={"driver": "rocksdict"},
).tumbling(WINDOW_S, expires=WINDOW_S)


@app.agent(views)
async def count(stream: Any) -> None:
    async for event in stream.events():
        counts[event.key] += 1


if __name__ == "__main__":
    app.main()
