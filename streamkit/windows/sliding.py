"""Sliding windows: which windows a record writes, in Kafka Streams' order; plain code.

Kafka Streams' sliding-window algorithm (KIP-450, ``KStreamSlidingWindowAggregate``), over the
windows of one key, followed exactly. A window is ``[start, start + d]`` (``d`` =
``max_difference_ms``, both ends inclusive) and carries, beside its aggregate, the largest
timestamp of the records it aggregated (``max_ts``). For each record at ``t`` there is its
*left window* ``[t - d, t]`` (``[0, d]`` when ``t < d``: ``processEarly``) and, when a later
record falls in ``(t, t + 1 + d]``, its *right window* ``[t + 1, t + 1 + d]``. A new window is
not computed from the records in it but *copied* from an existing window's aggregate.

A record at ``ts``, at stream time ``st`` (after observing it):

* is late, and dropped whole, only when every window that could hold it is closed:
  ``ts + d < st - grace`` (``process``); otherwise it goes to the windows still *open*
  (``end >= st - grace``: ``updateWindowAndForward``) and skips the closed ones;
* reads the key's windows with start in ``fetch_bounds``: ``[ts - 2d, ts + 1]``, less the
  windows past the store's retention (``AbstractRocksDBSegmentedBytesStore.getActualFrom``:
  ``start > store time - retention``, *store time* being the largest window start ever
  written to the aggregator's store, every key's);
* ``plan_sliding`` then lists the window writes (``SlidingOp``) in Kafka Streams' order
  (``processReverse``, the windows newest first, then ``createWindows``):

  - each window containing ``ts`` and ending after it: + record; the newest of them, as read
    before this record, is the *right aggregate*;
  - the record's left window, if it exists: + record; if it already holds a record at ``ts``,
    nothing is created;
  - the newest window ending before ``ts`` is the *left aggregate*; the *previous record*
    ``p`` is its ``max_ts`` (or the existing left window's, when below ``ts``);
  - the right window of ``p``, if missing and ``p + 1 + d >= ts``: initializer + record;
  - the left window, if missing: a copy of the left aggregate when ``p >= ts - d``, else the
    initializer; + record. When ``p + 1 == ts - d`` this and the previous item write the
    same window, twice, as Kafka Streams does;
  - the record's right window, if missing and the right aggregate holds a later record: a
    copy of the right aggregate with its ``max_ts``, without the record (it is always open).

So a record whose own left window is closed still counts in the open windows it falls in (the
right window of the record before it, say), and a window copied later from a closed one does
not hold it: the windows are Kafka Streams', not a function of the records they span. A
window of a record is emitted on close once ``st >= end + grace``; it still takes records
until ``st > end + grace``, and each such update emits it again (``aggregate.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamkit.windows.spec import Sliding


@dataclass(frozen=True)
class SlidingOp:
    """One window write: the window starting at ``start_ms`` gets the aggregate of the window
    starting at ``source`` as read before this record (``None``: the initializer), plus the
    record when ``add_record``. Its ``max_ts`` is the source's (the record's timestamp for
    the initializer), raised to the record's when it is added."""

    start_ms: int
    source: int | None
    add_record: bool


def fetch_bounds(spec: Sliding, ts_ms: int, store_time_ms: int, retention_ms: int) -> tuple[int, int]:
    """The starts ``[lo, hi]`` of the windows ``plan_sliding`` reads for a record at ``ts``:
    ``store_time_ms`` is the largest window start written so far (-1: none)."""
    lo = 0 if ts_ms < spec.max_difference_ms else ts_ms - 2 * spec.max_difference_ms
    return max(0, lo, store_time_ms - retention_ms + 1), ts_ms + 1


def sliding_late(spec: Sliding, ts_ms: int, stream_time_ms: int) -> bool:
    """Whether every window a record at ``ts_ms`` could go to is closed (it is dropped)."""
    return ts_ms < 0 or ts_ms + spec.max_difference_ms < stream_time_ms - spec.grace_ms


