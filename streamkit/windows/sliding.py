"""Sliding windows: which windows a record creates and updates; plain code.

Kafka Streams' sliding-window algorithm (KIP-450), over the windows of one key. A window is
``[start, start + d]`` (``d`` = ``max_difference_ms``, both ends inclusive) and carries, beside
its aggregate, the largest timestamp of the records in it (``max_ts``). The windows that exist
for a set of records are, for each record at ``t``: its *left window* ``[t - d, t]`` (``[0, d]``
when ``t < d``) and, when some record lies in ``(t, t + 1 + d]``, its *right window*
``[t + 1, t + 1 + d]``. A window's aggregate covers exactly the records inside it.

For a record at ``ts``, ``plan_sliding`` reads the key's windows with start in
``fetch_bounds(spec, ts)`` and says:

* ``update``: the existing windows containing ``ts``: the record is added to each;
* ``create``: the windows to make, each from the initializer or from a *copy* of an existing
  window's aggregate (before this record's update), with or without this record:

  - the right window of the previous record ``p`` (largest timestamp below ``ts``), if ``ts``
    falls in it and it does not exist: initializer + record;
  - the record's left window, if missing: a copy of the window just before ``ts`` (the one
    with the largest start among those ending before ``ts``, which holds exactly the records
    of ``[ts - d, ts)``) when ``p >= ts - d``, else the initializer; + record;
  - the record's right window, if missing and a later record exists: a copy of the window
    with the largest start among those containing ``ts`` (it holds exactly the records of
    ``(ts, ts + 1 + d]``), without the record.

Lateness: a record is late when its left window is closed (``stream time > end + grace``).
Kafka Streams drops a record only when *all* windows that could hold it are closed
(``ts + d + grace < stream time``) and otherwise adds it to the open ones; but the windows
created later are seeded by copying aggregates, and those copies cannot contain a record that
skipped its own (closed) windows. Example: ``d = 3``, ``grace = 4``, records at 25, 19, 22: 19
is accepted, yet ends up in no window, while ``[19, 22]`` (made when 22 arrives) holds only
22. Dropping such a record keeps every window's aggregate equal to the records in it: every
window a record that is not late touches is then open, and ``Sliding.expire_bound`` keeps the
windows the copies read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from streamkit.windows.spec import Sliding


@dataclass(frozen=True)
class NewWindow:
    start_ms: int
    copy_from: int | None  # start of the window whose aggregate (and max_ts) seeds it
    add_record: bool


@dataclass(frozen=True)
class SlidingPlan:
    update: list[int] = field(default_factory=list)  # starts of windows to add the record to
    create: list[NewWindow] = field(default_factory=list)


def fetch_bounds(spec: Sliding, ts_ms: int) -> tuple[int, int]:
    """The starts ``[lo, hi]`` of the windows ``plan_sliding`` must see for a record at ``ts``."""
    return max(0, ts_ms - 2 * spec.max_difference_ms), ts_ms + 1


def sliding_late(spec: Sliding, ts_ms: int, stream_time_ms: int) -> bool:
    return ts_ms < 0 or spec.closed(spec.left_window(ts_ms)[1], stream_time_ms)


def plan_sliding(spec: Sliding, ts_ms: int, windows: Sequence[tuple[int, int]]) -> SlidingPlan:
    """Plan a record at ``ts_ms`` given ``windows``: ``(start, max_ts)`` of the key's windows
    with start in ``fetch_bounds``, sorted by start.

    >>> spec = Sliding(10 / 1000)  # d = 10 ms
    >>> plan_sliding(spec, 15, [(0, 9), (3, 9)])  # records at 2 and 9 exist
    SlidingPlan(update=[], create=[NewWindow(start_ms=10, copy_from=None, add_record=True), \
NewWindow(start_ms=5, copy_from=3, add_record=True)])
    """
    d = spec.max_difference_ms
    left_start = spec.left_window(ts_ms)[0]
    starts: set[int] = set()
    plan = SlidingPlan()
    left_exists = right_exists = False
    previous: int | None = None  # the largest record timestamp below ts the windows show
    left_source: int | None = None
    right_source: int | None = None
    for start, max_ts in windows:
        starts.add(start)
        end = start + d
        if start == ts_ms + 1:
            right_exists = True
        elif start <= ts_ms <= end:
            plan.update.append(start)
            if start == left_start:
                left_exists = True
                if max_ts < ts_ms:
                    previous = max_ts
            if max_ts > ts_ms:
                right_source = start  # sorted by start: the last one has the largest start
        elif end < ts_ms:
            left_source = start
            previous = max_ts
        else:
            raise ValueError(f"window starting at {start} is outside the fetch bounds of {ts_ms}")
    if previous is not None:
        right_of_previous = previous + 1
        if (
            right_of_previous not in starts
            and right_of_previous != left_start
            and right_of_previous + d >= ts_ms
        ):
            plan.create.append(NewWindow(right_of_previous, None, True))
    if not left_exists:
        seed = left_source if previous is not None and previous >= ts_ms - d else None
        plan.create.append(NewWindow(left_start, seed, True))
    if not right_exists and right_source is not None:
        plan.create.append(NewWindow(ts_ms + 1, right_source, False))
    return plan
