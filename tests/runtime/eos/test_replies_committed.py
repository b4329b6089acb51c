"""Agent RPC under exactly-once: the asker reads replies committed, so the reply of an
aborted transaction never answers a request; the reply of the committed run does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import streamkit as sk
from streamkit.agents.replies import encode_response
from streamkit.runtime.replies import ReplyConsumer
from streamkit.transport.embedded.client import EmbeddedLogClient


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
async def test_an_aborted_reply_answers_only_at_least_once(tmp_path: Path, guarantee: str) -> None:
    app = sk.App("eosrpc", broker=f"file://{tmp_path / 'log'}", processing_guarantee=guarantee)
    client = EmbeddedLogClient(str(tmp_path / "log"))
    await client.start()
    replies = ReplyConsumer(app, client)
    try:
        await replies.listen("eosrpc-replies")
        answer = replies.promise("c1")
        producer = client.transactional_producer("eosrpc-0")
        await producer.start()
        # The first run of the request answers, then its transaction aborts (a fenced task);
        # the second run answers again and commits.
        await producer.send("eosrpc-replies", None, encode_response("k", "aborted", "c1"), partition=0)
        await producer.flush()
        await producer.abort_transaction()
        await producer.send("eosrpc-replies", None, encode_response("k", "committed", "c1"), partition=0)
        await producer.commit_transaction({}, "eosrpc")
        value = await asyncio.wait_for(answer, 30)
        await producer.aclose()
    finally:
        await replies.aclose()
        await client.aclose()
    assert value == ("committed" if guarantee == "exactly_once" else "aborted")
