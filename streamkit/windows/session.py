"""Session merging: how a record changes the sessions of its key; plain code.

A session ``[start, end]`` runs from its first to its last record (both inclusive). A record at
``ts`` joins every session of its key that ends at ``ts - gap`` or later and starts at
``ts + gap`` or earlier; those sessions and the record become one session spanning them all.

A closed session (``stream time > end + gap + grace``, KAFKA-12718) is final: it was emitted
on close and nothing changes it afterwards. So a record joins only the *open* sessions it
reaches; a closed one within its gap is left as it is, even if the record then starts a new
session less than a gap away from it. Kafka Streams merges a closed session that its store
still holds, which depends on when its segments were dropped; ignoring closed sessions gives
the same answer whatever the store's timing, and lets a session be deleted as soon as it
closes (``Session.expire_bound``).

A record is late (``SessionMerge.late == "window-closed"``) when the session it would make is
closed already, as Kafka Streams drops it.

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


def merge_session(
    spec: Session,
    sessions: Sequence[tuple[int, int, T]],
    ts_ms: int,
    stream_time_ms: int,
) -> SessionMerge[T]:
    """Merge a record at ``ts_ms`` with the key's ``sessions`` (start, end, value).

    ``sessions`` may hold sessions the record does not reach, or closed ones; they are
    ignored. Stream time is the one after observing the record.
    """
    joined = [
        s
        for s in sessions
        if session_overlaps(spec, s[0], s[1], ts_ms) and not spec.closed(s[1], stream_time_ms)
    ]
    start = min([ts_ms, *(s[0] for s in joined)])
    end = max([ts_ms, *(s[1] for s in joined)])
    late = "window-closed" if spec.closed(end, stream_time_ms) else None
    return SessionMerge(start, end, joined, late)
