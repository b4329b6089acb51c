"""The window benchmark's tumbling count and windowed join written with Quix Streams.

This file runs in the Quix venv (``benchmarks/.data/venv-quix``, from
``requirements-quix.txt``: quixstreams pins its own confluent-kafka), never in streamkit's.
``window_bench.py`` starts it as ``python quix_window.py`` with its settings in the environment:

    BENCH_BOOTSTRAP   127.0.0.1:PORT (our ``streamkit broker``)
    BENCH_APP_ID      the consumer group
    BENCH_MODE        ``count`` or ``join``
    BENCH_IN          the input topic (count), or the left side (join)
    BENCH_RIGHT       the right side (join)
    BENCH_OUT         the output topic
    BENCH_STATE_DIR   Quix's state directory (RocksDB)
    BENCH_WINDOW_MS   count: the tumbling window's size
    BENCH_WITHIN_MS   join: records of a key pair when their timestamps differ by at most this
    BENCH_GRACE_MS    join: how long the join keeps records (Quix's ``grace_ms``)

count: ``tumbling_window(size).count().final()``: each window once, when it closes, to
``BENCH_OUT`` as JSON ``{"start", "end", "value"}`` keyed by the user. join:
``join_interval(right, how="inner", backward_ms=within, forward_ms=within)`` (a pair on either
side's arrival, as Kafka Streams' JoinWindows), the value ``left + "|" + right``. Keys and
values are read as strings, as the streamkit app reads them. Settings are Quix's defaults
except: the commit interval (1 s, streamkit's), ``auto_offset_reset="earliest"`` (the input is
pre-loaded), ``auto_create_topics`` on (changelogs, the output).
"""

from __future__ import annotations

import os

from quixstreams import Application

MODE = os.environ["BENCH_MODE"]

app = Application(
    broker_address=os.environ["BENCH_BOOTSTRAP"],
    consumer_group=os.environ["BENCH_APP_ID"],
    auto_offset_reset="earliest",
    commit_interval=1.0,
    state_dir=os.environ["BENCH_STATE_DIR"],
    loglevel="INFO",
)
left_topic = app.topic(os.environ["BENCH_IN"], key_deserializer="str", value_deserializer="str")
out_topic = app.topic(os.environ["BENCH_OUT"], key_serializer="str", value_serializer="json")

if MODE == "count":
    sdf = app.dataframe(left_topic)
    sdf = sdf.tumbling_window(duration_ms=int(os.environ["BENCH_WINDOW_MS"])).count().final()
    sdf.to_topic(out_topic)
elif MODE == "join":
    out_topic = app.topic(os.environ["BENCH_OUT"], key_serializer="str", value_serializer="str")
    right_topic = app.topic(os.environ["BENCH_RIGHT"], key_deserializer="str", value_deserializer="str")
    within = int(os.environ["BENCH_WITHIN_MS"])
    sdf = app.dataframe(left_topic).join_interval(
        app.dataframe(right_topic), how="inner", backward_ms=within, forward_ms=within,
        grace_ms=int(os.environ["BENCH_GRACE_MS"]), on_merge=lambda left, right: f"{left}|{right}",
    )
    sdf.to_topic(out_topic)
else:
    raise SystemExit(f"BENCH_MODE must be count or join, not {MODE!r}")

if __name__ == "__main__":
    app.run()
