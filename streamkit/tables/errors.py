"""Errors of tables.

    StreamkitError
      TableError               a table was used in a way it cannot serve (not retriable)
        PartitionNotHeldError  the key's partition is not held by this worker (retriable:
                               it may be assigned, or still restoring)
        CorruptStateError      local state that cannot be read; it is wiped and restored
        StateLockedError       local state another open store holds (another worker on the
                               same state directory); never wiped
"""

from __future__ import annotations

from streamkit._core.errors import StreamkitError


class TableError(StreamkitError):
    """A table operation that cannot be served."""


class PartitionNotHeldError(TableError, KeyError):
    """The partition of a key is not held (or not yet restored) by this worker."""

    retriable = True

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "partition not held"


class CorruptStateError(TableError):
    """A state directory could not be read as a table partition's store."""


class StateLockedError(TableError):
    """A state directory is locked by another open store."""
