"""The faust-streaming half of the RPC interoperability test (``test_faust_rpc.py``).

Runs in the faust venv as ``python faust_rpc_side.py worker --without-web -l info``, with:

    FAUST_BROKER   kafka://127.0.0.1:PORT (the test's ``streamkit broker``)
    FAUST_APP_ID   the app id
    FAUST_DATADIR  faust's data directory
    FAUST_OUT      a file this script appends one JSON line to per note
    SK_TOPIC       the topic a streamkit agent that doubles numbers reads

Faust's defaults for RPC (reply headers, its own reply topic). ``triple`` answers streamkit's
``ask``; the task notes the name Faust gives ``triple``'s topic, then asks streamkit's agent
through a Faust agent declared over its topic (one that never yields, so only streamkit
answers).
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


def note(kind: str, **fields: Any) -> None:
    with open(os.environ["FAUST_OUT"], "a") as out:
        out.write(json.dumps({"kind": kind, **fields}) + "\n")


@app.agent()
async def triple(stream: Any) -> Any:
    async for n in stream:
        yield n * 3


@app.agent(app.topic(os.environ["SK_TOPIC"], value_type=int))
async def doubler(stream: Any) -> None:
    async for _ in stream:
        pass  # streamkit's agent on the same topic answers


@app.task
async def ask_streamkit() -> None:
    note("agent_topic", name=triple.channel.get_topic_name())
    note("asked", value=await doubler.ask(21))


if __name__ == "__main__":
    app.main()
