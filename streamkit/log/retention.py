"""Retention planning: which whole segments of a partition may be deleted. Plain code.

Kafka's rules: a segment goes when its newest record is older than ``retention.ms``, or while
the partition is larger than ``retention.bytes`` by at least that segment's size. Deletion
takes a prefix of the segments (the oldest first) and never the active (last) segment, so
the log start offset only moves forward and the log end never moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamkit.log.config import TopicConfig


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    base_offset: int
    size_bytes: int
    max_timestamp: int  # -1 for an empty segment


def plan_retention(
    segments: Sequence[SegmentSummary], config: TopicConfig, now_ms: int
) -> int:
    """How many of the oldest segments to delete: an expired prefix, or as many as bring the
    partition within ``retention.bytes``, whichever is more. The active (last) segment counts
    too when it holds records, as in Kafka (``UnifiedLog.deleteRetentionMsBreachedSegments``,
    ``LocalLog.deletableSegments``): when every segment goes, the partition rolls a new, empty
    one first, at the log end, so the log start moves up to it."""
    if not config.delete or not segments:
        return 0
    candidates = segments if segments[-1].size_bytes > 0 else segments[:-1]
    by_time = 0
    if config.retention_ms >= 0:
        for seg in candidates:
            if now_ms - seg.max_timestamp > config.retention_ms:
                by_time += 1
            else:
                break
    by_size = 0
    if config.retention_bytes >= 0:
        excess = sum(s.size_bytes for s in segments) - config.retention_bytes
        for seg in candidates:
            if excess - seg.size_bytes >= 0:
                excess -= seg.size_bytes
                by_size += 1
            else:
                break
    return max(by_time, by_size)
