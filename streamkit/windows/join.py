"""The windowed stream-stream join driver: records of two sides in, joined pairs and late records out.

``WindowJoin`` pairs records of the same key from the left and the right side whose
timestamps differ by at most ``within`` (Kafka Streams' ``JoinWindows`` with equal before and
after), record by record in arrival order, over a ``WindowStore``; it does no I/O of its own
and reads no clock. The engine wraps it per task with a table partition's store (so the join
state has a changelog and recovers from it); the tests drive it with ``SortedMemoryStore``.
Keys are bytes (the engine serializes them); values cross the store as bytes through each
side's codec. The driver returns the pairs, the engine applies the user's joiner.

Rules (Kafka Streams 3.1+, stream time shared by both sides of a task):

* stream time is the largest timestamp seen on either side;
* a record's join window is ``[ts - within, ts + within]``; it *closes* when stream time
  passes ``ts + within + grace`` (``stream_time > ts + within + grace``): until then a record
  of the other side, even out of order, may still arrive and pair with it;
* a record is *late* when its window had closed before it arrived (or its timestamp is
  negative): it pairs with nothing, is not stored, and is reported (the engine sends it to
  ``<app>-late``);
* a record pairs with every stored record of the other side with the same key and a
  timestamp within ``within`` of its own, duplicates included, in order of their timestamp
  and arrival; each pair is emitted at once with timestamp ``max(ts_left, ts_right)``;
* ``how="left"`` also emits each left record that paired with nothing as ``(left, None)``,
  ``"outer"`` each such left or right record (``(None, right)``), with the record's own
  timestamp, once its window closed and never before (no spurious results). These come
  before the pairs of the record that moved stream time, in order of timestamp and arrival;
* as in Kafka Streams, a record stays joinable until it expires, so a record emitted unpaired
  can still pair with an out-of-order record of the other side whose own window is open (a
  right record at ``ts + within`` is not late until stream time passes
  ``ts + 2 * within + grace``). Records expire, and leave the store, when stream time passes
  ``ts + 2 * within + grace`` (Kafka Streams' retention: before + after + grace), in steps
  of a quarter of that; no record that is not late can pair with an expired one, so state
  stays bounded without changing answers.

Store layout (all keys of one join task share one store; *wk* is
``keys.encode_window_key(key, ts, seq)``, *side* ``b"L"`` or ``b"R"``)::

    0x00 "progress"                          -> 16 bytes: stream time, the next arrival
                                                number (each keys.encode_ms)
    0x01 side wk                             -> the record's value bytes
    0x03 ts(8) seq(8) side wk                -> b""  (unpaired records that may be emitted
                                                      unpaired: left for left joins, both
                                                      sides for outer joins)

The records by time (for expiry) are kept in memory, not in the store: a heap of ``(ts, data
key)`` filled from the store's records at the first record a driver processes, then per record
stored (so a record costs one write to the store and its changelog, not two). Stores written
before this layout also hold an index by time under 0x02: it is deleted at that first record.

*seq* numbers stored records in arrival order, so duplicates (same key, side and timestamp)
are kept apart and come out in the order they arrived. Progress lives in the store, so a
restored store carries on with the same answers. Over a store that commits
(``store.DeferringStore``: a table partition) the driver keeps it in memory and the store
takes it once per commit, with that commit's records, stamped with the timestamp of the last
record stored; over any other store it is written with each record.

>>> join = WindowJoin(10_000, 0, "left")
>>> join.process("left", b"order-1", 1_000, b"o1").results
[]
>>> join.process("right", b"order-1", 8_000, b"p1").results
[JoinResult(key=b'order-1', ts_ms=8000, left=b'o1', right=b'p1')]
>>> join.process("left", b"order-2", 9_000, b"o2").results
[]
>>> [r.right for r in join.process("left", b"order-3", 19_001, b"o3").results]
[None]
>>> join.process("right", b"order-2", 100, b"p0").late.reason
'window-closed'
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from streamkit._core.errors import ConfigError
from streamkit.windows.aggregate import LateRecord
from streamkit.windows.keys import (
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
_UNPAIRED = b"\x03"
_UNPAIRED_END = b"\x04"
_SIDE_BYTE = {"left": b"L", "right": b"R"}
_SIDE_OF = {b"L": "left", b"R": "right"}
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
        self.store: WindowStore = store if store is not None else SortedMemoryStore()
        self._codecs = {"left": left or Codec(), "right": right or Codec()}
        # The sides whose unpaired records are emitted with None on the other side.
        self._outer_sides = {"inner": (), "left": ("left",), "outer": ("left", "right")}[how]
        # Per side, what a record of it needs (looked up once here, not per record): its side
        # byte, the other side's, the other side's decoder, its encoder, whether the other
        # side's unpaired marks are cleared when paired, whether its own are set when not.
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
        self._seq = decode_ms(raw[8:]) if raw is not None else 0
        self._progress_deferred = False  # the store will ask for the progress at its commit
        self._progress_stamp = 0  # the timestamp of the last record stored
        # Where the last close and expiry scans stopped: everything below was handled then,
        # and no record can come below them since, so the next scans start there.
        span = within_ms + grace_ms
        self._closed_below = self.stream_time.ms - span
        self._expired_below = self._closed_below - within_ms
        # Expiry runs when it can drop at least this much of stream time at once (state stays
        # under retention + step; answers do not depend on when expired records leave).
        self._expire_step_ms = max(1, (2 * within_ms + grace_ms) // 4)
        # Every stored record as (ts, data key), smallest first: expiry pops from it. Loaded from
        # the store at the first record (None: not yet).
        self._by_time: list[tuple[int, bytes]] | None = None
        # Timestamps of the unpaired marks not yet closed (a mark paired since may linger:
        # it only costs a scan), so an advance that closes none reads nothing.
        self._marks: list[int] = []
        if self._outer_sides:
            for mark, _ in self.store.range(_UNPAIRED, _UNPAIRED_END):
                self._marks.append(decode_ms(mark[1:9]))
            heapq.heapify(self._marks)

    # -- records --------------------------------------------------------------------------

    def process(self, side: Side, key: bytes, ts_ms: int, value: Any) -> JoinStep:
        """Join one record of ``side``; what it emitted, or why it is late."""
        step = JoinStep()
        plan = self._plans.get(side)
        if plan is None:
            raise ConfigError(f"a join side is 'left' or 'right', not {side!r}")
        side_byte, other_byte, other_loads, dumps, unpair_other, unpair_own = plan
        stream_time = self.stream_time
        if ts_ms < 0:
            step.late = LateRecord(key, ts_ms, value, "negative-timestamp", stream_time.ms)
            return step
        within = self.within_ms
        if ts_ms + within + self.grace_ms < stream_time.ms:
            step.late = LateRecord(key, ts_ms, value, "window-closed", stream_time.ms)
            return step
        by_time = self._by_time
        if by_time is None:
            by_time = self._load_by_time()
        if stream_time.advance(ts_ms):
            self._emit_closed(step.results)
        lo, hi = window_range(key, ts_ms - within, ts_ms + within)
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
                mark = _UNPAIRED + data_key[-16:] + data_key[1:]  # ts, seq, side, wk
                if store.get(mark) is not None:
                    store.delete(mark)
        seq = self._seq
        self._seq = seq + 1
        if self._deferring is None:
            store.put(_PROGRESS_KEY, self._progress_value())
        else:
            self._progress_stamp = ts_ms
            if not self._progress_deferred:
                self._progress_deferred = True
                self._deferring.defer(self, self._progress_writes)
        times = encode_two_ms(ts_ms, seq)
        wk = lo[: len(lo) - 8] + times  # the key's prefix (the range's lower bound less its time)
        data_key = _DATA + side_byte + wk
        store.put(data_key, dumps(value))
        heapq.heappush(by_time, (ts_ms, data_key))
        if unpair_own and not paired:
            store.put(_UNPAIRED + times + side_byte + wk, b"")
            heapq.heappush(self._marks, ts_ms)
        return step

    def _progress_value(self) -> bytes:
        return encode_ms(self.stream_time.ms) + encode_ms(self._seq)

    def _progress_writes(self) -> list[DeferredWrite]:
        """The progress as the store takes it at a commit (a record was stored since the last)."""
        self._progress_deferred = False
        return [(_PROGRESS_KEY, self._progress_value(), self._progress_stamp)]

    def _emit_closed(self, out: list[JoinResult]) -> None:
        """Emit the unpaired records whose window closed, then drop the expired records."""
        now = self.stream_time.ms
        close_below = now - self.within_ms - self.grace_ms  # closed: ts < close_below
        marks = self._marks
        if marks and marks[0] < close_below:
            while marks and marks[0] < close_below:
                heapq.heappop(marks)
            lo = _UNPAIRED + encode_ms(self._closed_below)
            for mark, _ in list(self.store.range(lo, _UNPAIRED + encode_ms(close_below))):
                side = _SIDE_OF[mark[17:18]]
                key, ts, _seq = decode_window_key(mark[18:])
                raw = self.store.get(_DATA + mark[17:])
                self.store.delete(mark)
                if raw is None:  # cannot happen: a record is stored until it expires, after closing
                    continue
                value = self._codecs[side].loads(raw)
                out.append(JoinResult(key, ts, value, None) if side == "left" else JoinResult(key, ts, None, value))
        self._closed_below = close_below
        expire_below = close_below - self.within_ms  # expired: ts < now - 2 * within - grace
        if expire_below - self._expired_below >= self._expire_step_ms:
            by_time = self._by_time
            assert by_time is not None  # loaded before stream time first moves
            while by_time and by_time[0][0] < expire_below:
                self.store.delete(heapq.heappop(by_time)[1])
            self._expired_below = expire_below

    def _load_by_time(self) -> list[tuple[int, bytes]]:
        """The heap of stored records by time, from the store (its unstored writes included)."""
        by_time = [(decode_ms(data_key[-16:-8]), data_key) for data_key, _ in self.store.range(_DATA, _BY_TIME)]
        heapq.heapify(by_time)
        if by_time:
            # A restored store may hold records the last expiry step left (below the bound the
            # progress implies): expiry then counts its step from the oldest one.
            self._expired_below = min(self._expired_below, by_time[0][0])
        for old_index_key, _ in list(self.store.range(_BY_TIME, _UNPAIRED)):  # an earlier layout's
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
        for mark, _ in self.store.range(_UNPAIRED, _UNPAIRED_END):
            side: Side = "left" if mark[17:18] == b"L" else "right"
            key, ts, _seq = decode_window_key(mark[18:])
            yield side, key, ts


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
