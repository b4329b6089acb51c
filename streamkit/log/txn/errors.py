"""Errors of the transaction coordinator.

Transaction requests fail with a Kafka error code, not an exception: a refused
AddPartitionsToTxn or EndTxn is a normal answer the producer acts on (it was fenced, its
transaction is in the wrong state, it must retry). ``TxnErrorCode`` carries Kafka's numeric
codes and names so the wire server copies them into responses unchanged, and in-process
callers (the embedded transport) read them without knowing the wire protocol.

The package has no exceptions of its own: an error of the log (``LogError``) reaches the
caller of ``recover`` or of a request as it is (a marker that cannot be written is logged).
"""

from __future__ import annotations

from enum import IntEnum


class TxnErrorCode(IntEnum):
    """The Kafka error codes a transaction request can end with (apache/kafka ``Errors.java``)."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    OPERATION_NOT_ATTEMPTED = 55
