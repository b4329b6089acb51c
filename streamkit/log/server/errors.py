"""Errors of the wire server (the Kafka error *codes* it sends are in ``error_codes.py``).

    StreamkitError
      LogError
        ServerError                   the wire server refuses a connection or a request
          MalformedRequestError       bytes that are not a readable request: the connection closes
          FrameTooLargeError          a frame above the size limit: the connection closes
          UnsupportedRequestError     an API key or version we do not serve: the connection closes
          UnauthenticatedRequestError a request other than ApiVersions/SASL before login: closes
          AuthenticationFailed        refused SASL credentials (``session.py``): answered, then closes
          ScramError                  an unacceptable SCRAM message or credential (``scram.py``)
        CredentialStoreError          the credential file is damaged or cannot be written
"""

from __future__ import annotations

from streamkit.log.errors import LogError


class ServerError(LogError):
    """Base class of the wire server's errors."""


class MalformedRequestError(ServerError):
    """A request frame could not be decoded."""


class FrameTooLargeError(ServerError):
    """A frame's size field is above the configured maximum (or negative)."""


class UnsupportedRequestError(ServerError):
    """A request names an API key or version this server does not implement."""


class UnauthenticatedRequestError(ServerError):
    """A request other than ApiVersions or SASL before SASL authentication succeeded."""


class AuthenticationFailed(ServerError):
    """The client's credentials were refused; ``str`` is what the client is told."""


class ScramError(ServerError):
    """A SCRAM exchange or credential that cannot be accepted; the message holds no secret.

    ``client_message`` is set where Kafka tells the client its own reason."""

    def __init__(self, message: str, client_message: str | None = None) -> None:
        super().__init__(message)
        self.client_message = client_message


class CredentialStoreError(LogError):
    """The credential file is damaged or cannot be written."""
