"""Errors of the commit log.

    StreamkitError
      LogError                      anything the log refuses or cannot do
        InvalidRecordError          a batch is malformed: bad magic, sizes, CRC (not retriable)
          CorruptRecordError        ... found damaged on disk or in a frame
        UnsupportedCompressionError a batch uses a codec we cannot read
        RecordTooLargeError         a batch exceeds the topic's max.message.bytes
        OffsetOutOfRangeError       a read starts outside [log_start_offset, high_watermark],
                                    or DeleteRecords names an offset past the high watermark
        PolicyViolationError        the topic's config forbids it (DeleteRecords on a topic
                                    without the delete cleanup policy)
        UnknownTopicError           no such topic or partition
        TopicExistsError            create of a topic that exists
        InvalidTopicError           an unusable topic name or config
          InvalidPartitionsError    a partition count the topic cannot take
        DataDirLockedError          another process owns the data directory
        LogClosedError              the log was closed
"""

from __future__ import annotations

from streamkit._core.errors import StreamkitError


class LogError(StreamkitError):
    """Base class of the commit log's errors."""


class InvalidRecordError(LogError):
    """A record batch is malformed."""


class CorruptRecordError(InvalidRecordError):
    """A record batch failed its CRC or size checks."""


class UnsupportedCompressionError(InvalidRecordError):
    """A batch names a compression codec we cannot decode."""


class RecordTooLargeError(LogError):
    """A batch is larger than the topic allows."""


class OffsetOutOfRangeError(LogError):
    """A read offset lies outside the partition's log."""

    def __init__(self, offset: int, log_start_offset: int, high_watermark: int) -> None:
        super().__init__(
            f"offset {offset} is out of range [{log_start_offset}, {high_watermark}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


class PolicyViolationError(LogError):
    """The topic's configuration forbids the operation."""


class UnknownTopicError(LogError):
    """No such topic or partition."""


class TopicExistsError(LogError):
    """The topic already exists."""


class InvalidTopicError(LogError):
    """The topic name or configuration cannot be used."""


class InvalidPartitionsError(InvalidTopicError):
    """A partition count a topic cannot take (a topic never shrinks)."""


class DataDirLockedError(LogError):
    """Another process holds the data directory's lock."""


class LogClosedError(LogError):
    """The log has been closed."""
