"""Stream time: the largest record timestamp seen so far; plain code.

Windows close and expire by stream time alone, never by the wall clock, so the same records
give the same windows, closes and late records in a live run, a replay and a backfill.
Before any record, stream time is ``NO_TIMESTAMP`` (-1, as Kafka's).
"""

from __future__ import annotations

NO_TIMESTAMP = -1


class StreamTime:
    """The maximum timestamp observed; it never goes back.

    >>> st = StreamTime()
    >>> st.advance(50), st.advance(20), st.ms
    (True, False, 50)
    """

    __slots__ = ("ms",)

    def __init__(self, ms: int = NO_TIMESTAMP) -> None:
        self.ms = ms

    def advance(self, ts_ms: int) -> bool:
        """Observe ``ts_ms``; True when it moved stream time forward."""
        if ts_ms > self.ms:
            self.ms = ts_ms
            return True
        return False

    def __repr__(self) -> str:
        return f"StreamTime(ms={self.ms})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamTime) and other.ms == self.ms

    __hash__ = None  # type: ignore[assignment]  # mutable
