"""Errors of the group coordinator.

Group requests fail with a Kafka error code, not an exception: a refused JoinGroup is a
normal answer the client acts on (reset its member id, rejoin, look for the coordinator
again). ``GroupErrorCode`` carries Kafka's numeric codes and names so the wire server
copies them into responses unchanged.

Exceptions are only for misuse of the coordinator object itself::

    StreamkitError
      LogError
        GroupCoordinatorError            base of this package's exceptions
          CoordinatorClosedError         start() after aclose() (not retriable)
"""

from __future__ import annotations

from enum import IntEnum

from streamkit.log.errors import LogError


class GroupErrorCode(IntEnum):
    """The Kafka error codes a group request can end with (apache/kafka ``Errors.java``)."""

    NONE = 0
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82


class GroupCoordinatorError(LogError):
    """Base class of the group coordinator's exceptions."""


class CoordinatorClosedError(GroupCoordinatorError):
    """The coordinator was closed and cannot be started again."""
