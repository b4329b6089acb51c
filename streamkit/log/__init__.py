"""The commit log: topics of partitions, each an append-only sequence of record batches.

This package imports only ``streamkit._core``; everything above it reaches a log through
``streamkit.transport`` (or, for the wire server, lives inside ``log/server``).

Owns: segments, indexes, partitions, the log manager, compaction and retention, consumer
groups (``groups/``), transactions (``txn/``), the Kafka wire-protocol server (``server/``).
May import: ``_core`` only.
"""
