"""The transaction coordinator's error codes are Kafka's: each ``TxnErrorCode`` member has the
name and number of the wire server's ``ErrorCode`` member it becomes in a response."""

from __future__ import annotations

from streamkit.log.server.error_codes import ErrorCode, txn_code
from streamkit.log.txn.errors import TxnErrorCode


def test_each_txn_code_is_the_kafka_code_of_its_name() -> None:
    for member in TxnErrorCode:
        assert ErrorCode[member.name] == member.value, member


def test_txn_code_gives_the_wire_member_of_the_same_number() -> None:
    for member in TxnErrorCode:
        wire = txn_code(member)
        assert type(wire) is ErrorCode
        assert wire is ErrorCode[member.name]
    assert txn_code(TxnErrorCode.NONE) is not TxnErrorCode.NONE  # same number, other enum
