"""From a request frame to a response frame: version checks, decoding, the handler, encoding.

Handlers are ``async (state, header, request) -> response | None``; None means "send
nothing" (Produce with acks=0). A request this server cannot serve raises a ``ServerError``
and the connection closes, except ApiVersions at a version above ours, which is answered in
v0 with UNSUPPORTED_VERSION so the client can retry with a version we listed.

Each connection's ``Session`` (``session.py``) comes along: before SASL authentication only
ApiVersions, SaslHandshake and SaslAuthenticate pass (anything else raises, closing the
connection, as Kafka), after SaslHandshake v0 a frame is a bare SASL token, and the SASL
handlers (``SESSION_HANDLERS``) take the session. Every handler finds the connection's
listener name and principal in ``header.listener`` and ``header.principal``. Without a
session (in-process callers and tests) a request is served as on a PLAINTEXT listener.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from streamkit.log.server import (
    acl_apis,
    admin,
    apis,
    cluster,
    config_apis,
    fetch,
    group_apis,
    log_dirs,
    produce,
    sasl_apis,
    txn_apis,
)
from streamkit.log.server.codec import (
    RequestHeader,
    decode_request,
    encode_api_versions_error,
    encode_response,
    is_implemented,
    peek_header,
)
from streamkit.log.server.errors import (
    AuthenticationFailed,
    UnauthenticatedRequestError,
    UnsupportedRequestError,
)
from streamkit.log.server.frames import (
    FetchAnswer,
    Part,
    decode_produce_request,
    encode_fetch_response,
)
from streamkit.log.server.listeners import Listener
from streamkit.log.server.session import ANONYMOUS, Session
from streamkit.log.server.state import BrokerState

_MAX_HEADER_V1 = 10 + 0x7FFF

Handler = Callable[[BrokerState, RequestHeader, Any], Awaitable[object | None]]
SessionHandler = Callable[[BrokerState, Session, RequestHeader, Any], Awaitable[object]]

HANDLERS: dict[int, Handler] = {
    apis.PRODUCE: produce.produce,
    apis.FETCH: fetch.fetch,
    apis.LIST_OFFSETS: fetch.list_offsets,
    apis.METADATA: cluster.metadata,
    apis.OFFSET_COMMIT: group_apis.offset_commit,
    apis.OFFSET_FETCH: group_apis.offset_fetch,
    apis.FIND_COORDINATOR: cluster.find_coordinator,
    apis.JOIN_GROUP: group_apis.join_group,
    apis.HEARTBEAT: group_apis.heartbeat,
    apis.LEAVE_GROUP: group_apis.leave_group,
    apis.SYNC_GROUP: group_apis.sync_group,
    apis.DESCRIBE_GROUPS: group_apis.describe_groups,
    apis.LIST_GROUPS: group_apis.list_groups,
    apis.DELETE_GROUPS: group_apis.delete_groups,
    apis.API_VERSIONS: cluster.api_versions,
    apis.CREATE_TOPICS: admin.create_topics,
    apis.DELETE_TOPICS: admin.delete_topics,
    apis.DELETE_RECORDS: admin.delete_records,
    apis.INIT_PRODUCER_ID: produce.init_producer_id,
    apis.DESCRIBE_CONFIGS: config_apis.describe_configs,
    apis.ALTER_CONFIGS: config_apis.alter_configs,
    apis.INCREMENTAL_ALTER_CONFIGS: config_apis.incremental_alter_configs,
    apis.CREATE_PARTITIONS: admin.create_partitions,
    apis.ADD_PARTITIONS_TO_TXN: txn_apis.add_partitions_to_txn,
    apis.ADD_OFFSETS_TO_TXN: txn_apis.add_offsets_to_txn,
    apis.END_TXN: txn_apis.end_txn,
    apis.TXN_OFFSET_COMMIT: txn_apis.txn_offset_commit,
    apis.DESCRIBE_TRANSACTIONS: txn_apis.describe_transactions,
    apis.LIST_TRANSACTIONS: txn_apis.list_transactions,
    apis.DESCRIBE_ACLS: acl_apis.describe_acls,
    apis.CREATE_ACLS: acl_apis.create_acls,
    apis.DELETE_ACLS: acl_apis.delete_acls,
    apis.DESCRIBE_LOG_DIRS: log_dirs.describe_log_dirs,
    apis.DESCRIBE_USER_SCRAM_CREDENTIALS: sasl_apis.describe_user_scram_credentials,
    apis.ALTER_USER_SCRAM_CREDENTIALS: sasl_apis.alter_user_scram_credentials,
}

SESSION_HANDLERS: dict[int, SessionHandler] = {
    apis.SASL_HANDSHAKE: sasl_apis.sasl_handshake,
    apis.SASL_AUTHENTICATE: sasl_apis.sasl_authenticate,
}


class Dispatcher:
    def __init__(self, state: BrokerState, handlers: dict[int, Handler] | None = None) -> None:
        self.state = state
        self.handlers = dict(HANDLERS if handlers is None else handlers)

    async def handle(
        self, frame: bytes | bytearray, client_host: str = "", session: Session | None = None
    ) -> list[Part] | None:
        """The response frame for one request frame as parts to send in order (see
        ``frames.py``), or None when none is due.

        A large frame comes as a ``bytearray`` (read into in place): Produce reads its records
        from it as they are; kio wants ``bytes``, so anything else gets a copy.
        """
        listener, principal = "", ANONYMOUS
        if session is not None:
            if session.raw_tokens and not session.authenticated:
                return await self._raw_token(bytes(frame), session)
            listener, principal = session.listener.name, session.principal
        if isinstance(frame, bytes):
            header = peek_header(frame, client_host, listener, principal)
        else:  # a v1 header is at most 10 bytes and a 32767-byte client id
            header = peek_header(bytes(memoryview(frame)[:_MAX_HEADER_V1]), client_host, listener, principal)
        if session is not None and not session.allows(header.api_key):
            raise UnauthenticatedRequestError(
                f"api key {header.api_key} before SASL authentication on listener {listener}"
            )
        table = self.state.api_table
        if header.api_key == apis.API_VERSIONS and not (
            table[apis.API_VERSIONS][0] <= header.api_version <= table[apis.API_VERSIONS][1]
        ):
            entries = [(key, lo, hi) for key, (lo, hi) in table.items()]
            return [encode_api_versions_error(header.correlation_id, entries)]
        advertised = table.get(header.api_key)
        session_handler = SESSION_HANDLERS.get(header.api_key)
        handler = self.handlers.get(header.api_key)
        if (
            advertised is None
            or (handler is None and session_handler is None)
            or not advertised[0] <= header.api_version <= advertised[1]
            or not is_implemented(header.api_key, header.api_version)
        ):
            raise UnsupportedRequestError(
                f"api key {header.api_key} version {header.api_version} is not served"
            )
        if header.api_key == apis.PRODUCE:
            request: Any = decode_produce_request(frame, header)
        else:
            request = decode_request(frame if isinstance(frame, bytes) else bytes(frame), header)
        if session_handler is not None:
            response = await session_handler(self.state, session or _plaintext_session(), header, request)
        else:
            assert handler is not None
            response = await handler(self.state, header, request)
        if response is None:
            return None
        if isinstance(response, FetchAnswer):
            return encode_fetch_response(header, response)
        return [encode_response(header, response)]

    async def _raw_token(self, token: bytes, session: Session) -> list[Part]:
        """After SaslHandshake v0: a bare SASL token in, a bare size-prefixed token out; a
        failure closes the connection without an answer (Kafka has no error frame there)."""
        try:
            answer = await sasl_apis.authenticate(self.state, session, token)
        except AuthenticationFailed as exc:
            raise UnauthenticatedRequestError(str(exc)) from exc
        return [len(answer).to_bytes(4, "big") + answer]


def _plaintext_session() -> Session:
    return Session(listener=Listener("PLAINTEXT", "PLAINTEXT", "", 0))
