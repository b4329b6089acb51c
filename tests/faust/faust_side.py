"""The faust-streaming half of the interoperability test (``test_faust_interop.py``).

Runs in the separate faust venv (never in streamkit's), started by the test as
``python faust_side.py worker --without-web -l info`` with its settings in the environment:

    FAUST_BROKER      kafka://127.0.0.1:PORT (the test's ``streamkit broker``)
    FAUST_APP_ID      the app id (also the consumer group)
    FAUST_DATADIR     faust's data directory (a temp dir)
    FAUST_OUT         a file this script appends one JSON line to per event
    TOPIC_PREFIX      topic names: {prefix}-sk-orders, -sk-words (streamkit writes them,
                      faust reads), {prefix}-faust-orders, -faust-words (faust writes them)

Faust's defaults everywhere that matters to the test: JSON values, raw keys, records with
their ``__faust`` metadata (``include_metadata`` is on by default in Faust).
"""

from __future__ import annotations

import json
import os
from typing import Any

import faust

app = faust.App(
    os.environ["FAUST_APP_ID"],
    broker=os.environ["FAUST_BROKER"],
    datadir=os.environ["FAUST_DATADIR"],
    store="memory://",
    web_enabled=False,
    web_bind="127.0.0.1",
    web_host="127.0.0.1",
    topic_partitions=1,
)


class Order(faust.Record, namespace="interop.Order"):
    order_id: str
    amount: float
    user: str


prefix = os.environ["TOPIC_PREFIX"]
sk_orders = app.topic(f"{prefix}-sk-orders", key_type=str, value_type=Order)
sk_words = app.topic(f"{prefix}-sk-words", key_type=str, value_type=str)
faust_orders = app.topic(f"{prefix}-faust-orders", key_type=str, value_type=Order)
faust_words = app.topic(f"{prefix}-faust-words", key_type=str, value_type=str)


def note(kind: str, **fields: Any) -> None:
    with open(os.environ["FAUST_OUT"], "a") as out:
        out.write(json.dumps({"kind": kind, **fields}) + "\n")


@app.agent(sk_orders)
async def read_orders(stream: Any) -> None:
    async for key, order in stream.items():
        note("order", key=key, type=type(order).__name__, fields=order.asdict())


@app.agent(sk_words)
async def read_words(stream: Any) -> None:
    async for key, word in stream.items():
        note("word", key=key, type=type(word).__name__, value=word)


@app.task
async def write() -> None:
    await faust_orders.send(key="o-from-faust", value=Order(order_id="f-1", amount=12.25, user="bob"))
    await faust_words.send(key="w-from-faust", value='héllo "faust"')
    note("sent")


if __name__ == "__main__":
    app.main()
