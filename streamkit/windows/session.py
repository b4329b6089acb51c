"""Session merging: how a record changes the sessions of its key; plain code.

A session ``[start, end]`` runs from its first to its last record (both inclusive). A record at
``ts`` joins every session of its key that ends at ``ts - gap`` or later and starts at
``ts + gap`` or earlier; those sessions and the record become one session spanning them all.

Lateness (``SessionMerge.late``):

* ``"window-closed"``: the merged session is already closed (``stream time > end + gap +
  grace``), as Kafka Streams drops such a record;
* ``"session-closed"``: the merged session would swallow a session that is closed. Kafka
  Streams merges it anyway (its closed session was already emitted as final, and a second,
  larger "final" session follows); we treat the record as late instead, so a session emitted
  on close is never changed afterwards. Such a record is at most ``gap + grace`` behind
  stream time, so ``Session.expire_bound`` keeps closed sessions one gap longer than Kafka
  Streams does, and the answer does not depend on when the store deleted them.

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

    ``sessions`` may hold sessions the record does not reach; they are ignored. Stream time is
    the one after observing the record.
    """
    joined = [s for s in sessions if session_overlaps(spec, s[0], s[1], ts_ms)]
    start = min([ts_ms, *(s[0] for s in joined)])
    end = max([ts_ms, *(s[1] for s in joined)])
    late: str | None = None
    if any(spec.closed(s[1], stream_time_ms) for s in joined):
        late = "session-closed"
    elif spec.closed(end, stream_time_ms):
        late = "window-closed"
    return SessionMerge(start, end, joined, late)
