"""Word count in Faust's shape: lines -> words (keyed by word) -> a table of counts.

    lines (text) --split--> words (keyed by word) --count--> table word_counts

Run it:

    streamkit worker -A apps.wordcount:app --web-port 6066
    streamkit send -A apps.wordcount:app lines 'the quick brown fox jumps over the lazy dog'
    curl -s 127.0.0.1:6066/tables/word_counts/the          # {"key": "the", "value": 2}
"""

from __future__ import annotations

import os

import streamkit as sk

app = sk.App("wordcount", broker=os.environ.get("STREAMKIT_BROKER", "file://.streamkit"))
lines = app.topic("lines", value_type=str, partitions=4)
words = app.topic("words", key_type=str, value_type=str, partitions=4)
word_counts = app.Table("word_counts", default=int, key_type=str, value_type=int, help="times each word was seen")


@app.agent(lines)
async def split(stream: sk.Stream) -> None:
    """Send each word of a line keyed by itself, so one word always meets the same partition."""
    async for line in stream:
        for word in line.split():
            await words.send(key=word, value=word)


@app.agent(words)
async def count(stream: sk.Stream) -> None:
    """Count each word in the table (its partition is the word's: no group_by needed)."""
    async for word in stream:
        word_counts[word] += 1
