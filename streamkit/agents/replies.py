"""Agent RPC (``agent.ask``, ``map``, ``kvmap``, ``join``): requests, replies, reply topics.

On the wire as faust-streaming puts it (its default, ``use_reply_headers=True``), so a Faust
app and a streamkit app can ask each other's agents:

* a request is the value itself, sent to the agent's topic with two headers:
  ``Faust-Ag-ReplyTo`` (the reply topic's name) and ``Faust-Ag-CorrelationId`` (a UUID);
* an agent that ``yield``s while processing such a request answers with one record on the
  reply topic, key ``None``, value the JSON object ``{"key": <request key>, "value":
  <yielded value>, "correlation_id": ..., "__faust": {"ns": "@ReqRepResponse"}}`` (a yielded
  record is written with its own ``"__faust"`` namespace, so the asker gets that record
  back when it knows the class);
* a reply topic has one partition, deletes after ``reply_expires`` seconds, and is named by
  ``reply_to`` (``app.conf.reply_to``, else ``reply_to_prefix`` and a UUID per app).

The asking side needs a consumer on its reply topic: the ``Replies`` port, which the running
worker provides (``runtime/replies.py``), or, in a script that runs no worker, the runtime
opened on first use (``runtime/standalone.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from streamkit._core.record import METADATA_KEY, Record, reconstruct
from streamkit._core.serde import JsonSerde, SerdeError
from streamkit.topics.topic import Topic

if TYPE_CHECKING:
    from streamkit.app.application import App

REPLY_TO_HEADER = "Faust-Ag-ReplyTo"
CORRELATION_ID_HEADER = "Faust-Ag-CorrelationId"
RESPONSE_NAMESPACE = "@ReqRepResponse"

_JSON = JsonSerde()


class Replies(Protocol):
    """What the asking side needs: a consumer of reply topics that resolves promises."""

    async def listen(self, reply_to: str) -> None:
        """Create ``reply_to`` unless it exists and read it from now on (idempotent): a reply
        written after this returns is seen."""
        ...

    def promise(self, correlation_id: str) -> asyncio.Future[Any]:
        """A future resolved with the reply to ``correlation_id``."""
        ...

    def forget(self, correlation_id: str) -> None:
        """Stop waiting for ``correlation_id`` (its asker went away)."""
        ...

    async def aclose(self) -> None:
        """Stop reading; the promises still waiting are cancelled."""
        ...


def reply_address(headers: Sequence[tuple[str, bytes | None]]) -> tuple[str, str] | None:
    """(reply topic, correlation id) of a request carrying Faust's reply headers, else None."""
    reply_to = correlation_id = None
    for name, value in headers:
        if value is None:
            continue
        if name == REPLY_TO_HEADER:
            reply_to = value.decode("utf-8", "replace")
        elif name == CORRELATION_ID_HEADER:
            correlation_id = value.decode("utf-8", "replace")
    if not reply_to:
        return None
    return reply_to, correlation_id or ""


def request_headers(headers: Any, reply_to: str, correlation_id: str) -> list[tuple[str, bytes | str | None]]:
    """``headers`` (a mapping or pairs, or None) with the two reply headers added."""
    if not headers:
        out: list[tuple[str, bytes | str | None]] = []
    elif hasattr(headers, "items"):
        out = list(headers.items())
    else:
        out = list(headers)
    out = [(n, v) for n, v in out if n not in (REPLY_TO_HEADER, CORRELATION_ID_HEADER)]
    out.append((REPLY_TO_HEADER, reply_to.encode()))
    out.append((CORRELATION_ID_HEADER, correlation_id.encode()))
    return out


def _with_namespace(value: Any) -> Any:
    """A yielded value as it goes into a reply: a record with its namespace, always (the
    asker rebuilds it by that name), whatever the class's ``include_metadata``."""
    if isinstance(value, Record):
        return {**value.to_representation(), METADATA_KEY: {"ns": value._options.namespace}}
    return value


def encode_response(key: Any, value: Any, correlation_id: str) -> bytes:
    if isinstance(key, (bytes, bytearray, memoryview)):
        key = bytes(key).decode("utf-8", "replace")  # Faust's raw keys are text in the JSON
    data = _JSON.dumps(
        {
            "key": _with_namespace(key),
            "value": _with_namespace(value),
            "correlation_id": correlation_id,
            METADATA_KEY: {"ns": RESPONSE_NAMESPACE},
        }
    )
    assert data is not None
    return data


def decode_response(data: bytes | None) -> tuple[str, Any] | None:
    """(correlation id, value) of a reply record; None when it is not one."""
    try:
        response = _JSON.loads(data)
    except SerdeError:
        return None
    if type(response) is not dict or not isinstance(response.get("correlation_id"), str):
        return None
    return response["correlation_id"], reconstruct(response.get("value"))


def reply_topic(app: App, name: str) -> Topic:
    """A reply topic as Faust declares it: one partition, deleted after ``reply_expires``.
    Values are the encoded responses (raw bytes here)."""
    return Topic(
        app,
        name,
        key_serializer="raw",
        value_serializer="raw",
        partitions=1,
        retention=app.conf.reply_expires,
        config={"cleanup.policy": "delete"},
        internal=True,
    )
