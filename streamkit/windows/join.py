"""The windowed stream-stream join driver: records of two sides in, joined pairs and late records out.

``WindowJoin`` pairs records of the same key from the left and the right side whose
timestamps differ by at most ``within`` (Kafka Streams' ``JoinWindows`` with equal before and
after), record by record in arrival order, over a ``WindowStore``; it does no I/O of its own
and reads no clock. The engine wraps it per task with a table partition's store (so the join
state has a changelog and recovers from it); the tests drive it with ``SortedMemoryStore``.
Keys are bytes (the engine serializes them); values cross the store as bytes through each
side's codec. The driver returns the pairs, the engine applies the user's joiner.

Rules (Kafka Streams 4.4, ``KStreamKStreamJoin`` and its window stores):

* stream time is the largest timestamp seen on either side (the join's shared time tracker);
  each side's store has a time of its own, the largest timestamp stored on that side;
* a record pairs with every record of the other side with the same key and a timestamp within
  ``within`` of its own that the other side's store still returns: the store keeps a record
  while ``ts > side time - retention`` (retention ``2 * within + grace``, the join window's
  size plus grace; ``AbstractRocksDBSegmentedBytesStore.getActualFrom``), duplicates included,
  in order of their timestamp and arrival; each pair is emitted at once with timestamp
  ``max(ts_left, ts_right)``. No record is dropped for being late: however late, it pairs
  with what the other side still holds, and is stored (hidden at once if past its own side's
  retention; such a record of a side that is not outer, that paired with nothing, is reported
  late, ``window-closed``: nothing will ever pair with it);
* ``how="left"`` also emits each left record that paired with nothing as ``(left, None)``,
  ``"outer"`` each such left or right record (``(None, right)``), with the record's own
  timestamp: at once when ``ts + within < stream time`` (its window is over as it arrives),
  else once ``stream time > ts + within + grace``, never before (no spurious results),
  unless a record of the other side pairs with it first. The unpaired records waiting are
  looked at only when a record at stream time arrives (``emitNonJoinedOuterRecords``), before
  that record's pairs, in order of timestamp, side (right first), key and arrival, and only
  when the smallest timestamp the join remembers (``minTime``: the last record looked at by the
  previous look, or a smaller one put since) is past; so a closed record may wait longer, and
  pair meanwhile, exactly as in Kafka Streams. (Kafka Streams also throttles the look by the
  wall clock, ``__emit.interval.ms.kstreams.outer.join.spurious.results.fix__``, 1 s by
  default; event time alone decides here, as with that interval at 0);
* a record stays joinable until its side's store hides it, so a record emitted unpaired can
  still pair with an out-of-order record of the other side.

Store layout (all keys of one join task share one store; *wk* is
``keys.encode_window_key(key, ts, seq)``, *side* ``b"L"`` or ``b"R"``)::

    0x00 "progress"                          -> 40 bytes: stream time, the next arrival
                                                number, the left and right sides' times,
                                                minTime (MAX_MS: none) (each
                                                keys.encode_ms; 16 bytes in earlier stores:
                                                the sides' times are stream time then)
    0x01 side wk                             -> the record's value bytes
    0x05 ts(8) order(1) wk                   -> the record's value bytes (unpaired records
                                                that may be emitted unpaired; order 0x00
                                                right, 0x01 left; the value is kept here as
                                                Kafka Streams' outer-join store keeps it, as
                                                the record may expire before it is emitted)

The records by time (for expiry) are kept in memory, not in the store: a heap per side of
``(ts, data key)`` filled from the store's records at the first record a driver processes,
then per record stored (so a record costs one write to the store and its changelog, not two).
Stores written before this layout also hold an index by time under 0x02 (deleted at that
first record) and unpaired marks under 0x03 (``ts seq side wk``: rewritten under 0x05 when
the driver starts).

*seq* numbers stored records in arrival order, so duplicates (same key, side and timestamp)
are kept apart and come out in the order they arrived. Progress lives in the store, so a
restored store carries on with the same answers (a deliberate difference: Kafka Streams keeps
its shared stream time and ``minTime`` in memory only, so a restarted task starts them again
from the next record, and may emit unpaired records at other times than an uninterrupted one). Over a store that commits (``store.DeferringStore``: a table
partition) the driver keeps it in memory and the store takes it once per commit, with that
commit's records, stamped with the timestamp of the last record stored; over any other store
it is written with each record.

>>> join = WindowJoin(10_000, 0, "left")
>>> join.process("left", b"order-1", 1_000, b"o1").results
[]
>>> join.process("right", b"order-1", 8_000, b"p1").results
[JoinResult(key=b'order-1', ts_ms=8000, left=b'o1', right=b'p1')]
>>> join.process("left", b"order-2", 9_000, b"o2").results
[]
>>> [r.right for r in join.process("left", b"order-3", 19_001, b"o3").results]
[None]
>>> [(r.left, r.right) for r in join.process("right", b"order-2", 100, b"p0").results]  # late, not dropped
[(b'o2', b'p0')]
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from streamkit._core.errors import ConfigError
from streamkit.windows.aggregate import LateRecord
from streamkit.windows.keys import (
    MAX_MS,
    decode_ms,
    decode_window_key,
    encode_ms,
    encode_two_ms,
    window_range,
)
from streamkit.windows.store import DeferredWrite, DeferringStore, SortedMemoryStore, WindowStore
from streamkit.windows.streamtime import StreamTime

Side = Literal["left", "right"]
JoinKind = Literal["inner", "left", "outer"]
JOIN_KINDS: tuple[str, ...] = ("inner", "left", "outer")

_META = b"\x00"
_PROGRESS_KEY = _META + b"progress"
_DATA = b"\x01"
_BY_TIME = b"\x02"  # an index by time in stores of an earlier layout (deleted when read)
_OLD_UNPAIRED = b"\x03"  # unpaired marks of an earlier layout (ts seq side wk: rewritten)
_OLD_UNPAIRED_END = b"\x04"
_MARKS = b"\x05"  # unpaired marks: ts(8) order(1) wk
_MARKS_END = b"\x06"
_SIDE_BYTE = {"left": b"L", "right": b"R"}
_SIDE_OF = {b"L": "left", b"R": "right"}
# Kafka Streams' outer-join store orders records of one timestamp right side first
# (TimestampedKeyAndJoinSide: its side flag is true for the left).
_ORDER_BYTE = {"left": b"\x01", "right": b"\x00"}
_ORDER_OF: dict[bytes, Side] = {b"\x01": "left", b"\x00": "right"}
_OTHER: dict[str, Side] = {"left": "right", "right": "left"}


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Codec:
    """How one side's values cross the store: ``dumps(value) -> bytes``, ``loads(bytes)``.
    The default keeps bytes values as they are."""

    dumps: Callable[[Any], bytes] = _identity
    loads: Callable[[bytes], Any] = _identity


@dataclass(frozen=True)
class JoinResult:
    """One output of the join: a pair, or an unpaired record (the other side ``None``)."""

    key: bytes
    ts_ms: int
    left: Any
    right: Any


@dataclass
class JoinStep:
    """What one record produced: results in emit order, or why it was late."""

    results: list[JoinResult] = field(default_factory=list)
    late: LateRecord[Any] | None = None


class WindowJoin:
    """Joins two sides' records within ``within_ms`` of each other, per key, in a ``WindowStore``."""

    def __init__(
        self,
        within_ms: int,
        grace_ms: int = 0,
        how: str = "inner",
        store: WindowStore | None = None,
        *,
        left: Codec | None = None,
        right: Codec | None = None,
    ) -> None:
        if how not in JOIN_KINDS:
            raise ConfigError(f"a stream-stream join is one of {JOIN_KINDS}, not {how!r}")
        if within_ms < 0 or grace_ms < 0:
            raise ConfigError(f"a join window needs within >= 0 and grace >= 0, not {within_ms} ms and {grace_ms} ms")
        self.within_ms = within_ms
        self.grace_ms = grace_ms
        self.how = how
        self.retention_ms = 2 * within_ms + grace_ms  # each side's store: window size + grace
        self.store: WindowStore = store if store is not None else SortedMemoryStore()
        self._codecs = {"left": left or Codec(), "right": right or Codec()}
        # The sides whose unpaired records are emitted with None on the other side.
        self._outer_sides = {"inner": (), "left": ("left",), "outer": ("left", "right")}[how]
        # Per side, what a record of it needs (looked up once here, not per record): its side
        # byte, the other side's, the other side's decoder, its encoder, whether the other
        # side's unpaired marks are cleared when paired, whether it is an outer side.
        self._plans: dict[str, tuple[bytes, bytes, Callable[[bytes], Any], Callable[[Any], bytes], bool, bool]] = {
            side: (
                _SIDE_BYTE[side], _SIDE_BYTE[_OTHER[side]], self._codecs[_OTHER[side]].loads,
                self._codecs[side].dumps, _OTHER[side] in self._outer_sides, side in self._outer_sides,
            )
            for side in ("left", "right")
        }
        # Over a committing store the progress waits in memory for the commit (one write per
        # commit, not per record); another driver's waiting progress is written first so that
        # this one reads it.
        self._deferring = self.store if isinstance(self.store, DeferringStore) else None
        if self._deferring is not None:
            self._deferring.flush_deferred()
        raw = self.store.get(_PROGRESS_KEY)
        self.stream_time = StreamTime(decode_ms(raw[:8]) if raw is not None else -1)
        self._seq = decode_ms(raw[8:16]) if raw is not None else 0
        if raw is not None and len(raw) >= 40:
            self.side_time_ms = {"left": decode_ms(raw[16:24]), "right": decode_ms(raw[24:32])}
            min_time: int | None = decode_ms(raw[32:40])
        else:  # a store of the earlier layout kept only stream time: the sides' bound
            self.side_time_ms = {"left": self.stream_time.ms, "right": self.stream_time.ms}
            min_time = None
        # KStreamImplJoin.TimeTracker.minTime: None stands for its Long.MAX_VALUE (after a look
        # found nothing, or at start), which lets the next look run. Kept with the progress,
        # so that a restarted join looks when an uninterrupted one would.
        self._min_time = None if min_time == MAX_MS else min_time
        self._progress_deferred = False  # the store will ask for the progress at its commit
        self._progress_stamp = 0  # the timestamp of the last record stored
        # Expiry runs per side when it can drop at least this much of the side's time at once
        # (state stays under retention + step; the stores' retention, not expiry, decides what
        # a record sees).
        self._expire_step_ms = max(1, self.retention_ms // 4)
        self._expired_below = {side: t - self.retention_ms + 1 for side, t in self.side_time_ms.items()}
        # Every stored record as (ts, data key), smallest first, per side: expiry pops from
        # them. Loaded from the store at the first record (None: not yet).
        self._by_time: dict[str, list[tuple[int, bytes]]] | None = None
        for mark, _ in list(self.store.range(_OLD_UNPAIRED, _OLD_UNPAIRED_END)):
            # ts(8) seq(8) side(1) wk -> ts(8) order(1) wk, with the record's value
            raw = self.store.get(_DATA + mark[17:])
            if raw is not None:
                self.store.put(_MARKS + mark[1:9] + _ORDER_BYTE[_SIDE_OF[mark[17:18]]] + mark[18:], raw)
            self.store.delete(mark)

    # -- records --------------------------------------------------------------------------

    def process(self, side: Side, key: bytes, ts_ms: int, value: Any) -> JoinStep:
        """Join one record of ``side``; what it emitted, or why it is late."""
        step = JoinStep()
        plan = self._plans.get(side)
        if plan is None:
            raise ConfigError(f"a join side is 'left' or 'right', not {side!r}")
        side_byte, other_byte, other_loads, dumps, unpair_other, outer = plan
        stream_time = self.stream_time
        if ts_ms < 0:
            step.late = LateRecord(key, ts_ms, value, "negative-timestamp", stream_time.ms)
            return step
        within = self.within_ms
        by_time = self._by_time
        if by_time is None:
            by_time = self._load_by_time()
        stream_time.advance(ts_ms)
        now = stream_time.ms
        if self._outer_sides and ts_ms == now:
            self._emit_closed(step.results)
        # The other side's records in [ts - within, ts + within] its store still returns.
        other_side = _OTHER[side]
        lo_ms = max(ts_ms - within, self.side_time_ms[other_side] - self.retention_ms + 1)
        lo, hi = window_range(key, lo_ms, ts_ms + within)
        paired = False
        store = self.store
        results = step.results
        is_left = side == "left"
        for data_key, raw in list(store.range(_DATA + other_byte + lo, _DATA + other_byte + hi)):
            paired = True
            other_ts = decode_ms(data_key[-16:-8])  # the window key's start: the record's time
            other_value = other_loads(raw)
            if is_left:
                results.append(JoinResult(key, max(ts_ms, other_ts), value, other_value))
            else:
                results.append(JoinResult(key, max(ts_ms, other_ts), other_value, value))
            if unpair_other:
                mark = _MARKS + data_key[-16:-8] + _ORDER_BYTE[other_side] + data_key[2:]
                if store.get(mark) is not None:
                    store.delete(mark)
        seq = self._seq
        self._seq = seq + 1
        if ts_ms > self.side_time_ms[side]:
            self.side_time_ms[side] = ts_ms
        times = encode_two_ms(ts_ms, seq)
        wk = lo[: len(lo) - 8] + times  # the key's prefix (the range's lower bound less its time)
        data_key = _DATA + side_byte + wk
        value_bytes = dumps(value)
        hidden = ts_ms <= self.side_time_ms[side] - self.retention_ms
        if not hidden:  # (a hidden one Kafka Streams stores, but its store never returns it)
            store.put(data_key, value_bytes)
            heapq.heappush(by_time[side], (ts_ms, data_key))
        if not paired:
            if outer:
                if ts_ms + within < now:  # its window is over already: unpaired at once
                    results.append(JoinResult(key, ts_ms, value, None) if is_left else JoinResult(key, ts_ms, None, value))
                else:
                    store.put(_MARKS + times[:8] + _ORDER_BYTE[side] + wk, value_bytes)
                    if self._min_time is None or ts_ms < self._min_time:
                        self._min_time = ts_ms
            elif hidden:
                # Paired with nothing, and its own store hides it already: no record pairs with it.
                step.late = LateRecord(key, ts_ms, value, "window-closed", now)
        self._progress_moved(ts_ms)
        self._expire(side)
        return step

    def skip(self, ts_ms: int) -> None:
        """A record the join takes no part in (no key or no value) still moves stream time:
        ``KStreamKStreamJoin.process`` advances its time tracker before it skips the record."""
        if ts_ms >= 0 and self.stream_time.advance(ts_ms):
            self._progress_moved(ts_ms)

    def is_outer(self, side: Side) -> bool:
        """Whether ``side``'s records that pair with nothing are emitted unpaired (a record of
        it with a value but no key is, at once, as Kafka Streams forwards it)."""
        return side in self._outer_sides

    def _progress_moved(self, ts_ms: int) -> None:
        """Write the progress now, or have the committing store take it at its commit."""
        if self._deferring is None:
            self.store.put(_PROGRESS_KEY, self._progress_value())
        else:
            self._progress_stamp = ts_ms
            if not self._progress_deferred:
                self._progress_deferred = True
                self._deferring.defer(self, self._progress_writes)

    def _progress_value(self) -> bytes:
        min_time = MAX_MS if self._min_time is None else self._min_time
        return (
            encode_ms(self.stream_time.ms) + encode_ms(self._seq)
            + encode_ms(self.side_time_ms["left"]) + encode_ms(self.side_time_ms["right"])
            + encode_ms(min_time)
        )

    def _progress_writes(self) -> list[DeferredWrite]:
        """The progress as the store takes it at a commit (a record was stored since the last)."""
        self._progress_deferred = False
        return [(_PROGRESS_KEY, self._progress_value(), self._progress_stamp)]

    def _emit_closed(self, out: list[JoinResult]) -> None:
        """``emitNonJoinedOuterRecords``: emit the unpaired records whose window closed, in
        order of timestamp, side (right first), key and arrival, when ``minTime`` allows."""
        now = self.stream_time.ms
        span = self.within_ms + self.grace_ms  # each side looks within_ms (before = after)
        if self._min_time is not None and self._min_time + span >= now:
            return
        self._min_time = None
        left_open = right_open = False
        emitted: list[tuple[bytes, bytes]] = []
        for mark, raw in self.store.range(_MARKS, _MARKS_END):
            ts = decode_ms(mark[1:9])
            self._min_time = ts  # as Kafka Streams: the last record looked at
            if left_open and right_open:
                break
            side = _ORDER_OF[mark[9:10]]
            if ts + span >= now:  # still open: not emitted yet
                if side == "left":
                    left_open = True
                else:
                    right_open = True
                continue
            emitted.append((mark, raw))
        for mark, raw in emitted:
            side = _ORDER_OF[mark[9:10]]
            key, ts, _seq = decode_window_key(mark[10:])
            self.store.delete(mark)
            value = self._codecs[side].loads(raw)
            out.append(JoinResult(key, ts, value, None) if side == "left" else JoinResult(key, ts, None, value))

    def _expire(self, side: str) -> None:
        """Drop the records of ``side`` its store hides (``ts <= side time - retention``), in
        steps (their unpaired marks, which hold their values, wait on)."""
        below = self.side_time_ms[side] - self.retention_ms + 1
        if below - self._expired_below[side] < self._expire_step_ms:
            return
        assert self._by_time is not None  # loaded before any record is stored
        heap = self._by_time[side]
        while heap and heap[0][0] < below:
            self.store.delete(heapq.heappop(heap)[1])
        self._expired_below[side] = below

    def _load_by_time(self) -> dict[str, list[tuple[int, bytes]]]:
        """The heaps of stored records by time, from the store (its unstored writes included)."""
        by_time: dict[str, list[tuple[int, bytes]]] = {"left": [], "right": []}
        for data_key, _ in self.store.range(_DATA, _BY_TIME):
            by_time[_SIDE_OF[data_key[1:2]]].append((decode_ms(data_key[-16:-8]), data_key))
        for side, heap in by_time.items():
            heapq.heapify(heap)
            if heap:
                # A restored store may hold records the last expiry step left (below the bound
                # the progress implies): expiry then counts its step from the oldest one.
                self._expired_below[side] = min(self._expired_below[side], heap[0][0])
        for old_index_key, _ in list(self.store.range(_BY_TIME, _OLD_UNPAIRED)):  # an earlier layout's
            self.store.delete(old_index_key)
        self._by_time = by_time
        return by_time

    # -- reading --------------------------------------------------------------------------

    def stored(self) -> Iterator[tuple[Side, bytes, int, Any]]:
        """The records held for joining: ``(side, key, ts_ms, value)`` in order of side, key,
        timestamp and arrival."""
        for data_key, raw in self.store.range(_DATA, _BY_TIME):
            side: Side = "left" if data_key[1:2] == b"L" else "right"
            key, ts, _seq = decode_window_key(data_key[2:])
            yield side, key, ts, self._codecs[side].loads(raw)

    def unpaired(self) -> Iterator[tuple[Side, bytes, int]]:
        """The records waiting for their window to close to be emitted unpaired, in emit order."""
        for mark, _ in self.store.range(_MARKS, _MARKS_END):
            key, ts, _seq = decode_window_key(mark[10:])
            yield _ORDER_OF[mark[9:10]], key, ts


@dataclass
class JoinRun:
    """Everything ``run_join`` saw: the results and late records in order."""

    results: list[JoinResult]
    late: list[LateRecord[Any]]
    stream_time_ms: int


def run_join(
    within_ms: int,
    grace_ms: int,
    how: str,
    records: Iterable[tuple[Side, bytes, int, Any]],
    store: WindowStore | None = None,
) -> JoinRun:
    """Join ``records`` ``(side, key, ts_ms, value)`` in order with a fresh driver.

    >>> run = run_join(5, 0, "inner", [("left", b"k", 10, b"a"), ("right", b"k", 14, b"b")])
    >>> [(r.ts_ms, r.left, r.right) for r in run.results]
    [(14, b'a', b'b')]
    """
    join = WindowJoin(within_ms, grace_ms, how, store)
    results: list[JoinResult] = []
    late: list[LateRecord[Any]] = []
    for side, key, ts, value in records:
        step = join.process(side, key, ts, value)
        results.extend(step.results)
        if step.late is not None:
            late.append(step.late)
    return JoinRun(results, late, join.stream_time.ms)
