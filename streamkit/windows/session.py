"""Session merging: how a record changes the sessions of its key; plain code.

A session ``[start, end]`` runs from its first to its last record (both inclusive). A record at
``ts`` joins every session of its key that ends at ``ts - gap`` or later and starts at
``ts + gap`` or earlier; those sessions and the record become one session spanning them all
(``KStreamSessionWindowAggregate.process``, ``findSessions(ts - gap, ts + gap)``).

A session is *closed* once ``stream time >= end + gap + grace`` (``Session.close_bound``): it is
emitted on close then (``suppress(untilWindowCloses)``, whose grace for sessions is gap +
grace). The session store returns a session while ``end > store time - retention``
(``AbstractRocksDBSegmentedBytesStore.getActualFrom``; sessions are kept by their end): with
the default retention, gap + grace, that is while it is open, so a record never merges into a
closed session: a record within the gap of one starts a new session of its own. With a longer
retention (``expires=``, Kafka Streams' ``Materialized.withRetention``) a closed session the
store still holds merges with a record that reaches it, if the merged session is not late:
it is emitted again, merged (``session_hidden``). The store's time is the largest session end
written before the record's own write: the stream time before the record (the record that
moves stream time writes a session ending there), so a record that moves stream time still
merges a session its own arrival closes (and that session, merged away, is not emitted).

A record is late (``SessionMerge.late == "window-closed"``) when the session it would make ends
before ``stream time - gap - grace`` (Kafka Streams drops it). A session ending exactly there
is made, closed already: it is emitted at once, and no later record sees it.

>>> from streamkit.windows.spec import Session
>>> spec = Session(10)  # a 10 s gap
>>> merge_session(spec, [(0, 5_000, "a"), (20_000, 30_000, "b")], 12_000, 12_000)
SessionMerge(start_ms=0, end_ms=30000, replaces=[(0, 5000, 'a'), (20000, 30000, 'b')], late=None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from streamkit.windows.spec import Session

T = TypeVar("T")


@dataclass(frozen=True)
class SessionMerge(Generic[T]):
    """The session a record makes, and the existing sessions it replaces (with their values)."""

    start_ms: int
    end_ms: int
    replaces: list[tuple[int, int, T]]
    late: str | None = None


def session_overlaps(spec: Session, start_ms: int, end_ms: int, ts_ms: int) -> bool:
    """Whether a record at ``ts_ms`` joins the session ``[start_ms, end_ms]``."""
    return end_ms >= ts_ms - spec.gap_ms and start_ms <= ts_ms + spec.gap_ms


def session_hidden(spec: Session, end_ms: int, store_time_ms: int, retention_ms: int | None = None) -> bool:
    """Whether the session store no longer returns a session ending at ``end_ms``: it ends
    at or before its time less the retention (default: gap + grace, so once it is closed)."""
    retention = spec.retention_ms if retention_ms is None else retention_ms
    return end_ms <= store_time_ms - retention


def merge_session(
    spec: Session,
    sessions: Sequence[tuple[int, int, T]],
    ts_ms: int,
    stream_time_ms: int,
    store_time_ms: int | None = None,
    retention_ms: int | None = None,
) -> SessionMerge[T]:
    """Merge a record at ``ts_ms`` with the key's ``sessions`` (start, end, value).

    ``sessions`` may hold sessions the record does not reach, or ones the store hides; they
    are ignored. Stream time is the one after observing the record; ``store_time_ms`` the one
    before (default: the same), as the session store's time is the largest session end
    written before this record's: a session is hidden once past the retention at that time
    (``retention_ms``, default gap + grace: once closed).
    """
    store_time = stream_time_ms if store_time_ms is None else store_time_ms
    joined = [
        s
        for s in sessions
        if session_overlaps(spec, s[0], s[1], ts_ms) and not session_hidden(spec, s[1], store_time, retention_ms)
    ]
    start = min([ts_ms, *(s[0] for s in joined)])
    end = max([ts_ms, *(s[1] for s in joined)])
    # Dropped when the merged session ends before stream time - gap - grace: one below the
    # close bound (KStreamSessionWindowAggregate: mergedWindow.end() < windowCloseTime).
    late = "window-closed" if end < spec.close_bound(stream_time_ms) - 1 else None
    return SessionMerge(start, end, joined, late)
