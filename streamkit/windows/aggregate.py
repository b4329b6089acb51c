"""The windowed aggregation driver: records in, window aggregates, closes and late records out.

``WindowAggregator`` runs one window spec's algorithm (``spec``, ``session``, ``sliding``)
record by record, in arrival order, over a ``WindowStore``; it does no I/O of its own and
reads no clock: stream time is the largest timestamp it has seen or was given by ``advance``.
The engine wraps it per task with a table partition's store; the tests drive it with
``SortedMemoryStore``. Keys are bytes (the engine serializes them), values are whatever the
``Aggregation``'s functions take; aggregates cross the store as bytes through its codec.

Store layout (all keys of the aggregator share one store)::

    0x00 "stream_time"            -> 8 bytes: stream time (order-preserving int64, keys.encode_ms)
    0x00 "emitted_until"          -> 8 bytes: close bound up to which windows were emitted
    0x01 window key               -> 8 bytes max record timestamp | aggregate bytes
    0x02 end (8 bytes) window key -> b"" (the windows ordered by end: closing and expiry)

where *window key* is ``keys.encode_window_key(key, start, end)``. Both pieces of progress
live in the store, so a restored store carries on with the same answers. Over a store that
commits (``store.DeferringStore``: a table partition) the driver keeps them in memory and
the store takes them once per commit, with that commit's data, stamped with the stream time
at which they last changed; over any other store they are written as they change.

Emit modes:

* ``"update"``: every change of a window is emitted as it happens (a session merged away is
  emitted with value ``None``);
* ``"close"``: each window is emitted when stream time closes it, as Kafka Streams'
  ``suppress(untilWindowCloses)`` with the cache off: windows closing on the same step come in
  order of end, key, start, when the record that moved stream time writes its first window
  (the suppression buffer evicts on each update it receives); a window written once it is
  closed (a sliding window ending at ``stream time - grace``, which still takes records; a
  session made closed) is emitted again, at once, with its new value. (Kafka Streams' other
  way, ``emitStrategy(EmitStrategy.onWindowClose())``, emits time windows at the same time,
  but a sliding window only once stream time passes ``end + grace`` and a session once it
  passes ``end + gap + grace``, each once, and no more often than its wall-clock emit
  interval: ``AbstractKStreamTimeWindowAggregateProcessor.maybeForwardFinalResult``);
* ``"none"``: nothing is emitted (a table only read, never streamed out).

Retention: a window is deleted (from the store, so from its changelog too) once stream time
passes its retention: by default the spec's (``spec.expire_bound``: as soon as it closes), or
``retention_ms`` counted from the window's start (from its end for sessions), as Kafka Streams'
window store retention and Faust's ``expires=``; it must not be shorter than the spec's own.

A record is late, and reported instead of aggregated, when it has a negative timestamp or
every window it would go to is closed (``spec.py`` gives the close rules; ``session.py`` and
``sliding.py`` the refinements for their window types). A hopping window's record some of
whose windows are closed goes to the open ones; the late counter counts it
(``window-closed-partly``), so that the closed windows do not miss it silently.

>>> from streamkit.windows.spec import Tumbling
>>> count = Aggregation(lambda: 0, lambda n, _v: n + 1, lambda n: str(n).encode(), int)
>>> agg = WindowAggregator(Tumbling(10), count, emit="close")
>>> [agg.process(b"k", ts, None).emitted for ts in (1_000, 4_000, 12_000)]
[[], [], [WindowResult(key=b'k', start_ms=0, end_ms=10000, value=2, ts_ms=4000)]]
>>> agg.process(b"k", 25_000, None).emitted
[WindowResult(key=b'k', start_ms=10000, end_ms=20000, value=1, ts_ms=12000)]
>>> agg.process(b"k", 5_000, None).late.reason
'window-closed'
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from streamkit._core.errors import ConfigError
from streamkit.windows.keys import (
    MIN_MS,
    decode_ms,
    decode_window_key,
    encode_ms,
    encode_window_key,
    key_prefix,
    window_range,
)
from streamkit.windows.lateness import PARTLY_LATE, LateCounter
from streamkit.windows.session import merge_session, session_hidden
from streamkit.windows.sliding import fetch_bounds, plan_sliding, sliding_late
from streamkit.windows.spec import Hopping, Session, Sliding, WindowSpec
from streamkit.windows.store import DeferredWrite, DeferringStore, SortedMemoryStore, WindowStore
from streamkit.windows.streamtime import StreamTime

V = TypeVar("V")
A = TypeVar("A")

Emit = Literal["update", "close", "none"]

_META = b"\x00"
_STREAM_TIME_KEY = _META + b"stream_time"
_EMITTED_KEY = _META + b"emitted_until"
_DATA = b"\x01"
_BY_END = b"\x02"
_BY_END_STOP = b"\x03"
_MAX_TS = struct.Struct(">q")


@dataclass(frozen=True)
class Aggregation(Generic[V, A]):
    """The user's aggregate: ``initializer() -> A``, ``adder(agg, value) -> A``, the codec of
    ``A`` to and from bytes, and for sessions ``merger(agg, agg) -> A``."""

    initializer: Callable[[], A]
    adder: Callable[[A, V], A]
    serialize: Callable[[A], bytes]
    deserialize: Callable[[bytes], A]
    merger: Callable[[A, A], A] | None = None


@dataclass(frozen=True)
class WindowResult(Generic[A]):
    """A window's aggregate as emitted (``value`` None: the session was merged away).

    ``ts_ms`` is the timestamp its record carries, as Kafka Streams stamps a windowed
    aggregation's result: the largest timestamp of the records in the window
    (``KStreamWindowAggregate``: the max of the record's and the stored aggregate's; a
    session's end, ``KStreamSessionWindowAggregate``, which is the same), also when it is
    emitted on close (``suppress`` keeps the buffered record's timestamp) and for the tombstone
    of a merged session (that session's own end). None where no window was read."""

    key: bytes
    start_ms: int
    end_ms: int
    value: A | None
    ts_ms: int | None = None


@dataclass(frozen=True)
class LateRecord(Generic[V]):
    """A record that went to no window, and why."""

    key: bytes
    ts_ms: int
    value: V
    reason: str  # "window-closed" or "negative-timestamp"
    stream_time_ms: int


def expire_bound(spec: WindowSpec, stream_time_ms: int, retention_ms: int | None) -> int:
    """Windows with ``end < expire_bound`` may be deleted: the spec's bound, or the one of a
    retention counted from the window's start (time and sliding windows) or end (sessions).

    >>> from streamkit.windows.spec import Tumbling
    >>> expire_bound(Tumbling(10), 25_000, None), expire_bound(Tumbling(10), 25_000, 20_000)
    (25001, 15001)
    """
    if retention_ms is None:
        return spec.expire_bound(stream_time_ms)
    if isinstance(spec, Hopping):  # end = start + size: start + retention <= stream time
        return stream_time_ms - retention_ms + spec.size_ms + 1
    if isinstance(spec, Sliding):  # end = start + d; kept while start > time - retention
        return stream_time_ms - retention_ms + spec.max_difference_ms + 1
    return stream_time_ms - retention_ms


def retention_suffices(spec: WindowSpec, retention_ms: int) -> bool:
    """Whether windows kept ``retention_ms`` live until they close (and sliding windows until
    a later record copies them)."""
    return expire_bound(spec, 0, retention_ms) <= spec.expire_bound(0)


def check_retention(spec: WindowSpec, retention_ms: int) -> None:
    """A retention shorter than the spec's own would delete windows before they close: refused."""
    if not retention_suffices(spec, retention_ms):
        raise ConfigError(
            f"windows must be kept at least until they close: expires={retention_ms / 1000:g}s is "
            f"shorter than the {spec.retention_ms / 1000:g}s {type(spec).__name__} windows need"
        )


@dataclass
class Step(Generic[V, A]):
    """What one record (or one ``advance``) produced."""

    emitted: list[WindowResult[A]] = field(default_factory=list)
    late: LateRecord[V] | None = None


@dataclass
class _Window(Generic[A]):
    start: int
    end: int
    max_ts: int
    value: A


class WindowAggregator(Generic[V, A]):
    """Aggregates records into ``spec``'s windows, per key, in a ``WindowStore``."""

    def __init__(
        self,
        spec: WindowSpec,
        aggregation: Aggregation[V, A],
        store: WindowStore | None = None,
        *,
        emit: Emit = "update",
        retention_ms: int | None = None,
        late_counter: LateCounter | None = None,
        skip: Callable[[V], bool] | None = None,
    ) -> None:
        if emit not in ("update", "close", "none"):
            raise ConfigError(f"emit must be 'update' or 'close' (or 'none'), not {emit!r}")
        if retention_ms is not None:
            check_retention(spec, retention_ms)
        if isinstance(spec, Session) and aggregation.merger is None:
            raise ConfigError("session windows need an aggregation with a merger")
        self.spec = spec
        self.aggregation = aggregation
        self.store: WindowStore = store if store is not None else SortedMemoryStore()
        self.emit: Emit = emit
        self.retention_ms = retention_ms
        self.late_counter = late_counter
        # Values ignored entirely, stream time included: Kafka Streams' sliding aggregation
        # skips a record with a null value (the DSL passes that test).
        self.skip = skip
        # Over a committing store the progress keys wait in memory for the commit (one write
        # each per commit, not per record); another driver's waiting progress is written first
        # so that this one reads it.
        self._deferring = self.store if isinstance(self.store, DeferringStore) else None
        if self._deferring is not None:
            self._deferring.flush_deferred()
        raw = self.store.get(_STREAM_TIME_KEY)
        self.stream_time = StreamTime(decode_ms(raw) if raw is not None else -1)
        raw = self.store.get(_EMITTED_KEY)
        self._emitted_until = decode_ms(raw) if raw is not None else MIN_MS
        self._emitted_stamp = self.stream_time.ms  # the stream time when _emitted_until last moved
        self._written_stream_time = self.stream_time.ms  # the values the store was last given
        self._written_emitted = self._emitted_until
        self._progress_deferred = False  # the store will ask for the progress at its commit
        # Windows ending below this were deleted (in this process's life; from the start of
        # the index after a restart). Every window the driver creates is open, so ends at or
        # above the expire bound: the next expiry scan starts here, not at the index's start,
        # where the deleted entries' tombstones wait in the store's overlay for the commit.
        self._expired_until = MIN_MS
        # The ends of the indexed windows, one heap for closing and one for expiry: every
        # window in the index with an end at or above a scan's lower bound has its end in the
        # heap (an entry whose window went since may linger: it only costs a scan), so a step
        # of stream time that closes or expires nothing reads no range. Built from the index
        # at the first scan (not here: a driver made only to read never needs them).
        self._close_ends: list[int] | None = None
        self._expire_ends: list[int] = []
        # Sliding: the largest window start written (the window store's own stream time, from
        # which its retention counts); loaded with the heaps.
        self._store_time = -1
        # emit="close": the windows closed by this record's stream time are emitted at its
        # first window write (as the suppression buffer evicts on the first update it gets).
        self._scan_pending = False
        self._previous_stream_time = self.stream_time.ms  # before the record being processed

    # -- records --------------------------------------------------------------------------

    def process(self, key: bytes, ts_ms: int, value: V) -> Step[V, A]:
        """Aggregate one record; what it emitted, or why it is late."""
        step: Step[V, A] = Step()
        if self.skip is not None and self.skip(value):
            return step
        if ts_ms < 0:
            step.late = LateRecord(key, ts_ms, value, "negative-timestamp", self.stream_time.ms)
            if self.late_counter is not None:
                self.late_counter.late("negative-timestamp", ts_ms, self.stream_time.ms)
                self.late_counter.seen()
            return step
        self._previous_stream_time = self.stream_time.ms
        if self.stream_time.advance(ts_ms) and not self._progress_deferred:
            self._progress_moved()
        self._scan_pending = self.emit == "close"
        spec = self.spec
        if isinstance(spec, Hopping):
            reason = self._process_time(spec, key, ts_ms, value, step)
        elif isinstance(spec, Session):
            reason = self._process_session(spec, key, ts_ms, value, step)
        else:
            reason = self._process_sliding(spec, key, ts_ms, value, step)
        if reason is not None:
            step.late = LateRecord(key, ts_ms, value, reason, self.stream_time.ms)
            if self.late_counter is not None:
                self.late_counter.late(reason, ts_ms, self.stream_time.ms)
        if self.late_counter is not None:
            self.late_counter.seen()
        self._close_and_expire(step)
        return step

    def advance(self, stream_time_ms: int) -> Step[V, A]:
        """Move stream time forward without a record (e.g. the task's stream time moved):
        emits the windows this closes and deletes the ones it expires."""
        step: Step[V, A] = Step()
        if self.stream_time.advance(stream_time_ms):
            if not self._progress_deferred:
                self._progress_moved()
            self._close_and_expire(step)
        return step

    def _progress_moved(self) -> None:
        """Stream time or the emitted bound moved: written now, or deferred to the commit."""
        deferring = self._deferring
        if deferring is None:
            for key, value, _ts in self._progress_writes():
                assert value is not None
                self.store.put(key, value)
            return
        self._progress_deferred = True
        deferring.defer(self, self._progress_writes)

    def _progress_writes(self) -> list[DeferredWrite]:
        """The progress keys whose values changed since the store was last given them."""
        self._progress_deferred = False
        out: list[DeferredWrite] = []
        now = self.stream_time.ms
        if now != self._written_stream_time:
            self._written_stream_time = now
            out.append((_STREAM_TIME_KEY, encode_ms(now), now))
        emitted = self._emitted_until
        if emitted != self._written_emitted:
            self._written_emitted = emitted
            out.append((_EMITTED_KEY, encode_ms(emitted), self._emitted_stamp))
        return out

    def _process_time(
        self, spec: Hopping, key: bytes, ts: int, value: V, step: Step[V, A]
    ) -> str | None:
        now = self.stream_time.ms
        windows = spec.windows_for(ts)
        targets = [w for w in windows if not spec.closed(w[1], now)]
        if not targets:
            return "window-closed"
        if len(targets) < len(windows) and self.late_counter is not None:
            # Hopping: some of its windows had closed; it goes to the open ones only, so the
            # closed ones miss it: counted (not set aside: its open windows hold it).
            self.late_counter.late(PARTLY_LATE, ts, now)
        for start, end in targets:
            window_key = encode_window_key(key, start, end)  # encoded once for the get and puts
            window = self._get(key, start, end, window_key)
            if window is None:
                window = _Window(start, end, ts, self.aggregation.initializer())
                self._index(key, start, end, window_key)
            window.value = self.aggregation.adder(window.value, value)
            window.max_ts = max(window.max_ts, ts)
            self._put(key, window, step, window_key)
        return None

    def _process_session(
        self, spec: Session, key: bytes, ts: int, value: V, step: Step[V, A]
    ) -> str | None:
        # With the default retention the sessions kept are the open ones (a closed session is
        # deleted when it closes): they end within gap + grace of stream time and are more
        # than a gap apart, so this scan of the key's sessions starting up to ts + gap reads
        # only a few (with expires=, the ones of the retention).
        lo, hi = window_range(key, MIN_MS, ts + spec.gap_ms)
        found = [(w.start, w.end, w) for w in self._scan(key, lo, hi)]
        merge = merge_session(spec, found, ts, self.stream_time.ms, self._previous_stream_time, self.retention_ms)
        if merge.late is not None:
            return merge.late
        merger = self.aggregation.merger
        assert merger is not None  # checked in __init__
        agg = self.aggregation.initializer()
        max_ts = ts
        for start, end, window in merge.replaces:
            agg = merger(agg, window.value)
            max_ts = max(max_ts, window.max_ts)
            self._delete(key, start, end)
            # Kafka Streams removes (and, emitting updates, forwards a tombstone for) every
            # session merged, the one the record falls in included, unless the record alone
            # makes the merged session (KStreamSessionWindowAggregate.process).
            if (merge.start_ms, merge.end_ms) != (ts, ts) and self.emit == "update":
                step.emitted.append(WindowResult(key, start, end, None, window.max_ts))
        agg = self.aggregation.adder(agg, value)
        self._index(key, merge.start_ms, merge.end_ms)
        self._put(key, _Window(merge.start_ms, merge.end_ms, max_ts, agg), step)
        if session_hidden(spec, merge.end_ms, self.stream_time.ms, self.retention_ms):
            # Made past the retention (with the default, closed: it ends at stream time - gap -
            # grace): emitted, and no later record sees it (the session store hides it already).
            self._delete(key, merge.start_ms, merge.end_ms)
        return None

    def _process_sliding(
        self, spec: Sliding, key: bytes, ts: int, value: V, step: Step[V, A]
    ) -> str | None:
        now = self.stream_time.ms
        if sliding_late(spec, ts, now):
            return "window-closed"
        if self._close_ends is None:
            self._load_ends()  # and the store's time
        retention = spec.retention_ms if self.retention_ms is None else self.retention_ms
        lo, hi = window_range(key, *fetch_bounds(spec, ts, self._store_time, retention))
        # (start -> (max_ts, aggregate bytes)): each write starts from its source as read
        # before this record, never from a value another write of this record changed or shares.
        read: dict[int, tuple[int, bytes]] = {}
        for data_key, stored in list(self.store.range(_DATA + lo, _DATA + hi)):
            read[decode_window_key(data_key[1:])[1]] = (_MAX_TS.unpack(stored[:8])[0], stored[8:])
        ops = plan_sliding(spec, ts, [(start, max_ts) for start, (max_ts, _) in read.items()], now)
        d = spec.max_difference_ms
        for op in ops:
            start = op.start_ms
            if op.source is None:
                window = _Window(start, start + d, ts, self.aggregation.initializer())
            else:
                max_ts, aggregate = read[op.source]
                window = _Window(start, start + d, max_ts, self.aggregation.deserialize(aggregate))
            if op.add_record:
                window.value = self.aggregation.adder(window.value, value)
                window.max_ts = max(window.max_ts, ts)
            if start not in read:
                self._index(key, start, start + d)
            self._put(key, window, step)
            if start > self._store_time:
                self._store_time = start
        bound = expire_bound(spec, self._store_time, self.retention_ms)
        for op in ops:  # written past the retention (d = 0): the store hides it at once
            if op.start_ms + d < bound:
                self._delete(key, op.start_ms, op.start_ms + d)
        return None

    # -- closing and expiry ---------------------------------------------------------------

    def _close_and_expire(self, step: Step[V, A]) -> None:
        now = self.stream_time.ms
        if now < 0:
            return
        if self._close_ends is None:
            self._load_ends()
        if self.emit == "close":
            self._scan_pending = False
            self._close(step)
        time_ms = self._store_time if isinstance(self.spec, Sliding) else now
        bound = expire_bound(self.spec, time_ms, self.retention_ms)
        expired_until = self._expired_until
        if bound <= expired_until:
            return
        self._expired_until = bound
        expire_ends = self._expire_ends
        if not expire_ends or expire_ends[0] >= bound:
            return
        lo = _BY_END + encode_ms(expired_until)
        while expire_ends and expire_ends[0] < bound:
            heapq.heappop(expire_ends)
        for index_key, _ in list(self.store.range(lo, _BY_END + encode_ms(bound))):
            key, start, end = decode_window_key(index_key[9:])
            self._delete(key, start, end)

    def _close(self, step: Step[V, A]) -> None:
        """emit="close": emit the windows stream time closed since the last call."""
        now = self.stream_time.ms
        close_ends = self._close_ends
        if close_ends is None:
            close_ends = self._load_ends()
        bound = self.spec.close_bound(now)
        if bound > self._emitted_until:
            if close_ends and close_ends[0] < bound:
                while close_ends and close_ends[0] < bound:
                    heapq.heappop(close_ends)
                lo = _BY_END + encode_ms(self._emitted_until)
                for index_key, _ in list(self.store.range(lo, _BY_END + encode_ms(bound))):
                    key, start, end = decode_window_key(index_key[9:])
                    window = self._get(key, start, end)
                    if window is not None:
                        step.emitted.append(WindowResult(key, start, end, window.value, window.max_ts))
            self._emitted_until = bound
            self._emitted_stamp = now
            if not self._progress_deferred:
                self._progress_moved()

    def _load_ends(self) -> list[int]:
        """Fill the heaps of window ends from the index (the store with its unstored writes)."""
        ends = [decode_ms(index_key[1:9]) for index_key, _ in self.store.range(_BY_END, _BY_END_STOP)]
        if ends and isinstance(self.spec, Sliding):
            # The newest window is never the one expiry deletes: its start is the store's time.
            self._store_time = max(self._store_time, max(ends) - self.spec.max_difference_ms)
        heapq.heapify(ends)
        self._expire_ends = ends
        self._close_ends = list(ends) if self.emit == "close" else []
        return self._close_ends

    # -- reading --------------------------------------------------------------------------

    def windows(self, key: bytes | None = None) -> Iterator[WindowResult[A]]:
        """The stored windows (of ``key``, or of every key), in order of key and start."""
        if key is None:
            lo, hi = _DATA, _BY_END
        else:
            prefix = key_prefix(key)
            lo, hi = _DATA + prefix, _DATA + prefix[:-1] + b"\x02"
        for data_key, raw in self.store.range(lo, hi):
            k, start, end = decode_window_key(data_key[1:])
            yield WindowResult(k, start, end, self.aggregation.deserialize(raw[8:]))

    def fetch(self, key: bytes, start_ms: int, end_ms: int) -> A | None:
        """The aggregate of one window, if stored."""
        window = self._get(key, start_ms, end_ms)
        return None if window is None else window.value

    def window(self, key: bytes, start_ms: int, end_ms: int) -> WindowResult[A] | None:
        """One stored window (``fetch``, telling a missing window from a ``None`` aggregate)."""
        window = self._get(key, start_ms, end_ms)
        return None if window is None else WindowResult(key, start_ms, end_ms, window.value)

    def remove(self, key: bytes, start_ms: int, end_ms: int) -> bool:
        """Delete one window (it is then never emitted on close); whether it was stored."""
        if self._get(key, start_ms, end_ms) is None:
            return False
        self._delete(key, start_ms, end_ms)
        return True

    # -- store access ---------------------------------------------------------------------

    def _get(self, key: bytes, start: int, end: int, window_key: bytes | None = None) -> _Window[A] | None:
        raw = self.store.get(_DATA + (window_key or encode_window_key(key, start, end)))
        if raw is None:
            return None
        return _Window(start, end, _MAX_TS.unpack(raw[:8])[0], self.aggregation.deserialize(raw[8:]))

    def _scan(self, key: bytes, lo: bytes, hi: bytes) -> list[_Window[A]]:
        found = []
        for data_key, raw in list(self.store.range(_DATA + lo, _DATA + hi)):
            _k, start, end = decode_window_key(data_key[1:])
            value = self.aggregation.deserialize(raw[8:])
            found.append(_Window(start, end, _MAX_TS.unpack(raw[:8])[0], value))
        return found

    def _put(self, key: bytes, window: _Window[A], step: Step[V, A], window_key: bytes | None = None) -> None:
        raw = _MAX_TS.pack(window.max_ts) + self.aggregation.serialize(window.value)
        self.store.put(_DATA + (window_key or encode_window_key(key, window.start, window.end)), raw)
        if self.emit == "update":
            step.emitted.append(WindowResult(key, window.start, window.end, window.value, window.max_ts))
        elif self.emit == "close":
            # Written after it closed: the suppression buffer emits it again at once, before
            # the windows closing now (they end later).
            if window.end < self._emitted_until:
                step.emitted.append(WindowResult(key, window.start, window.end, window.value, window.max_ts))
            if self._scan_pending:
                self._scan_pending = False
                self._close(step)

    def _index(self, key: bytes, start: int, end: int, window_key: bytes | None = None) -> None:
        self.store.put(_BY_END + encode_ms(end) + (window_key or encode_window_key(key, start, end)), b"")
        if self._close_ends is not None:  # else the heaps are loaded from the index, with it
            if self.emit == "close":
                heapq.heappush(self._close_ends, end)
            heapq.heappush(self._expire_ends, end)

    def _delete(self, key: bytes, start: int, end: int) -> None:
        window_key = encode_window_key(key, start, end)
        self.store.delete(_DATA + window_key)
        self.store.delete(_BY_END + encode_ms(end) + window_key)


@dataclass
class RunResult(Generic[V, A]):
    """Everything ``run`` saw: the windows stored at the end, the emitted windows in order and
    the late records in order."""

    windows: list[WindowResult[A]]
    emitted: list[WindowResult[A]]
    late: list[LateRecord[V]]
    stream_time_ms: int


def run(
    spec: WindowSpec,
    aggregation: Aggregation[V, A],
    records: Iterable[tuple[bytes, int, V]],
    *,
    emit: Emit = "update",
    store: WindowStore | None = None,
) -> RunResult[V, A]:
    """Aggregate ``records`` ``(key, ts_ms, value)`` in order with a fresh aggregator.

    >>> from streamkit.windows.spec import Tumbling
    >>> count = Aggregation(lambda: 0, lambda n, _v: n + 1, lambda n: str(n).encode(), int)
    >>> result = run(Tumbling(10), count, [(b"a", 1000, None), (b"a", 2000, None)])
    >>> [(w.start_ms, w.value) for w in result.windows]
    [(0, 2)]
    """
    aggregator = WindowAggregator(spec, aggregation, store, emit=emit)
    emitted: list[WindowResult[A]] = []
    late: list[LateRecord[V]] = []
    for key, ts, value in records:
        step = aggregator.process(key, ts, value)
        emitted.extend(step.emitted)
        if step.late is not None:
            late.append(step.late)
    return RunResult(list(aggregator.windows()), emitted, late, aggregator.stream_time.ms)
