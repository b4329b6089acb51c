"""Errors of the wire server (the Kafka error *codes* it sends are in ``error_codes.py``).

    StreamkitError
      LogError
        ServerError                   the wire server refuses a connection or a request
          MalformedRequestError       bytes that are not a readable request: the connection closes
          FrameTooLargeError          a frame above the size limit: the connection closes
          UnsupportedRequestError     an API key or version we do not serve: the connection closes
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
