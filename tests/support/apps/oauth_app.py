"""An app that logs in to the secured-Kafka test's SASL_SSL listener with OAUTHBEARER, through
Faust's ``OAuthCredentials`` and an ``ssl.SSLContext`` trusting the test's CA (OAUTH_CA). Its
token callback gives an unsecured JWT (Kafka's default validator reads those) whose ``exp`` is
OAUTH_EXPIRES_IN_S seconds from now: negative, and Kafka refuses it. Broker and id from
OAUTH_BROKER and OAUTH_APP_ID.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import time

import streamkit as sk


def _part(value: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


class Tokens:
    async def token(self) -> str:
        now = int(time.time())
        claims = {"sub": "alice", "iat": now - 1200, "exp": now + int(os.environ.get("OAUTH_EXPIRES_IN_S", "600"))}
        return f"{_part({'alg': 'none'})}.{_part(claims)}."


app_id = os.environ.get("OAUTH_APP_ID", "oauth")
context = ssl.create_default_context(cafile=os.environ.get("OAUTH_CA"))
app = sk.App(
    app_id, broker=os.environ.get("OAUTH_BROKER", "file://.streamkit"),
    broker_credentials=sk.OAuthCredentials(client_id=app_id, oauth_cb=Tokens(), ssl_context=context),
)
lines = app.topic(f"{app_id}-lines", value_type=str, partitions=1)


@app.agent(lines)
async def echo(stream: sk.Stream) -> None:
    async for line in stream:
        print(line)
