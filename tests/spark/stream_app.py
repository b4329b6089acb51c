"""The app the backfill tests of tables' streams and fold order run. Its broker comes from the
environment, so the same module serves a worker and a backfill on any directory.

* ``view_totals``: views keyed by page as they come (no repartition), tumbling windows whose
  every update is emitted (``to_stream(emit="update")``) and forwarded, filtered and mapped,
  to ``view-updates``;
* ``joined``: words keyed by their topic's key, concatenated in the order the worker takes
  them (a reducer that does not commute), its changes forwarded to ``joined-changes``;
* ``initials``: letters re-keyed by their first character (a repartition topic), collected
  into a list in the worker's order;
* ``tap_keys`` and ``tap_kinds``: counts of taps by their topic's key, and by a kind of several
  types (1, True, "1", 2.5 are four keys), the filtered ones left out.
"""

from __future__ import annotations

import os

import streamkit as sk
from streamkit.windows import Tumbling

app = sk.App("sbf", broker=os.environ.get("BF_BROKER", "file://.streamkit"))
views = app.topic("views", key_type=str, value_type=int, partitions=2)
view_updates = app.topic("view-updates", key_type=str, value_type=str, partitions=2)
words = app.topic("words", key_type=str, value_type=str, partitions=2)
joined_changes = app.topic("joined-changes", key_type=str, value_type=str, partitions=1)
letters = app.topic("letters", key_type=str, value_type=str, partitions=1)

view_totals = (
    app.stream(views)
    .group_by_key()
    .window(Tumbling(30, grace=10))
    .reduce("view_totals", lambda a, b: a + b, key_type=str, value_type=int, partitions=2)
)
(
    view_totals.to_stream(emit="update")
    .filter(lambda w: w["value"] > 1)
    .map_values(lambda w: f"{w['window_start']}:{w['value']}")
    .to(view_updates)
)

joined = app.stream(words).group_by_key().reduce("joined", lambda a, b: a + b, key_type=str, value_type=str)
joined.to_stream().map_values(lambda v: None if v is None else v.upper()).to(joined_changes)

initials = (
    app.stream(letters)
    .group_by(lambda word: word[0], name="initial")
    .aggregate("initials", list, lambda _k, word, seen: [*seen, word], key_type=str, value_type=list)
)

taps = app.topic("taps", key_type=str, value_type=dict, partitions=2)
tap_keys = app.stream(taps).group_by_key().count("tap_keys")
tap_kinds = (
    app.stream(taps)
    .filter(lambda t: t["n"] % 5 != 0)
    .group_by(lambda t: t["kind"], name="kind")
    .count("tap_kinds")
)


def words_per_key(spark: object, source: object) -> object:
    """A hand-written job for ``joined`` (``--job stream_app:words_per_key``): how many words
    each key has, as text (the table's ``str`` values are UTF-8 on the wire)."""
    from pyspark.sql import functions as F

    counts = source.groupBy(F.col("key").cast("string").alias("key")).count()  # type: ignore[attr-defined]
    return counts.select("key", F.col("count").cast("string").alias("value"))
