"""Word count, declared (Kafka Streams' DSL): the same answer as ``apps/wordcount.py`` with no
agent written by hand.

    lines --flat_map_values(split)--> group_by(word) --count--> table word_counts

Run it:

    streamkit worker -A apps.wordcount_dsl:app --web-port 6066
    streamkit send -A apps.wordcount_dsl:app lines 'to be or not to be'
    curl -s 127.0.0.1:6066/tables/word_counts/to           # {"key": "to", "value": 2}
"""

from __future__ import annotations

import os

import streamkit as sk

app = sk.App("wordcount-dsl", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"))
lines = app.topic("lines", value_type=str, partitions=4)

word_counts = (
    app.stream(lines)
    .flat_map_values(str.split)
    .group_by(str.lower, name="word")
    .count("word_counts", key_type=str, value_type=int)
)
