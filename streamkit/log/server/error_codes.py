"""Kafka error codes: the wire server's enum of their numbers.

``code_for`` maps the log's exceptions to the code a client expects; handlers use the named
constants for everything else. Numbers from apache/kafka ``Errors.java``. The coordinators
below the wire server answer with their own enums of the codes they use, with Kafka's names
and numbers (``log/groups/errors.py``: ``GroupErrorCode``, ``log/txn/errors.py``:
``TxnErrorCode``); ``txn_code`` turns the transaction coordinator's into this enum's member.
"""

from __future__ import annotations

from enum import IntEnum

from streamkit.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTopicError,
    LogError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordTooLargeError,
    TopicExistsError,
    UnknownTopicError,
    UnsupportedCompressionError,
)
from streamkit.log.txn.errors import TxnErrorCode


class ErrorCode(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    GROUP_ID_NOT_FOUND = 69
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    TRANSACTIONAL_ID_NOT_FOUND = 105


def code_for(exc: LogError) -> ErrorCode:
    """The Kafka error code for one of the log's errors."""
    if isinstance(exc, RecordTooLargeError):
        return ErrorCode.MESSAGE_TOO_LARGE
    if isinstance(exc, UnsupportedCompressionError):
        return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.CORRUPT_MESSAGE
    if isinstance(exc, InvalidRecordError):
        return ErrorCode.INVALID_RECORD
    if isinstance(exc, OffsetOutOfRangeError):
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, TopicExistsError):
        return ErrorCode.TOPIC_ALREADY_EXISTS
    if isinstance(exc, PolicyViolationError):
        return ErrorCode.POLICY_VIOLATION
    if isinstance(exc, InvalidTopicError):
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_SERVER_ERROR


def txn_code(code: TxnErrorCode) -> ErrorCode:
    """The wire's member for a transaction coordinator's answer: the same number (compare
    members of one enum: ``is`` between the two enums' members is always false)."""
    return ErrorCode(code.value)
