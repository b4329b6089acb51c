"""The app the secured-Kafka test runs with ``streamkit worker``: word count (lines -> words
keyed by word -> a table of counts). Its broker and id come from the environment
(SECURED_BROKER, SECURED_APP_ID); its TLS and SASL settings only from the environment's
STREAMKIT_* variables (docs/security.md): nothing secret is in the code.
"""

from __future__ import annotations

import os

import streamkit as sk

app_id = os.environ.get("SECURED_APP_ID", "secured-wordcount")
app = sk.App(app_id, broker=os.environ.get("SECURED_BROKER", "file://.streamkit"), commit_interval=0.5)
lines = app.topic(f"{app_id}-lines", value_type=str, partitions=2)
words = app.topic(f"{app_id}-words", key_type=str, value_type=str, partitions=2)
word_counts = app.Table("word_counts", default=int, key_type=str, value_type=int, partitions=2)


@app.agent(lines)
async def split(stream: sk.Stream) -> None:
    async for line in stream:
        for word in line.split():
            await words.send(key=word, value=word)


@app.agent(words)
async def count(stream: sk.Stream) -> None:
    async for word in stream:
        word_counts[word] += 1
