"""The API versions this server advertises in ApiVersions, and what each really accepts.

The table follows the research notes (kafka-wire.md §4): only non-flexible versions except
ApiVersions v3, OffsetFetch v6-7 and TxnOffsetCommit v3 (what Kafka 4.4's clients need for
``exactly_once_v2``: RequireStable, and the consumer's generation on transactional offset
commits), AlterConfigs v2 and IncrementalAlterConfigs v1 (``kafka-configs --alter``), and the
APIs of Kafka's tools below; ranges wide enough for aiokafka, kafka-python, librdkafka 2.x and
the old librdkafka under Debian's kcat.

Kafka's tools (issue 26): DeleteRecords v0-2 (``kafka-delete-records``; all Kafka 4.4 has),
DescribeLogDirs v1-4 (``kafka-log-dirs``; Kafka 4.0 removed v0,
KIP-896), DescribeTransactions v0 and ListTransactions v0-1 (``kafka-transactions``), flexible
as in Kafka; DescribeAcls, CreateAcls and DeleteAcls v1 only (``kafka-acls``; Kafka 4.4 has
v1-3 and its clients take v1):
kafka-python reads DescribeAcls v2 as "Kafka 2.5" and v3 as "3.3", and would then take this
table for a newer Kafka's than the 2.4 it is. DescribeQuorum is not listed: this node is no
KRaft quorum, and a Kafka broker in none (ZooKeeper mode) did not list it either, so
``kafka-metadata-quorum`` says the node does not support it.

Two deliberate differences between advertised and served:

* Produce is advertised from v0, because librdkafka < 2.11.1 silently stops compressing
  unless Produce v0 is listed (KAFKA-18659); v0-2 carry old message formats, so a request
  at those versions closes the connection;
* transactions (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
  DescribeTransactions, ListTransactions) are listed only when the transaction coordinator is
  enabled (``BrokerConfig.transactions``, on by default).

Security (issue 27): SaslHandshake v0-1 and SaslAuthenticate v0-2 (as Kafka 4.4),
DescribeUserScramCredentials v0 and AlterUserScramCredentials v0 (``kafka-configs
--entity-type users``; Kafka has v0 only). Not DescribeClientQuotas,
which ``kafka-configs --describe --entity-type users`` asks first: listing it makes
kafka-python infer Kafka 2.6 and count on InitProducerId v3 epoch bumps (KIP-360) that this
broker does not serve, so that describe fails here until both are served.

kafka-python infers the broker version (2, 4) from this table.
"""

from __future__ import annotations

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

# api key -> (min, max) advertised
ADVERTISED: dict[int, tuple[int, int]] = {
    PRODUCE: (0, 8),
    FETCH: (4, 11),
    LIST_OFFSETS: (1, 3),
    METADATA: (1, 5),
    OFFSET_COMMIT: (2, 3),
    OFFSET_FETCH: (1, 7),
    FIND_COORDINATOR: (0, 1),
    JOIN_GROUP: (0, 5),
    HEARTBEAT: (0, 3),
    LEAVE_GROUP: (0, 1),
    SYNC_GROUP: (0, 3),
    DESCRIBE_GROUPS: (0, 3),
    LIST_GROUPS: (0, 1),
    SASL_HANDSHAKE: (0, 1),
    API_VERSIONS: (0, 3),
    CREATE_TOPICS: (2, 4),
    DELETE_TOPICS: (1, 3),
    DELETE_RECORDS: (0, 2),
    INIT_PRODUCER_ID: (0, 1),
    DESCRIBE_CONFIGS: (1, 2),
    ALTER_CONFIGS: (0, 2),
    DESCRIBE_ACLS: (1, 1),
    CREATE_ACLS: (1, 1),
    DELETE_ACLS: (1, 1),
    DESCRIBE_LOG_DIRS: (1, 4),
    SASL_AUTHENTICATE: (0, 2),
    CREATE_PARTITIONS: (0, 1),
    DELETE_GROUPS: (0, 1),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

TRANSACTION_APIS: dict[int, tuple[int, int]] = {
    ADD_PARTITIONS_TO_TXN: (0, 1),
    ADD_OFFSETS_TO_TXN: (0, 1),
    END_TXN: (0, 1),
    TXN_OFFSET_COMMIT: (0, 3),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
}


def advertised(*, transactions: bool) -> dict[int, tuple[int, int]]:
    table = dict(ADVERTISED)
    if transactions:
        table.update(TRANSACTION_APIS)
    return dict(sorted(table.items()))