def plan_sliding(
    spec: Sliding, ts_ms: int, windows: Sequence[tuple[int, int]], stream_time_ms: int
) -> list[SlidingOp]:
    """The window writes of a record at ``ts_ms`` (not late), in order, given ``windows``:
    ``(start, max_ts)`` of the key's windows with start in ``fetch_bounds``, by start.
    Writes to closed windows are left out.

    >>> spec = Sliding(10 / 1000)  # d = 10 ms
    >>> plan_sliding(spec, 15, [(0, 9), (3, 9)], 15)  # records at 2 and 9 exist
    [SlidingOp(start_ms=10, source=None, add_record=True), \
SlidingOp(start_ms=5, source=3, add_record=True)]
    """
    d = spec.max_difference_ms
    ops = _plan_early(ts_ms, windows) if ts_ms < d else _plan(d, ts_ms, windows)
    close = stream_time_ms - spec.grace_ms
    # Every write adding the record checks that its window is open; the copy into the
    # record's right window does not (it ends after ts + d, so it is open).
    return [op for op in ops if not op.add_record or op.start_ms + d >= close]


def _plan(d: int, ts: int, windows: Sequence[tuple[int, int]]) -> list[SlidingOp]:
    """``processReverse`` and ``createWindows``, for ``ts >= d``."""
    ops: list[SlidingOp] = []
    seen: set[int] = set()
    left_agg: int | None = None
    right_agg: tuple[int, int] | None = None  # (start, max_ts)
    left_exists = right_exists = False
    previous: int | None = None
    for start, max_ts in reversed(windows):
        seen.add(start)
        end = start + d
        if start == ts + 1:
            right_exists = True
        elif end > ts:
            if right_agg is None:
                right_agg = (start, max_ts)
            ops.append(SlidingOp(start, start, True))
        elif end == ts:
            left_exists = True
            ops.append(SlidingOp(start, start, True))
            if max_ts >= ts:  # a record at ts made every window already
                return ops
            previous = max_ts
        else:
            left_agg = start
            previous = max_ts
            break
    if previous is not None:
        right_of_previous = previous + 1
        if right_of_previous not in seen and right_of_previous + d >= ts:
            ops.append(SlidingOp(right_of_previous, None, True))
    if not left_exists:
        seed = left_agg if previous is not None and ts - d <= previous else None
        ops.append(SlidingOp(ts - d, seed, True))
    if not right_exists and right_agg is not None and right_agg[1] > ts:
        ops.append(SlidingOp(ts + 1, right_agg[0], False))
    return ops


def _plan_early(ts: int, windows: Sequence[tuple[int, int]]) -> list[SlidingOp]:
    """``processEarly``: a record before ``d`` goes to the window ``[0, d]``, which holds every
    such record, instead of a left window starting below 0."""
    ops: list[SlidingOp] = []
    seen: set[int] = set()
    combined: tuple[int, int] | None = None  # the window [0, d]: (0, max_ts)
    right_agg: tuple[int, int] | None = None
    right_exists = False
    previous: int | None = None
    for start, max_ts in windows:
        seen.add(start)
        if start == 0:
            combined = (start, max_ts)
            if max_ts < ts:
                previous = max_ts
        elif start <= ts:
            right_agg = (start, max_ts)
            ops.append(SlidingOp(start, start, True))
        elif start == ts + 1:
            right_exists = True
        else:
            raise ValueError(f"window starting at {start} is outside the fetch bounds of {ts}")
    if right_agg is None and combined is not None and combined[1] > ts:
        right_agg = combined
    if not right_exists and right_agg is not None and right_agg[1] > ts:
        ops.append(SlidingOp(ts + 1, right_agg[0], False))
    if previous is not None and previous + 1 not in seen:
        ops.append(SlidingOp(previous + 1, None, True))
    ops.append(SlidingOp(0, 0 if combined is not None else None, True))
    return ops
