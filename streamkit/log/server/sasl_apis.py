"""SaslHandshake, SaslAuthenticate and the SCRAM credential APIs (Describe/AlterUserScramCredentials).

The SASL handlers take the connection's ``Session`` (``session.py`` has the exchange and its
rules). The credential APIs answer as Kafka's KRaft controller (``ScramControlManager``,
``ScramImage.describe``) does, with its messages: a user altered twice in one request is
DUPLICATE_RESOURCE, iterations outside 4096-16384 UNACCEPTABLE_CREDENTIAL, an unknown
mechanism UNSUPPORTED_SASL_MECHANISM, deleting or describing a missing credential
RESOURCE_NOT_FOUND. Accepted changes are saved (fsync + rename) before the answer, all of one
request in one write; the file is replaced in a worker thread under ``credentials_lock``.
"""

from __future__ import annotations

from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode
from streamkit.log.server.errors import AuthenticationFailed, CredentialStoreError, ScramError
from streamkit.log.server.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    DescribeUserScramCredentialsCredentialInfo,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from streamkit.log.server.scram import (
    BY_TYPE,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    credential_from_salted,
)
from streamkit.log.server.session import Session
from streamkit.log.server.state import BrokerState

_TWICE = "A user credential cannot be altered twice in the same request"
_DESCRIBE_TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
_DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "


async def sasl_handshake(
    state: BrokerState, session: Session, header: RequestHeader, request: SaslHandshakeRequest
) -> SaslHandshakeResponse:
    enabled = list(state.config.sasl_mechanisms)
    if not session.listener.sasl or session.authenticated or session.mechanism is not None:
        # After login (or on a listener without SASL) Kafka's KafkaApis answers so; a second
        # handshake during the exchange also closes the connection (SaslServerAuthenticator).
        session.close_after_response = not session.authenticated
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    if not session.choose(request.mechanism, state.config.sasl_mechanisms, header.api_version):
        return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
    return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=enabled)


async def sasl_authenticate(
    state: BrokerState, session: Session, header: RequestHeader, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    if session.authenticated or session.mechanism is None or session.raw_tokens:
        session.close_after_response = not session.authenticated
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="Unexpected SaslAuthenticate request"
            + (" after successful authentication" if session.authenticated else " before SaslHandshake v1"),
        )
    try:
        token = await authenticate(state, session, bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        return SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc))
    return SaslAuthenticateResponse(error_code=ErrorCode.NONE, auth_bytes=token)


async def authenticate(state: BrokerState, session: Session, token: bytes) -> bytes:
    store = state.credentials

    async def check_plain(user: str, password: str) -> bool:
        return await state.run_blocking(store.check_plain, user, password)

    return await session.authenticate(token, store, check_plain)


async def describe_user_scram_credentials(
    state: BrokerState, header: RequestHeader, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    users = state.credentials.users()
    names = [u.name for u in request.users or []]
    wanted = names or list(users)
    results = []
    for name in dict.fromkeys(wanted):
        result = DescribeUserScramCredentialsResult(user=name)
        if names.count(name) > 1:
            result.error_code = ErrorCode.DUPLICATE_RESOURCE
            result.error_message = _DESCRIBE_TWICE + name
        elif name not in users:
            result.error_code = ErrorCode.RESOURCE_NOT_FOUND
            result.error_message = _DESCRIBE_MISSING + name
        else:
            result.credential_infos = [
                DescribeUserScramCredentialsCredentialInfo(mechanism=m.kafka_type, iterations=users[name][m.name].iterations)
                for m in BY_TYPE.values()
                if m.name in users[name]
            ]
        results.append(result)
    return DescribeUserScramCredentialsResponse(results=results)


def _validate(name: str, mechanism_type: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism_type not in BY_TYPE:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


async def alter_user_scram_credentials(
    state: BrokerState, header: RequestHeader, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    errors: dict[str, tuple[ErrorCode, str]] = {}
    deletions: dict[str, int] = {}
    upserts: dict[str, tuple[int, int, bytes, bytes]] = {}
    existing = state.credentials.users()
    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        error = _validate(d.name, d.mechanism)
        if error is None and BY_TYPE[d.mechanism].name not in existing.get(d.name, {}):
            error = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        if error is None:
            deletions[d.name] = d.mechanism
        else:
            errors[d.name] = error
    for u in request.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upserts.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        error = _validate(u.name, u.mechanism)
        if error is None and u.iterations < MIN_ITERATIONS:
            error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif error is None and u.iterations > MAX_ITERATIONS:
            error = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if error is None:
            upserts[u.name] = (u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
        else:
            errors[u.name] = error
    results = []
    async with state.credentials_lock:
        store = state.credentials
        for name, mechanism_type in deletions.items():
            store.delete(name, BY_TYPE[mechanism_type])
        for name, (mechanism_type, iterations, salt, salted) in upserts.items():
            mechanism = BY_TYPE[mechanism_type]
            try:
                store.upsert(name, mechanism, credential_from_salted(mechanism, salted, salt, iterations))
            except (ScramError, ValueError) as exc:
                errors[name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, str(exc))
        if deletions or upserts:
            try:
                await state.run_blocking(store.save)
            except CredentialStoreError as exc:
                await state.run_blocking(store.load)  # back to what is on disk
                failed = (ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
                errors.update({name: failed for name in [*deletions, *upserts]})
                deletions, upserts = {}, {}
    for name in [*deletions, *upserts]:
        if name not in errors:
            results.append(AlterUserScramCredentialsResult(user=name))
    for name, (code, message) in errors.items():
        results.append(AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message))
    return AlterUserScramCredentialsResponse(results=results)
