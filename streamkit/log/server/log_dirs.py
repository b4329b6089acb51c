"""DescribeLogDirs (v1-v4): the broker's one log directory, its partitions and their sizes
(``kafka-log-dirs --describe``).

The log directory is the broker's data directory (absolute). A partition's size is the sum
of its segment files' sizes; its offset lag is 0 (one replica: the log end offset is the high
watermark) and it is never a "future" log (no AlterReplicaLogDirs). From v4 the volume's total
and usable bytes come from the filesystem (-1 when it cannot be asked). As Kafka's
``ReplicaManager.describeLogDirs``: a null topic list means every topic, and a named topic or
partition this broker does not have is left out, not an error. streamkit's internal topics are
hidden, as in Metadata.

With an authorizer (``BrokerConfig.authorizer``) each request is first checked as Kafka's
``KafkaApis`` checks it, answered with Kafka's authorization error at Kafka's granularity
(``access.py``; the checks are listed in ``docs/security.md``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from streamkit._core.types import TopicPartition
from streamkit.log.errors import LogError
from streamkit.log.manager import INTERNAL_TOPICS, LogManager
from streamkit.log.server import access
from streamkit.log.server.authorizer import Operation
from streamkit.log.server.codec import RequestHeader
from streamkit.log.server.error_codes import ErrorCode, code_for
from streamkit.log.server.messages import (
    DescribeLogDirsPartition,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)
from streamkit.log.server.state import BrokerState


async def describe_log_dirs(
    state: BrokerState, header: RequestHeader, request: DescribeLogDirsRequest
) -> DescribeLogDirsResponse:
    if not access.allowed_on_cluster(state, header, Operation.DESCRIBE):
        return DescribeLogDirsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    wanted = None if request.topics is None else {
        TopicPartition(t.topic, p) for t in request.topics for p in t.partitions
    }
    log = state.log
    result = DescribeLogDirsResult(log_dir=str(Path(log.data_dir).absolute()))
    # Listed here, as Metadata lists them: topics are created and deleted on this loop's behalf.
    if wanted is None:
        topics = log.list_topics()
    else:
        topics = sorted({tp.topic for tp in wanted if tp.topic not in INTERNAL_TOPICS and log.has_topic(tp.topic)})
    try:
        sizes = await state.run_blocking(_sizes, log, topics, wanted)
    except LogError as exc:  # the log closing under the request
        result.error_code = code_for(exc)
        return DescribeLogDirsResponse(results=[result])
    result.topics = [
        DescribeLogDirsTopic(
            name=topic,
            partitions=[DescribeLogDirsPartition(partition_index=p, partition_size=size) for p, size in parts],
        )
        for topic, parts in sizes.items()
    ]
    try:
        usage = shutil.disk_usage(log.data_dir)
    except OSError:
        pass  # the sizes stand; the volume's stay -1
    else:
        result.total_bytes, result.usable_bytes = usage.total, usage.free
    return DescribeLogDirsResponse(error_code=ErrorCode.NONE, results=[result])


def _sizes(
    log: LogManager, topics: list[str], wanted: set[TopicPartition] | None
) -> dict[str, list[tuple[int, int]]]:
    """topic -> [(partition, bytes in its segments)] for the partitions of ``topics`` that are
    ``wanted`` (None: all), in order (blocking: a partition not opened yet is opened)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for topic in topics:
        try:
            infos = log.partition_infos(topic)
        except LogError:
            continue  # deleted meanwhile
        parts = [
            (info.partition, info.size_bytes)
            for info in infos
            if wanted is None or TopicPartition(topic, info.partition) in wanted
        ]
        if parts:
            out[topic] = parts
    return out
